#include "core/autograd/functional.h"

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tpx::ag {

absl::StatusOr<Tensor> LayerNormForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                        double eps, LayerNormSaved* saved) {
  if (!x.defined() || x.dim() < 1) {
    return absl::InvalidArgumentError("LayerNormForward: input must have at least one dim");
  }
  const Shape feature_shape = {x.size(-1)};
  for (const Tensor* p : {&weight, &bias}) {
    if (p->defined() && p->shape() != feature_shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("LayerNormForward: ", p == &weight ? "weight " : "bias ", p->ToString(),
                       " does not match the last dim of ", x.ToString()));
    }
  }
  absl::StatusOr<ops::LayerNormResult> fused = ops::LayerNorm(x, weight, bias, eps);
  if (fused.ok()) {
    if (saved != nullptr) *saved = {.x = x, .mean = fused->mean, .rstd = fused->rstd,
                                    .x_dtype = x.dtype()};
    return fused->y;
  }
  if (!absl::IsUnimplemented(fused.status())) return fused.status();
  // No fused kernel on this device: compose it.
  TPX_ASSIGN_OR_RETURN(Tensor xf, x.To(DType::kF32));
  TPX_ASSIGN_OR_RETURN(Tensor mean, ops::Mean(xf, -1, /*keepdim=*/true));
  TPX_ASSIGN_OR_RETURN(Tensor xc, ops::Sub(xf, mean));
  TPX_ASSIGN_OR_RETURN(Tensor sq, ops::Mul(xc, xc));
  TPX_ASSIGN_OR_RETURN(Tensor var, ops::Mean(sq, -1, /*keepdim=*/true));
  TPX_ASSIGN_OR_RETURN(Tensor var_eps, ops::AddScalar(var, eps));
  TPX_ASSIGN_OR_RETURN(Tensor std, ops::Sqrt(var_eps));
  TPX_ASSIGN_OR_RETURN(Tensor one, Tensor::Full({}, 1.0, DType::kF32, xf.device()));
  TPX_ASSIGN_OR_RETURN(Tensor rstd, ops::Div(one, std));
  TPX_ASSIGN_OR_RETURN(Tensor xhat, ops::Mul(xc, rstd));
  Tensor y = xhat;
  if (weight.defined()) {
    TPX_ASSIGN_OR_RETURN(Tensor w, weight.To(DType::kF32));
    TPX_ASSIGN_OR_RETURN(y, ops::Mul(y, w));
  }
  if (bias.defined()) {
    TPX_ASSIGN_OR_RETURN(Tensor b, bias.To(DType::kF32));
    TPX_ASSIGN_OR_RETURN(y, ops::Add(y, b));
  }
  if (saved != nullptr) *saved = {.xhat = xhat, .rstd = rstd, .x_dtype = x.dtype()};
  return y.To(x.dtype());
}

