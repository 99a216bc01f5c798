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

// ---- The fused kernels' preconditions (core/device_kernels.h). Their
// kernels walk raw contiguous memory by element counts, so an operand of
// the wrong dtype, size, layout or device would be read or written as if it
// were right: refuse those instead. ----


// t is defined, of `dtype`, with `numel` elements.
bool Is(const Tensor& t, DType dtype, int64_t numel) {
  return t.defined() && t.dtype() == dtype && t.numel() == numel;
}

// t is undefined, or as Is.
bool IsOptional(const Tensor& t, DType dtype, int64_t numel) {
  return !t.defined() || Is(t, dtype, numel);
}

// Whether a and b share some bytes without being the same view's start
// (a kernel may write out over its input only element for element).
bool PartlyOverlaps(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.raw_data() == b.raw_data()) return false;
  const char* pa = static_cast<const char*>(a.raw_data());
  const char* pb = static_cast<const char*>(b.raw_data());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

// InvalidArgument "cuda <op>(<operands>): <what>" unless `ok`.
absl::Status Require(bool ok, const char* op, std::initializer_list<const Tensor*> operands,
                     absl::string_view what) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(Describe(op, operands), ": ", what));
}

// The index of anchor's CUDA device, once every defined operand is
// contiguous and on it.
absl::StatusOr<int> FusedDevice(const char* op, const Tensor& anchor,
                                std::initializer_list<const Tensor*> operands) {
  bool ok = anchor.defined() && anchor.device().is_cuda();
  for (const Tensor* t : operands) {
    if (ok && t->defined()) ok = t->is_contiguous() && t->device() == anchor.device();
  }
  TPX_RETURN_IF_ERROR(Require(
      ok, op, operands,
      absl::StrCat("operands must be contiguous and on ",
                   anchor.defined() ? anchor.device().ToString() : "one CUDA device")));
  return anchor.device().index;
}

