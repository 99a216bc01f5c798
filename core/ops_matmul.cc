// Matmul / MatmulInto / Linear on top of the Gemm interface.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/device_kernels.h"
#include "core/ops.h"
#include "core/ops_internal.h"
#include "core/status_macros.h"

namespace tpx::ops {
namespace {

using internal::CheckFloating;
using internal::CheckInput;
using internal::CheckSameDType;
using internal::Name;

// A 2-D operand as the GEMM sees it: pointer, leading dim, transpose flag.
struct GemmOperand {
  Tensor keep_alive;  // holds a copy when one was needed
  const void* data = nullptr;
  int64_t ld = 1;
  bool trans = false;
};

// Expresses the 2-D tensor `x` (logically op(x) with `trans`) as row-major
// storage with a leading dimension, copying only if neither of its dims has
// unit stride.
absl::StatusOr<GemmOperand> AsGemmOperand(const Tensor& x, bool trans) {
  const int64_t rows = x.size(0), cols = x.size(1);
  // A size-1 dim's stride is irrelevant: pick the one that makes it dense.
  const int64_t s0 = rows == 1 ? std::max<int64_t>(cols, 1) : x.stride(0);
  const int64_t s1 = cols == 1 ? 1 : x.stride(1);
  GemmOperand op;
  if (s1 == 1 && s0 >= std::max<int64_t>(cols, 1)) {
    op = {x, x.raw_data(), s0, trans};
  } else if (s0 == 1 && s1 >= std::max<int64_t>(rows, 1) && cols > 1) {
    op = {x, x.raw_data(), s1, !trans};  // column-major storage = transposed row-major
  } else {
    TPX_ASSIGN_OR_RETURN(Tensor c, x.Clone());
    op = {c, c.raw_data(), std::max<int64_t>(cols, 1), trans};
  }
  return op;
}

// A 3-D operand [batch, rows, cols] as a strided batch of GemmOperands
// sharing one leading dim; copied to dense storage only if its last two
// dims have no unit stride.
struct BatchedOperand {
  GemmOperand op;
  int64_t stride = 0;  // elements between consecutive batch entries
};

absl::StatusOr<BatchedOperand> AsBatchedOperand(const Tensor& x, bool trans) {
  const int64_t rows = x.size(1), cols = x.size(2);
  const int64_t s1 = rows == 1 ? std::max<int64_t>(cols, 1) : x.stride(1);
  const int64_t s2 = cols == 1 ? 1 : x.stride(2);
  if (s2 == 1 && s1 >= std::max<int64_t>(cols, 1)) {
    return BatchedOperand{{x, x.raw_data(), s1, trans}, x.stride(0)};
  }
  if (s1 == 1 && s2 >= std::max<int64_t>(rows, 1) && cols > 1) {
    return BatchedOperand{{x, x.raw_data(), s2, !trans}, x.stride(0)};
  }
  TPX_ASSIGN_OR_RETURN(Tensor c, x.Clone());
  return BatchedOperand{{c, c.raw_data(), std::max<int64_t>(cols, 1), trans}, rows * cols};
}

// One GEMM: out2d = alpha * op(a2d) op(b2d) + beta * out2d; out2d rows dense.
absl::Status GemmTensors(const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a,
                         bool trans_b, float alpha, float beta) {
  TPX_ASSIGN_OR_RETURN(DeviceKernels * kernels, internal::KernelsOf("Matmul", {&out, &a, &b}));
  TPX_ASSIGN_OR_RETURN(GemmOperand ga, AsGemmOperand(a, trans_a));
  TPX_ASSIGN_OR_RETURN(GemmOperand gb, AsGemmOperand(b, trans_b));
  const int64_t m = out.size(0), n = out.size(1);
  const int64_t k = trans_a ? a.size(0) : a.size(1);
  const int64_t ldc = m == 1 ? std::max<int64_t>(n, 1) : out.stride(0);
  return kernels->Gemm(out.device().index, ga.trans, gb.trans, m, n, k, alpha, a.dtype(), ga.data,
                       ga.ld, gb.data, gb.ld, beta, out.dtype(), out.raw_data(), ldc);
}

// [rows, cols] of op(t) for a 2-D t.
std::pair<int64_t, int64_t> OpShape(const Tensor& t, bool trans) {
  return trans ? std::make_pair(t.size(1), t.size(0)) : std::make_pair(t.size(0), t.size(1));
}

absl::Status CheckMatmulInputs(const Tensor& a, const Tensor& b, const char* op) {
  TPX_RETURN_IF_ERROR(CheckInput(a, op, "a"));
  TPX_RETURN_IF_ERROR(CheckInput(b, op, "b"));
  TPX_RETURN_IF_ERROR(CheckFloating(a, op, "a"));
  TPX_RETURN_IF_ERROR(internal::KernelsOf(op, {&a, &b}).status());
  return CheckSameDType(a, b, op);
}

absl::Status ShapeError(const char* op, const Tensor& a, const Tensor& b, bool ta, bool tb,
                        const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", why, " (a ", ShapeString(a.shape()),
                                                 ta ? " transposed" : "", ", b ",
                                                 ShapeString(b.shape()),
                                                 tb ? " transposed" : "", ")"));
}

}  // namespace

