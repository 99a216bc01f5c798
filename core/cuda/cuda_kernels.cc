#include "core/cuda/cuda_kernels.h"

#include <array>
#include <cstring>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/cuda/collapse_dims.h"
#include "core/cuda/copy.h"
#include "core/cuda/cuda_status.h"
#include "core/cuda/current_stream.h"
#include "core/cuda/device_allocator.h"
#include "core/cuda/device_guard.h"
#include "core/cuda/gemm.h"
#include "core/cuda/launch.h"
#include "core/log.h"
#include "core/status_macros.h"

namespace tpx::cuda {
namespace {

// ---- Op names and their kernel-side counterparts. ----

const char* OpName(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "Add";
    case BinaryOp::kSub: return "Sub";
    case BinaryOp::kMul: return "Mul";
    case BinaryOp::kDiv: return "Div";
    case BinaryOp::kEq: return "Eq";
    case BinaryOp::kLt: return "Lt";
    case BinaryOp::kGe: return "Ge";
    case BinaryOp::kAnd: return "LogicalAnd";
    case BinaryOp::kOr: return "LogicalOr";
    case BinaryOp::kGeluBackward: return "GeluBackward";
  }
  return "?";
}

const char* OpName(UnaryOp op) {
  switch (op) {
    case UnaryOp::kNeg: return "Neg";
    case UnaryOp::kExp: return "Exp";
    case UnaryOp::kLog: return "Log";
    case UnaryOp::kSqrt: return "Sqrt";
    case UnaryOp::kTanh: return "Tanh";
    case UnaryOp::kRelu: return "Relu";
    case UnaryOp::kGelu: return "Gelu";
    case UnaryOp::kNot: return "LogicalNot";
    case UnaryOp::kScale: return "Scale";
    case UnaryOp::kLtScalar: return "LtScalar";
    case UnaryOp::kGeScalar: return "GeScalar";
    case UnaryOp::kEqScalar: return "EqScalar";
  }
  return "?";
}

const char* OpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "Sum";
    case ReduceOp::kMean: return "Mean";
    case ReduceOp::kMax: return "Max";
    case ReduceOp::kArgmax: return "Argmax";
  }
  return "?";
}

// "cuda Add(f32[2, 3], bf16[2, 3])" for error messages.
std::string Describe(absl::string_view op, std::initializer_list<const Tensor*> tensors) {
  std::string s = absl::StrCat("cuda ", op, "(");
  const char* sep = "";
  for (const Tensor* t : tensors) {
    absl::StrAppend(&s, sep, t->ToString());
    sep = ", ";
  }
  return absl::StrCat(s, ")");
}

// ---- Running work on a device. ----

// Makes `device` current for the call, then enqueues `launch` on its compute
// stream; a launch error is described by `what` (built only on failure).
absl::Status Run(int device, absl::FunctionRef<std::string()> what,
                 absl::FunctionRef<cudaError_t(cudaStream_t)> launch) {
  DeviceGuard guard(device);
  TPX_RETURN_IF_ERROR(guard.status());
  TPX_ASSIGN_OR_RETURN(Stream * stream, CurrentStream(device));
  const cudaError_t rc = launch(stream->get());
  if (rc == cudaSuccess) return absl::OkStatus();
  return CudaStatus(rc, what());
}

// The StridedLayout of elementwise operands, out first; all have out's shape.
absl::StatusOr<StridedLayout> LayoutOf(const char* op,
                                       std::initializer_list<const Tensor*> operands) {
  const Tensor& out = **operands.begin();
  std::array<absl::Span<const int64_t>, StridedLayout::kMaxOperands> strides;
  size_t count = 0;
  for (const Tensor* t : operands) {
    if (t->shape() != out.shape() || count == strides.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          Describe(op, operands), ": operands must all have the output's shape"));
    }
    strides[count++] = t->strides();
  }
  return CollapseDims(out.shape(), absl::MakeConstSpan(strides.data(), count), op);
}

// `value` as one element of `dtype`, converted like the CPU kernels (through
// f32 for bf16/f16, truncation for integers, != 0 for bool).
uint64_t ElementBits(DType dtype, double value) {
  uint64_t bits = 0;
  auto put = [&bits](auto element) { std::memcpy(&bits, &element, sizeof(element)); };
  switch (dtype) {
    case DType::kF32: put(static_cast<float>(value)); break;
    case DType::kBF16: put(FloatToBF16(static_cast<float>(value))); break;
    case DType::kF16: put(FloatToF16(static_cast<float>(value))); break;
    case DType::kI32: put(static_cast<int32_t>(value)); break;
    case DType::kI64: put(static_cast<int64_t>(value)); break;
    case DType::kBool: put(static_cast<uint8_t>(value != 0.0)); break;
  }
  return bits;
}