// Scratch device memory for one call, from the caching allocator. Giving it
// back when the call returns is safe although the kernels using it may not
// have run yet: every later user of the block is queued behind them on the
// device's compute stream.
class Scratch {
 public:
  Scratch(int device, size_t bytes)
      : device_(device),
        bytes_(bytes),
        ptr_(bytes > 0 ? GetCudaAllocator(device).Allocate(bytes) : nullptr) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    if (ptr_ != nullptr) GetCudaAllocator(device_).Deallocate(ptr_, bytes_);
  }

  // OK, or ResourceExhausted naming `op` when the memory could not be had.
  absl::Status status(const char* op) const {
    if (bytes_ == 0 || ptr_ != nullptr) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrCat("cuda ", op, ": no device memory for ",
                                                     bytes_, " bytes of scratch on cuda:",
                                                     device_));
  }
  template <typename T>
  T* get() const {
    return static_cast<T*>(ptr_);
  }

 private:
  int device_;
  size_t bytes_;
  void* ptr_;
};

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

  absl::Status GemmBatched(int index, int64_t batch, bool trans_a, bool trans_b, int64_t m,
                           int64_t n, int64_t k, float alpha, DType ab_dtype, const void* a,
                           int64_t lda, int64_t stride_a, const void* b, int64_t ldb,
                           int64_t stride_b, float beta, DType c_dtype, void* c, int64_t ldc,
                           int64_t stride_c) override {
    DeviceGuard guard(index);
    TPX_RETURN_IF_ERROR(guard.status());
    TPX_ASSIGN_OR_RETURN(Stream * stream, cuda::CurrentStream(index));
    TPX_ASSIGN_OR_RETURN(const CublasHandle* blas, BlasHandle(index));
    return cuda::GemmBatched(*blas, *stream, batch, trans_a, trans_b, m, n, k, alpha, ab_dtype, a,
                             lda, stride_a, b, ldb, stride_b, beta, c_dtype, c, ldc, stride_c);
  }

  // ---- Fused transformer kernels (fused_nn.cu). ----

  absl::Status LayerNorm(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                         const Tensor& weight, const Tensor& bias, int64_t rows, int64_t h,
                         double eps) override {
    constexpr const char* kOp = "LayerNorm";
    const auto operands = {&y, &mean, &rstd, &x, &weight, &bias};
    TPX_ASSIGN_OR_RETURN(const int device, FusedDevice(kOp, x, operands));
    const DType dtype = x.dtype();
    TPX_RETURN_IF_ERROR(Require(rows >= 0 && h >= 0 && IsFloatingPoint(dtype) &&
                                    Is(x, dtype, rows * h) && Is(y, dtype, rows * h),
                                kOp, operands,
                                "x and y must share a floating dtype and have rows * h elements"));
    TPX_RETURN_IF_ERROR(Require(Is(mean, DType::kF32, rows) && Is(rstd, DType::kF32, rows), kOp,
                                operands, "mean and rstd must be f32 with one element per row"));
    TPX_RETURN_IF_ERROR(Require(IsOptional(weight, DType::kF32, h) &&
                                    IsOptional(bias, DType::kF32, h),
                                kOp, operands, "weight and bias must be f32 [h] or undefined"));
    return Run(
        device, [&] { return Describe(kOp, operands); },
        [&](cudaStream_t stream) {
          return LaunchLayerNorm(dtype, x.raw_data(), static_cast<const float*>(weight.raw_data()),
                                 static_cast<const float*>(bias.raw_data()), y.raw_data(),
                                 mean.data<float>(), rstd.data<float>(), rows, h,
                                 static_cast<float>(eps), stream);
        });
  }

  absl::Status LayerNormBackward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                 const Tensor& grad, const Tensor& x, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& weight, int64_t rows,
                                 int64_t h) override {
    constexpr const char* kOp = "LayerNormBackward";
    const auto operands = {&dx, &dweight, &dbias, &grad, &x, &mean, &rstd, &weight};
    TPX_ASSIGN_OR_RETURN(const int device, FusedDevice(kOp, x, operands));
    const DType dtype = x.dtype();
    TPX_RETURN_IF_ERROR(Require(rows >= 0 && h >= 0 && IsFloatingPoint(dtype) &&
                                    Is(x, dtype, rows * h) && Is(grad, dtype, rows * h) &&
                                    IsOptional(dx, dtype, rows * h),
                                kOp, operands,
                                "x, grad and dx must share a floating dtype and have rows * h "
                                "elements"));
    TPX_RETURN_IF_ERROR(Require(Is(mean, DType::kF32, rows) && Is(rstd, DType::kF32, rows), kOp,
                                operands, "mean and rstd must be f32 with one element per row"));
    TPX_RETURN_IF_ERROR(Require(IsOptional(weight, DType::kF32, h) &&
                                    IsOptional(dweight, DType::kF32, h) &&
                                    IsOptional(dbias, DType::kF32, h),
                                kOp, operands,
                                "weight, dweight and dbias must be f32 [h] or undefined"));
    if (!dx.defined() && !dweight.defined() && !dbias.defined()) return absl::OkStatus();
    // One column-sum workspace each for dweight and dbias, in that order.
    const int64_t sums = (dweight.defined() ? 1 : 0) + (dbias.defined() ? 1 : 0);
    Scratch scratch(device, static_cast<size_t>(sums * h * ColumnSumChunks(rows, h)) *
                                sizeof(float));
    TPX_RETURN_IF_ERROR(scratch.status(kOp));
    return Run(
        device, [&] { return Describe(kOp, operands); },
        [&](cudaStream_t stream) {
          return LaunchLayerNormBackward(
              dtype, grad.raw_data(), x.raw_data(), mean.data<float>(), rstd.data<float>(),
              static_cast<const float*>(weight.raw_data()), dx.raw_data(),
              static_cast<float*>(dweight.raw_data()), static_cast<float*>(dbias.raw_data()),
              scratch.get<float>(), rows, h, stream);
        });
  }

  absl::Status ScaledSoftmax(const Tensor& out, const Tensor& in, int64_t batch, int64_t m,
                             int64_t n, double scale, bool causal) override {
    constexpr const char* kOp = "ScaledSoftmax";
    const auto operands = {&out, &in};
    TPX_ASSIGN_OR_RETURN(const int device, FusedDevice(kOp, in, operands));
    const DType dtype = in.dtype();
    const int64_t numel = batch * m * n;
    TPX_RETURN_IF_ERROR(Require(batch >= 0 && m >= 0 && n >= 0 && IsFloatingPoint(dtype) &&
                                    Is(in, dtype, numel) && Is(out, dtype, numel),
                                kOp, operands,
                                "in and out must share a floating dtype and have batch * m * n "
                                "elements"));
    return Run(
        device, [&] { return Describe(kOp, operands); },
        [&](cudaStream_t stream) {
          return LaunchScaledSoftmax(dtype, in.raw_data(), out.raw_data(), batch, m, n,
                                     static_cast<float>(scale), causal, stream);
        });
  }

  absl::Status ScaledSoftmaxBackward(const Tensor& dx, const Tensor& grad, const Tensor& y,
                                     int64_t rows, int64_t n, double scale) override {
    constexpr const char* kOp = "ScaledSoftmaxBackward";
    const auto operands = {&dx, &grad, &y};
    TPX_ASSIGN_OR_RETURN(const int device, FusedDevice(kOp, y, operands));
    const DType dtype = y.dtype();
    TPX_RETURN_IF_ERROR(Require(rows >= 0 && n >= 0 && IsFloatingPoint(dtype) &&
                                    Is(y, dtype, rows * n) && Is(grad, dtype, rows * n) &&
                                    Is(dx, dtype, rows * n),
                                kOp, operands,
                                "dx, grad and y must share a floating dtype and have rows * n "
                                "elements"));
    return Run(
        device, [&] { return Describe(kOp, operands); },
        [&](cudaStream_t stream) {
          return LaunchScaledSoftmaxBackward(dtype, grad.raw_data(), y.raw_data(), dx.raw_data(),
                                             rows, n, static_cast<float>(scale), stream);
        });
  }

  absl::Status BiasGelu(const Tensor& y, const Tensor& x, const Tensor& bias, int64_t rows,
                        int64_t h) override {
    constexpr const char* kOp = "BiasGelu";
    const auto operands = {&y, &x, &bias};
    TPX_ASSIGN_OR_RETURN(const int device, FusedDevice(kOp, x, operands));
    const DType dtype = x.dtype();
    TPX_RETURN_IF_ERROR(Require(rows >= 0 && h >= 0 && IsFloatingPoint(dtype) &&
                                    Is(x, dtype, rows * h) && Is(y, dtype, rows * h) &&
                                    Is(bias, dtype, h),
                                kOp, operands,
                                "x, y and bias must share a floating dtype; x and y [rows, h], "
                                "bias [h]"));
    return Run(
        device, [&] { return Describe(kOp, operands); },
        [&](cudaStream_t stream) {
          return LaunchBiasGelu(dtype, x.raw_data(), bias.raw_data(), y.raw_data(), rows, h,
                                stream);
        });
  }

  absl::Status BiasGeluBackward(const Tensor& dx, const Tensor& dbias, const Tensor& grad,
                                const Tensor& x, const Tensor& bias, int64_t rows,
                                int64_t h) override {
    constexpr const char* kOp = "BiasGeluBackward";
    const auto operands = {&dx, &dbias, &grad, &x, &bias};
    TPX_ASSIGN_OR_RETURN(const int device, FusedDevice(kOp, x, operands));
    const DType dtype = x.dtype();
    TPX_RETURN_IF_ERROR(Require(rows >= 0 && h >= 0 && IsFloatingPoint(dtype) &&
                                    Is(x, dtype, rows * h) && Is(grad, dtype, rows * h) &&
                                    Is(dx, dtype, rows * h) && Is(bias, dtype, h) &&
                                    IsOptional(dbias, dtype, h),
                                kOp, operands,
                                "dx, grad, x, bias and dbias must share a floating dtype; dx, "
                                "grad and x [rows, h], bias and dbias [h]"));
    Scratch scratch(device, dbias.defined() ? static_cast<size_t>(h * ColumnSumChunks(rows, h)) *
                                                  sizeof(float)
                                            : 0);
    TPX_RETURN_IF_ERROR(scratch.status(kOp));
    return Run(
        device, [&] { return Describe(kOp, operands); },
        [&](cudaStream_t stream) {
          return LaunchBiasGeluBackward(dtype, grad.raw_data(), x.raw_data(), bias.raw_data(),
                                        dx.raw_data(), dbias.raw_data(), scratch.get<float>(),
                                        rows, h, stream);
        });
  }

  // ---- Fused training kernels (fused_training.cu). ----

  absl::Status CrossEntropyStats(const Tensor& stats, const Tensor& logits, const Tensor& target,
                                 int64_t rows, int64_t v) override {
    constexpr const char* kOp = "CrossEntropyStats";
    const auto operands = {&stats, &logits, &target};
    TPX_ASSIGN_OR_RETURN(const int device, FusedDevice(kOp, logits, operands));
    const DType dtype = logits.dtype();
    TPX_RETURN_IF_ERROR(Require(rows >= 0 && v >= 0 && IsFloatingPoint(dtype) &&
                                    Is(logits, dtype, rows * v) &&
                                    Is(stats, DType::kF32, rows * 4) &&
                                    Is(target, DType::kI64, rows),
                                kOp, operands,
                                "logits must be floating [rows, v], stats f32 [rows, 4] and "
                                "target i64 [rows]"));
    return Run(
        device, [&] { return Describe(kOp, operands); },
        [&](cudaStream_t stream) {
          return LaunchCrossEntropyStats(dtype, logits.raw_data(), target.data<int64_t>(),
                                         stats.data<float>(), rows, v, stream);
        });
  }

  absl::Status CrossEntropyBackward(const Tensor& dx, const Tensor& logits, const Tensor& lse,
                                    const Tensor& g, const Tensor& target, int64_t rows,
                                    int64_t v, float smooth_over_k, float target_coeff) override {
    constexpr const char* kOp = "CrossEntropyBackward";
    const auto operands = {&dx, &logits, &lse, &g, &target};
    TPX_ASSIGN_OR_RETURN(const int device, FusedDevice(kOp, logits, operands));
    const DType dtype = logits.dtype();
    TPX_RETURN_IF_ERROR(Require(rows >= 0 && v >= 0 && IsFloatingPoint(dtype) &&
                                    Is(logits, dtype, rows * v) && Is(dx, dtype, rows * v) &&
                                    Is(lse, DType::kF32, rows) && Is(g, DType::kF32, rows) &&
                                    Is(target, DType::kI64, rows),
                                kOp, operands,
                                "logits and dx must be [rows, v] of one floating dtype, lse and "
                                "g f32 [rows], target i64 [rows]"));
    TPX_RETURN_IF_ERROR(Require(!PartlyOverlaps(dx, logits), kOp, operands,
                                "dx must be logits itself or not overlap it"));
    return Run(
        device, [&] { return Describe(kOp, operands); },
        [&](cudaStream_t stream) {
          return LaunchCrossEntropyBackward(dtype, logits.raw_data(), lse.data<float>(),
                                            g.data<float>(), target.data<int64_t>(),
                                            dx.raw_data(), rows, v, smooth_over_k, target_coeff,
                                            stream);
        });
  }

  absl::Status SumOfSquares(const Tensor& x, int64_t n, double* out) override {
    constexpr const char* kOp = "SumOfSquares";
    const auto operands = {&x};
    TPX_ASSIGN_OR_RETURN(const int device, FusedDevice(kOp, x, operands));
    TPX_RETURN_IF_ERROR(Require(n >= 0 && IsFloatingPoint(x.dtype()) && x.numel() == n, kOp,
                                operands, absl::StrCat("x must be floating with n = ", n,
                                                       " elements")));
    Scratch scratch(device, kSumOfSquaresWorkspace * sizeof(double));
    TPX_RETURN_IF_ERROR(scratch.status(kOp));
    TPX_RETURN_IF_ERROR(Run(
        device, [&] { return Describe(kOp, operands); },
        [&](cudaStream_t stream) {
          return LaunchSumOfSquares(x.dtype(), x.raw_data(), n, scratch.get<double>(), stream);
        }));
    // The sum is element 0 of the workspace; the copy waits for the kernels.
    return CopyToHost(out, scratch.get<double>(), sizeof(double), device);
  }

  absl::Status AdamWStep(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                         const Tensor& exp_avg_sq, const Tensor& working, int64_t n,
                         const AdamWCoefficients& c) override {
    constexpr const char* kOp = "AdamWStep";
    const auto operands = {&param, &grad, &exp_avg, &exp_avg_sq, &working};
    TPX_ASSIGN_OR_RETURN(const int device, FusedDevice(kOp, param, operands));
    TPX_RETURN_IF_ERROR(Require(n >= 0 && Is(param, DType::kF32, n) &&
                                    Is(exp_avg, DType::kF32, n) &&
                                    Is(exp_avg_sq, DType::kF32, n) &&
                                    (Is(grad, DType::kF32, n) || Is(grad, DType::kBF16, n)) &&
                                    IsOptional(working, DType::kBF16, n),
                                kOp, operands,
                                "param, exp_avg and exp_avg_sq must be f32, grad f32 or bf16 "
                                "and working bf16 or undefined, each of n elements"));
    return Run(
        device, [&] { return Describe(kOp, operands); },
        [&](cudaStream_t stream) {
          return LaunchAdamWStep(param.data<float>(), grad.dtype(), grad.raw_data(),
                                 exp_avg.data<float>(), exp_avg_sq.data<float>(),
                                 working.raw_data(), n, c, stream);
        });
  }

  absl::Status DropoutAdd(const Tensor& out, const Tensor& x, const Tensor& bias,
                          const Tensor& keep, const Tensor& residual, int64_t n, int64_t bias_n,
                          float scale) override {
    constexpr const char* kOp = "DropoutAdd";
    const auto operands = {&out, &x, &bias, &keep, &residual};
    TPX_ASSIGN_OR_RETURN(const int device, FusedDevice(kOp, x, operands));
    const DType dtype = x.dtype();
    TPX_RETURN_IF_ERROR(Require(n >= 0 && IsFloatingPoint(dtype) && Is(x, dtype, n) &&
                                    Is(out, dtype, n) && IsOptional(residual, dtype, n) &&
                                    IsOptional(keep, DType::kBool, n),
                                kOp, operands,
                                "out, x and residual must share a floating dtype, keep be bool, "
                                "each of n elements"));
    TPX_RETURN_IF_ERROR(Require(!bias.defined() || (Is(bias, dtype, bias_n) && bias_n > 0 &&
                                                    n % bias_n == 0),
                                kOp, operands,
                                absl::StrCat("bias must have x's dtype and bias_n = ", bias_n,
                                             " elements, a divisor of n = ", n)));
    TPX_RETURN_IF_ERROR(Require(!PartlyOverlaps(out, x) && !PartlyOverlaps(out, residual), kOp,
                                operands, "out must be x, residual or apart from both"));
    return Run(
        device, [&] { return Describe(kOp, operands); },
        [&](cudaStream_t stream) {
          return LaunchDropoutAdd(dtype, out.raw_data(), x.raw_data(), bias.raw_data(),
                                  keep.raw_data(), residual.raw_data(), n, bias_n, scale, stream);
        });
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