absl::StatusOr<Tensor> Matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  TPX_RETURN_IF_ERROR(CheckMatmulInputs(a, b, "Matmul"));
  if (a.dim() < 2 || a.dim() > 3 || b.dim() < 2 || b.dim() > 3) {
    return ShapeError("Matmul", a, b, trans_a, trans_b, "inputs must be 2-D or 3-D");
  }
  if (a.dim() == 2 && b.dim() == 3) {
    return ShapeError("Matmul", a, b, trans_a, trans_b,
                      "a 2-D a with a batched b is not supported");
  }
  const int64_t batch = a.dim() == 3 ? a.size(0) : 1;
  if (b.dim() == 3 && b.size(0) != batch) {
    return ShapeError("Matmul", a, b, trans_a, trans_b, "batch sizes differ");
  }
  const int64_t m = trans_a ? a.size(-1) : a.size(-2);
  const int64_t ka = trans_a ? a.size(-2) : a.size(-1);
  const int64_t kb = trans_b ? b.size(-1) : b.size(-2);
  const int64_t n = trans_b ? b.size(-2) : b.size(-1);
  if (ka != kb) {
    return ShapeError("Matmul", a, b, trans_a, trans_b,
                      absl::StrCat("inner dims differ: ", ka, " vs ", kb));
  }
  Shape out_shape = a.dim() == 3 ? Shape{batch, m, n} : Shape{m, n};
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(out_shape, a.dtype(), a.device()));
  if (a.dim() == 2) {
    TPX_RETURN_IF_ERROR(GemmTensors(out, a, b, trans_a, trans_b, 1.0f, 0.0f));
    return out;
  }
  // [B, M, K] x [K, N] with a's batch mergeable into its rows: one GEMM.
  if (b.dim() == 2 && !trans_a) {
    absl::StatusOr<Tensor> a2 = a.View({batch * m, ka});
    if (a2.ok()) {
      TPX_ASSIGN_OR_RETURN(Tensor out2, out.View({batch * m, n}));
      TPX_RETURN_IF_ERROR(GemmTensors(out2, *a2, b, false, trans_b, 1.0f, 0.0f));
      return out;
    }
  }
  // One batched product: out is dense [B, M, N]; b is shared (stride 0)
  // when 2-D.
  TPX_ASSIGN_OR_RETURN(DeviceKernels * kernels, internal::KernelsOf("Matmul", {&out, &a, &b}));
  TPX_ASSIGN_OR_RETURN(BatchedOperand ga, AsBatchedOperand(a, trans_a));
  BatchedOperand gb;
  if (b.dim() == 3) {
    TPX_ASSIGN_OR_RETURN(gb, AsBatchedOperand(b, trans_b));
  } else {
    TPX_ASSIGN_OR_RETURN(gb.op, AsGemmOperand(b, trans_b));
  }
  TPX_RETURN_IF_ERROR(kernels->GemmBatched(
      out.device().index, batch, ga.op.trans, gb.op.trans, m, n, ka, 1.0f, a.dtype(), ga.op.data,
      ga.op.ld, ga.stride, gb.op.data, gb.op.ld, gb.stride, 0.0f, out.dtype(), out.raw_data(),
      std::max<int64_t>(n, 1), m * n));
  return out;
}