// outer / inner element counts around `dim` of `shape`.
std::pair<int64_t, int64_t> OuterInner(const Shape& shape, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim) outer *= shape[d];
    if (d > dim) inner *= shape[d];
  }
  return {outer, inner};
}

// The index kernels' preconditions: `a` and `b` (the data operands) share a
// dtype, and all three tensors are contiguous.
absl::Status CheckIndexOperands(const char* op, const Tensor& a, const Tensor& b,
                                const Tensor& index) {
  if (a.dtype() == b.dtype() && a.is_contiguous() && b.is_contiguous() &&
      index.is_contiguous()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      Describe(op, {&a, &b, &index}), ": operands must be contiguous, with one data dtype"));
}

// The device count never changes while a process runs: look it up once.
struct VisibleDevices {
  int count = 0;
  std::string why;  // why there are none
};

const VisibleDevices& Visible() {
  static const VisibleDevices* visible = [] {
    auto* v = new VisibleDevices();
    v->count = DeviceCount(&v->why);
    return v;
  }();
  return *visible;
}

// One cuBLAS handle per (thread, device): handles are not thread-safe, and
// creating one per call would allocate workspace every time.
absl::StatusOr<const CublasHandle*> BlasHandle(int device) {
  thread_local std::map<int, CublasHandle> handles;
  auto it = handles.find(device);
  if (it == handles.end()) {
    TPX_ASSIGN_OR_RETURN(CublasHandle handle, CublasHandle::Create(device));
    it = handles.emplace(device, std::move(handle)).first;
  }
  return &it->second;
}

