// The fused transformer ops (core/ops.h, "Fused transformer kernels"):
// argument checks and output allocation; the loops are the device's
// DeviceKernels::LayerNorm / ScaledSoftmax / BiasGelu and their backwards.
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

// weight or bias of x as f32 [x.size(-1)] (undefined stays undefined).
absl::StatusOr<Tensor> FeatureParam(const Tensor& p, const Tensor& x, const char* op,
                                    const char* what) {
  if (!p.defined()) return Tensor();
  TPX_RETURN_IF_ERROR(CheckFloating(p, op, what));
  TPX_RETURN_IF_ERROR(internal::CheckFeatureShape(x, p, op, what));
  TPX_ASSIGN_OR_RETURN(Tensor f, p.To(DType::kF32));
  return f.Contiguous();
}

absl::Status CheckLastDimInput(const Tensor& x, const char* op) {
  TPX_RETURN_IF_ERROR(CheckInput(x, op));
  TPX_RETURN_IF_ERROR(CheckFloating(x, op));
  if (x.dim() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": input ", x.ToString(),
                                                   " must have at least one dim"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LayerNormResult> LayerNorm(const Tensor& x, const Tensor& weight,
                                          const Tensor& bias, double eps) {
  constexpr const char* kOp = "LayerNorm";
  TPX_RETURN_IF_ERROR(CheckLastDimInput(x, kOp));
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k, internal::KernelsOf(kOp, {&x, &weight, &bias}));
  const int64_t h = x.size(-1);
  const int64_t rows = h == 0 ? 0 : x.numel() / h;
  TPX_ASSIGN_OR_RETURN(Tensor w, FeatureParam(weight, x, kOp, "weight"));
  TPX_ASSIGN_OR_RETURN(Tensor b, FeatureParam(bias, x, kOp, "bias"));
  TPX_ASSIGN_OR_RETURN(Tensor xc, x.Contiguous());
  LayerNormResult r;
  TPX_ASSIGN_OR_RETURN(r.y, Tensor::Empty(x.shape(), x.dtype(), x.device()));
  TPX_ASSIGN_OR_RETURN(r.mean, Tensor::Empty({rows}, DType::kF32, x.device()));
  TPX_ASSIGN_OR_RETURN(r.rstd, Tensor::Empty({rows}, DType::kF32, x.device()));
  if (rows > 0) {
    TPX_RETURN_IF_ERROR(k->LayerNorm(r.y, r.mean, r.rstd, xc, w, b, rows, h, eps));
  }
  return r;
}

absl::StatusOr<LayerNormGradients> LayerNormBackward(const Tensor& grad, const Tensor& x,
                                                     const Tensor& mean, const Tensor& rstd,
                                                     const Tensor& weight, bool need_input,
                                                     bool need_weight, bool need_bias) {
  constexpr const char* kOp = "LayerNormBackward";
  TPX_RETURN_IF_ERROR(CheckLastDimInput(x, kOp));
  TPX_RETURN_IF_ERROR(CheckInput(grad, kOp, "grad"));
  TPX_RETURN_IF_ERROR(CheckSameDType(grad, x, kOp));
  if (grad.shape() != x.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": grad ", grad.ToString(),
                                                   " does not match the input ", x.ToString()));
  }
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k,
                       internal::KernelsOf(kOp, {&grad, &x, &mean, &rstd, &weight}));
  const int64_t h = x.size(-1);
  const int64_t rows = h == 0 ? 0 : x.numel() / h;
  for (const Tensor* s : {&mean, &rstd}) {
    if (!s->defined() || s->dtype() != DType::kF32 || s->numel() != rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          kOp, ": ", s == &mean ? "mean " : "rstd ", s->ToString(), " must be f32 with ", rows,
          " elements (one per row of ", x.ToString(), ")"));
    }
  }
  TPX_ASSIGN_OR_RETURN(Tensor w, FeatureParam(weight, x, kOp, "weight"));
  TPX_ASSIGN_OR_RETURN(Tensor gc, grad.Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor xc, x.Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor mc, mean.Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor rc, rstd.Contiguous());
  LayerNormGradients g;
  if (need_input) {
    TPX_ASSIGN_OR_RETURN(g.input, Tensor::Empty(x.shape(), x.dtype(), x.device()));
  }
  if (need_weight) {
    TPX_ASSIGN_OR_RETURN(g.weight, Tensor::Empty({h}, DType::kF32, x.device()));
  }
  if (need_bias) {
    TPX_ASSIGN_OR_RETURN(g.bias, Tensor::Empty({h}, DType::kF32, x.device()));
  }
  TPX_RETURN_IF_ERROR(
      k->LayerNormBackward(g.input, g.weight, g.bias, gc, xc, mc, rc, w, rows, h));
  return g;
}