absl::Status MatmulInto(const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a,
                        bool trans_b, float alpha, float beta) {
  TPX_RETURN_IF_ERROR(CheckMatmulInputs(a, b, "MatmulInto"));
  TPX_RETURN_IF_ERROR(CheckInput(out, "MatmulInto", "out"));
  TPX_RETURN_IF_ERROR(internal::KernelsOf("MatmulInto", {&out, &a}).status());
  if (a.dim() != 2 || b.dim() != 2 || out.dim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MatmulInto: out, a and b must be 2-D, got out ", ShapeString(out.shape()), ", a ",
        ShapeString(a.shape()), ", b ", ShapeString(b.shape())));
  }
  if (out.dtype() != DType::kF32 && out.dtype() != a.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("MatmulInto: out dtype ", Name(out.dtype()),
                                                   " must be f32 or ", Name(a.dtype())));
  }
  auto [m, ka] = OpShape(a, trans_a);
  auto [kb, n] = OpShape(b, trans_b);
  if (ka != kb || out.size(0) != m || out.size(1) != n) {
    return ShapeError("MatmulInto", a, b, trans_a, trans_b,
                      absl::StrCat("cannot write the product into out ",
                                   ShapeString(out.shape())));
  }
  if (n > 1 && out.stride(1) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MatmulInto: out's last dim must have unit stride, got strides ",
        ShapeString(out.strides())));
  }
  if (m > 1 && out.stride(0) < n) {
    return absl::InvalidArgumentError(absl::StrCat("MatmulInto: out rows overlap (strides ",
                                                   ShapeString(out.strides()), ")"));
  }
  return GemmTensors(out, a, b, trans_a, trans_b, alpha, beta);
}

absl::StatusOr<Tensor> Linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  TPX_RETURN_IF_ERROR(CheckMatmulInputs(x, weight, "Linear"));
  if (x.dim() < 1 || weight.dim() != 2 || x.size(-1) != weight.size(1)) {
    return absl::InvalidArgumentError(absl::StrCat("Linear: input ", ShapeString(x.shape()),
                                                   " does not match weight ",
                                                   ShapeString(weight.shape()),
                                                   " (expected [..., in] and [out, in])"));
  }
  const int64_t in = weight.size(1), out_features = weight.size(0);
  if (bias.defined()) {
    TPX_RETURN_IF_ERROR(CheckInput(bias, "Linear", "bias"));
    TPX_RETURN_IF_ERROR(CheckSameDType(x, bias, "Linear"));
    TPX_RETURN_IF_ERROR(internal::KernelsOf("Linear", {&x, &bias}).status());
    if (bias.dim() != 1 || bias.size(0) != out_features) {
      return absl::InvalidArgumentError(absl::StrCat("Linear: bias ", ShapeString(bias.shape()),
                                                     " does not match weight ",
                                                     ShapeString(weight.shape())));
    }
  }
  const int64_t rows = x.numel() / std::max<int64_t>(in, 1);
  TPX_ASSIGN_OR_RETURN(Tensor x2, x.Reshape({rows, in}));
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty({rows, out_features}, x.dtype(), x.device()));
  float beta = 0.0f;
  if (bias.defined()) {
    // The bias in the GEMM's epilogue where the device has it.
    TPX_ASSIGN_OR_RETURN(DeviceKernels * kernels,
                         internal::KernelsOf("Linear", {&out, &x2, &weight}));
    TPX_ASSIGN_OR_RETURN(Tensor dense_bias, bias.Contiguous());
    TPX_ASSIGN_OR_RETURN(GemmOperand gx, AsGemmOperand(x2, false));
    TPX_ASSIGN_OR_RETURN(GemmOperand gw, AsGemmOperand(weight, true));
    absl::Status fused = kernels->GemmBias(
        out.device().index, gx.trans, gw.trans, rows, out_features, in, x.dtype(), gx.data, gx.ld,
        gw.data, gw.ld, dense_bias.raw_data(), out.raw_data(), std::max<int64_t>(out_features, 1));
    if (fused.ok()) {
      Shape out_shape = x.shape();
      out_shape.back() = out_features;
      return out.View(out_shape);
    }
    if (!absl::IsUnimplemented(fused)) return fused;
    // Otherwise seed every row with the bias and let the GEMM accumulate onto it.
    TPX_ASSIGN_OR_RETURN(Tensor rows_view, bias.Expand({rows, out_features}));
    TPX_RETURN_IF_ERROR(out.CopyFrom(rows_view));
    beta = 1.0f;
  }
  TPX_RETURN_IF_ERROR(GemmTensors(out, x2, weight, false, true, 1.0f, beta));
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  return out.View(out_shape);
}

}  // namespace tpx::ops