absl::StatusOr<LayerNormGrads> LayerNormBackward(const Tensor& grad, const LayerNormSaved& saved,
                                                 const Tensor& weight, NeedGrads need) {
  const Tensor& saved_input = saved.mean.defined() ? saved.x : saved.xhat;
  if (!grad.defined() || grad.shape() != saved_input.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("LayerNormBackward: gradient ", grad.ToString(),
                                                   " does not match the saved input ",
                                                   saved_input.ToString()));
  }
  LayerNormGrads out;
  if (saved.mean.defined()) {
    TPX_ASSIGN_OR_RETURN(Tensor g, grad.To(saved.x.dtype()));
    TPX_ASSIGN_OR_RETURN(
        ops::LayerNormGradients d,
        ops::LayerNormBackward(g, saved.x, saved.mean, saved.rstd, weight, need.input,
                               need.weight && weight.defined(), need.bias));
    out.input = d.input;
    if (d.weight.defined()) {
      TPX_ASSIGN_OR_RETURN(out.weight, d.weight.To(weight.dtype()));
    }
    if (d.bias.defined()) {
      TPX_ASSIGN_OR_RETURN(out.bias, d.bias.To(grad.dtype()));
    }
    return out;
  }
  const int64_t h = saved.xhat.size(-1);
  TPX_ASSIGN_OR_RETURN(Tensor gf, grad.To(DType::kF32));
  if (need.input) {
    // dxhat = g * w; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
    Tensor dxhat = gf;
    if (weight.defined()) {
      TPX_ASSIGN_OR_RETURN(Tensor w, weight.To(DType::kF32));
      TPX_ASSIGN_OR_RETURN(dxhat, ops::Mul(gf, w));
    }
    TPX_ASSIGN_OR_RETURN(Tensor m1, ops::Mean(dxhat, -1, /*keepdim=*/true));
    TPX_ASSIGN_OR_RETURN(Tensor dxhat_xhat, ops::Mul(dxhat, saved.xhat));
    TPX_ASSIGN_OR_RETURN(Tensor m2, ops::Mean(dxhat_xhat, -1, /*keepdim=*/true));
    TPX_ASSIGN_OR_RETURN(Tensor centered, ops::Sub(dxhat, m1));
    TPX_ASSIGN_OR_RETURN(Tensor projected, ops::Mul(saved.xhat, m2));
    TPX_ASSIGN_OR_RETURN(Tensor t, ops::Sub(centered, projected));
    TPX_ASSIGN_OR_RETURN(Tensor dx, ops::Mul(t, saved.rstd));
    TPX_ASSIGN_OR_RETURN(out.input, dx.To(saved.x_dtype));
  }
  if (need.weight && weight.defined()) {
    TPX_ASSIGN_OR_RETURN(Tensor gx, ops::Mul(gf, saved.xhat));
    TPX_ASSIGN_OR_RETURN(Tensor gx2, gx.Reshape({-1, h}));
    TPX_ASSIGN_OR_RETURN(Tensor dw, ops::Sum(gx2, 0));
    TPX_ASSIGN_OR_RETURN(out.weight, dw.To(weight.dtype()));
  }
  if (need.bias) {
    TPX_ASSIGN_OR_RETURN(Tensor g2, gf.Reshape({-1, h}));
    TPX_ASSIGN_OR_RETURN(Tensor db, ops::Sum(g2, 0));
    TPX_ASSIGN_OR_RETURN(out.bias, db.To(grad.dtype()));
  }
  return out;
}

absl::StatusOr<Tensor> SoftmaxBackward(const Tensor& grad, const Tensor& y, int64_t dim) {
  if (y.defined() && (dim == -1 || dim == y.dim() - 1)) {
    absl::StatusOr<Tensor> dx = ops::ScaledSoftmaxBackward(grad, y, 1.0);
    if (!absl::IsUnimplemented(dx.status())) return dx;
  }
  TPX_ASSIGN_OR_RETURN(Tensor gy, ops::Mul(grad, y));
  TPX_ASSIGN_OR_RETURN(Tensor s, ops::Sum(gy, dim, /*keepdim=*/true));
  TPX_ASSIGN_OR_RETURN(Tensor ys, ops::Mul(y, s));
  return ops::Sub(gy, ys);
}

absl::StatusOr<Tensor> LogSoftmaxBackward(const Tensor& grad, const Tensor& y, int64_t dim) {
  TPX_ASSIGN_OR_RETURN(Tensor p, ops::Exp(y));
  TPX_ASSIGN_OR_RETURN(Tensor s, ops::Sum(grad, dim, /*keepdim=*/true));
  TPX_ASSIGN_OR_RETURN(Tensor ps, ops::Mul(p, s));
  return ops::Sub(grad, ps);
}

absl::StatusOr<LinearGrads> LinearBackward(const Tensor& grad, const Tensor& x,
                                           const Tensor& weight, NeedGrads need) {
  if (!grad.defined() || grad.dim() < 1) {
    return absl::InvalidArgumentError("LinearBackward: gradient must have at least one dim");
  }
  LinearGrads out;
  TPX_ASSIGN_OR_RETURN(Tensor g2, grad.Reshape({-1, grad.size(-1)}));
  if (need.input) {
    if (!weight.defined())
      return absl::InvalidArgumentError("LinearBackward: input gradient needs the weight");
    TPX_ASSIGN_OR_RETURN(Tensor dx2, ops::Matmul(g2, weight));
    Shape x_shape = grad.shape();
    x_shape.back() = weight.size(-1);
    TPX_ASSIGN_OR_RETURN(out.input, dx2.Reshape(x_shape));
  }
  if (need.weight) {
    if (!x.defined())
      return absl::InvalidArgumentError("LinearBackward: weight gradient needs the input");
    TPX_ASSIGN_OR_RETURN(Tensor x2, x.Reshape({-1, x.size(-1)}));
    TPX_ASSIGN_OR_RETURN(out.weight, ops::Matmul(g2, x2, /*trans_a=*/true, /*trans_b=*/false));
  }
  if (need.bias) {
    TPX_ASSIGN_OR_RETURN(out.bias, ops::Sum(g2, 0));
  }
  return out;
}

}  // namespace tpx::ag