class CudaKernels final : public DeviceKernels {
 public:
  absl::Status CheckDevice(int index) override {
    const VisibleDevices& visible = Visible();
    if (visible.count == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("no CUDA device visible (", visible.why, ")"));
    }
    if (index < 0 || index >= visible.count) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cuda:", index, " does not exist; ", visible.count, " CUDA devices visible"));
    }
    // Creating the stream here means CurrentStream() below cannot fail.
    absl::Status stream = cuda::CurrentStream(index).status();
    if (!stream.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("cuda:", index, " is not usable: ", stream.message()));
    }
    return absl::OkStatus();
  }

  Allocator& allocator(int index) override { return GetCudaAllocator(index); }

  void* CurrentStream(int index) override {
    absl::StatusOr<Stream*> stream = cuda::CurrentStream(index);
    TPX_CHECK(stream.ok()) << "CurrentStream(" << index
                           << ") without a successful CheckDevice: " << stream.status();
    return (*stream)->get();
  }

  absl::Status CopyToHost(void* host_dst, const void* device_src, size_t bytes,
                          int index) override {
    DeviceGuard guard(index);
    TPX_RETURN_IF_ERROR(guard.status());
    TPX_ASSIGN_OR_RETURN(Stream * stream, cuda::CurrentStream(index));
    return cuda::CopyToHost(host_dst, device_src, bytes, *stream);
  }

  absl::Status CopyFromHost(void* device_dst, const void* host_src, size_t bytes,
                            int index) override {
    DeviceGuard guard(index);
    TPX_RETURN_IF_ERROR(guard.status());
    TPX_ASSIGN_OR_RETURN(Stream * stream, cuda::CurrentStream(index));
    return CopyToDevice(device_dst, host_src, bytes, *stream);
  }

  absl::Status Copy(const Tensor& dst, const Tensor& src) override {
    TPX_ASSIGN_OR_RETURN(StridedLayout layout, LayoutOf("Copy", {&dst, &src}));
    return Run(
        dst.device().index, [&] { return Describe("Copy", {&dst, &src}); },
        [&](cudaStream_t stream) {
          return LaunchCopy(layout, dst.dtype(), dst.raw_data(), src.dtype(), src.raw_data(),
                            stream);
        });
  }

  absl::Status Fill(const Tensor& dst, double value) override {
    TPX_ASSIGN_OR_RETURN(StridedLayout layout, LayoutOf("Fill", {&dst}));
    return Run(
        dst.device().index, [&] { return Describe("Fill", {&dst}); },
        [&](cudaStream_t stream) {
          return LaunchFill(layout, SizeOf(dst.dtype()), dst.raw_data(),
                            ElementBits(dst.dtype(), value), stream);
        });
  }

  absl::Status Binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b,
                      double alpha) override {
    const char* name = OpName(op);
    TPX_ASSIGN_OR_RETURN(StridedLayout layout, LayoutOf(name, {&out, &a, &b}));
    return Run(
        out.device().index, [&] { return Describe(name, {&out, &a, &b}); },
        [&](cudaStream_t stream) {
          return LaunchBinary(op, layout, out.dtype(), out.raw_data(), a.dtype(),
                              a.raw_data(), b.dtype(), b.raw_data(), alpha, stream);
        });
  }

  absl::Status Unary(UnaryOp op, const Tensor& out, const Tensor& in, double scalar) override {
    const char* name = OpName(op);
    TPX_ASSIGN_OR_RETURN(StridedLayout layout, LayoutOf(name, {&out, &in}));
    return Run(
        out.device().index, [&] { return Describe(name, {&out, &in}); },
        [&](cudaStream_t stream) {
          return LaunchUnary(op, layout, out.dtype(), out.raw_data(), in.dtype(),
                             in.raw_data(), scalar, stream);
        });
  }

  absl::Status Where(const Tensor& out, const Tensor& cond, const Tensor& a,
                     const Tensor& b) override {
    TPX_ASSIGN_OR_RETURN(StridedLayout layout, LayoutOf("Where", {&out, &cond, &a, &b}));
    return Run(
        out.device().index, [&] { return Describe("Where", {&out, &cond, &a, &b}); },
        [&](cudaStream_t stream) {
          return LaunchWhere(layout, SizeOf(out.dtype()), out.raw_data(), cond.raw_data(),
                             a.raw_data(), b.raw_data(), stream);
        });
  }

  absl::Status Reduce(ReduceOp op, const Tensor& out, const Tensor& in, int64_t outer, int64_t n,
                      int64_t inner) override {
    const char* name = OpName(op);
    return Run(
        out.device().index, [&] { return Describe(name, {&out, &in}); },
        [&](cudaStream_t stream) {
          return LaunchReduce(op, in.dtype(), in.raw_data(), out.dtype(), out.raw_data(),
                              outer, n, inner, stream);
        });
  }

  absl::Status Softmax(const Tensor& out, const Tensor& in, int64_t outer, int64_t n,
                       int64_t inner, bool log) override {
    if (out.dtype() != in.dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Describe("Softmax", {&out, &in}), ": dtypes differ"));
    }
    return Run(
        out.device().index, [&] { return Describe(log ? "LogSoftmax" : "Softmax", {&out, &in}); },
        [&](cudaStream_t stream) {
          return LaunchSoftmax(in.dtype(), in.raw_data(), out.raw_data(), outer, n, inner, log,
                               stream);
        });
  }

  // Index ops: every tensor is contiguous and src has dst's dtype (the
  // contract in core/device_kernels.h; core/ops_index.cc arranges it). The
  // kernels address raw [outer, n, inner] memory, so a strided view or a
  // dtype mismatch would silently read or scatter to the wrong elements:
  // refuse those instead.
  absl::Status IndexSelect(const Tensor& out, const Tensor& in, int64_t dim,
                           const Tensor& index) override {
    TPX_RETURN_IF_ERROR(CheckIndexOperands("IndexSelect", out, in, index));
    auto [outer, inner] = OuterInner(in.shape(), dim);
    return Run(
        out.device().index, [&] { return Describe("IndexSelect", {&out, &in, &index}); },
        [&](cudaStream_t stream) {
          return LaunchIndexSelect(SizeOf(in.dtype()), in.raw_data(), out.raw_data(),
                                   index.dtype(), index.raw_data(), outer, in.size(dim),
                                   index.numel(), inner, stream);
        });
  }

  absl::Status IndexAdd(const Tensor& dst, int64_t dim, const Tensor& index,
                        const Tensor& src) override {
    TPX_RETURN_IF_ERROR(CheckIndexOperands("IndexAdd", dst, src, index));
    auto [outer, inner] = OuterInner(dst.shape(), dim);
    return Run(
        dst.device().index, [&] { return Describe("IndexAdd", {&dst, &index, &src}); },
        [&](cudaStream_t stream) {
          return LaunchIndexAdd(dst.dtype(), dst.raw_data(), src.raw_data(), index.dtype(),
                                index.raw_data(), outer, dst.size(dim), index.numel(), inner,
                                stream);
        });
  }

  absl::Status Gemm(int index, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    float alpha, DType ab_dtype, const void* a, int64_t lda, const void* b,
                    int64_t ldb, float beta, DType c_dtype, void* c, int64_t ldc) override {
    DeviceGuard guard(index);
    TPX_RETURN_IF_ERROR(guard.status());
    TPX_ASSIGN_OR_RETURN(Stream * stream, cuda::CurrentStream(index));
    TPX_ASSIGN_OR_RETURN(const CublasHandle* blas, BlasHandle(index));
    return cuda::Gemm(*blas, *stream, trans_a, trans_b, m, n, k, alpha, ab_dtype, a, lda, b, ldb,
                      beta, c_dtype, c, ldc);
  }

};

CudaKernels& Instance() {
  static CudaKernels* kernels = new CudaKernels();  // never destroyed: used at exit
  return *kernels;
}

[[maybe_unused]] const bool kRegistered = [] {
  RegisterDeviceKernels(DeviceType::kCUDA, &Instance());
  return true;
}();

}  // namespace

DeviceKernels& CudaDeviceKernels() { return Instance(); }

}  // namespace tpx::cuda