absl::StatusOr<Tensor> ScaledSoftmax(const Tensor& x, double scale, bool causal) {
  constexpr const char* kOp = "ScaledSoftmax";
  TPX_RETURN_IF_ERROR(CheckLastDimInput(x, kOp));
  if (causal && x.dim() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": a causal softmax needs a [..., m, n] input, got ", x.ToString()));
  }
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k, internal::KernelsOf(kOp, {&x}));
  const int64_t n = x.size(-1);
  const int64_t m = x.dim() >= 2 ? x.size(-2) : 1;
  const int64_t batch = m * n == 0 ? 0 : x.numel() / (m * n);
  TPX_ASSIGN_OR_RETURN(Tensor xc, x.Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty(x.shape(), x.dtype(), x.device()));
  if (batch > 0) TPX_RETURN_IF_ERROR(k->ScaledSoftmax(y, xc, batch, m, n, scale, causal));
  return y;
}

absl::StatusOr<Tensor> ScaledSoftmaxBackward(const Tensor& grad, const Tensor& y, double scale) {
  constexpr const char* kOp = "ScaledSoftmaxBackward";
  TPX_RETURN_IF_ERROR(CheckLastDimInput(y, kOp));
  TPX_RETURN_IF_ERROR(CheckInput(grad, kOp, "grad"));
  TPX_RETURN_IF_ERROR(CheckSameDType(grad, y, kOp));
  if (grad.shape() != y.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": grad ", grad.ToString(),
                                                   " does not match the output ", y.ToString()));
  }
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k, internal::KernelsOf(kOp, {&grad, &y}));
  const int64_t n = y.size(-1);
  const int64_t rows = n == 0 ? 0 : y.numel() / n;
  TPX_ASSIGN_OR_RETURN(Tensor gc, grad.Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor yc, y.Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor dx, Tensor::Empty(y.shape(), y.dtype(), y.device()));
  if (rows > 0) TPX_RETURN_IF_ERROR(k->ScaledSoftmaxBackward(dx, gc, yc, rows, n, scale));
  return dx;
}

namespace {

// x floating with at least one dim, bias [size(-1)] of its dtype.
absl::Status CheckBiasInput(const Tensor& x, const Tensor& bias, const char* op) {
  TPX_RETURN_IF_ERROR(CheckLastDimInput(x, op));
  TPX_RETURN_IF_ERROR(CheckInput(bias, op, "bias"));
  TPX_RETURN_IF_ERROR(CheckSameDType(x, bias, op));
  return internal::CheckFeatureShape(x, bias, op, "bias");
}

}  // namespace

absl::StatusOr<Tensor> BiasGelu(const Tensor& x, const Tensor& bias) {
  constexpr const char* kOp = "BiasGelu";
  TPX_RETURN_IF_ERROR(CheckBiasInput(x, bias, kOp));
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k, internal::KernelsOf(kOp, {&x, &bias}));
  const int64_t h = x.size(-1);
  const int64_t rows = h == 0 ? 0 : x.numel() / h;
  TPX_ASSIGN_OR_RETURN(Tensor xc, x.Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor bc, bias.Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty(x.shape(), x.dtype(), x.device()));
  if (rows > 0) TPX_RETURN_IF_ERROR(k->BiasGelu(y, xc, bc, rows, h));
  return y;
}

absl::StatusOr<BiasGeluGradients> BiasGeluBackward(const Tensor& grad, const Tensor& x,
                                                   const Tensor& bias) {
  constexpr const char* kOp = "BiasGeluBackward";
  TPX_RETURN_IF_ERROR(CheckBiasInput(x, bias, kOp));
  TPX_RETURN_IF_ERROR(CheckInput(grad, kOp, "grad"));
  TPX_RETURN_IF_ERROR(CheckSameDType(grad, x, kOp));
  if (grad.shape() != x.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": grad ", grad.ToString(),
                                                   " does not match the input ", x.ToString()));
  }
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k, internal::KernelsOf(kOp, {&grad, &x, &bias}));
  const int64_t h = x.size(-1);
  const int64_t rows = h == 0 ? 0 : x.numel() / h;
  TPX_ASSIGN_OR_RETURN(Tensor gc, grad.Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor xc, x.Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor bc, bias.Contiguous());
  BiasGeluGradients r;
  TPX_ASSIGN_OR_RETURN(r.dx, Tensor::Empty(x.shape(), x.dtype(), x.device()));
  TPX_ASSIGN_OR_RETURN(r.dbias, Tensor::Empty(bias.shape(), bias.dtype(), bias.device()));
  TPX_RETURN_IF_ERROR(k->BiasGeluBackward(r.dx, r.dbias, gc, xc, bc, rows, h));
  return r;
}

}  // namespace tpx::ops
