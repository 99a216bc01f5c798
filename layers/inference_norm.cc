#include "layers/inference_norm.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/autograd/functional.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tpx::layers {
namespace {

bool CpuKernelApplies(const InferenceNorm& norm, std::initializer_list<const Tensor*> ts) {
  if (!norm.cpu_kernel) return false;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (!t->device().is_cpu() || t->dtype() != DType::kF32 || !t->is_contiguous()) return false;
  }
  return true;
}

// One row: stats of r[0..h), then y = norm(r). r may alias nothing in y.
void NormRow(const InferenceNorm& norm, const float* w, const float* b, const float* r, float* y,
             int64_t h) {
  float mean = 0.0f;
  double acc = 0.0;
  if (norm.kind == NormKind::kLayerNorm) {
    for (int64_t j = 0; j < h; ++j) acc += r[j];
    mean = static_cast<float>(acc / static_cast<double>(h));
    acc = 0.0;
    for (int64_t j = 0; j < h; ++j) {
      const float c = r[j] - mean;
      acc += static_cast<double>(c) * c;
    }
  } else {
    for (int64_t j = 0; j < h; ++j) acc += static_cast<double>(r[j]) * r[j];
  }
  const float rstd =
      static_cast<float>(1.0 / std::sqrt(acc / static_cast<double>(h) + norm.eps));
  for (int64_t j = 0; j < h; ++j) {
    float v = (r[j] - mean) * rstd * w[j];
    if (b != nullptr) v += b[j];
    y[j] = v;
  }
}

// The core-op norm of x (f32 statistics), in x's dtype.
absl::StatusOr<Tensor> NormOps(const InferenceNorm& norm, const Tensor& x) {
  if (norm.kind == NormKind::kLayerNorm) {
    return ag::LayerNormForward(x, norm.weight, norm.bias, norm.eps, nullptr);
  }
  TPX_ASSIGN_OR_RETURN(Tensor xf, x.To(DType::kF32));
  TPX_ASSIGN_OR_RETURN(Tensor sq, ops::Mul(xf, xf));
  TPX_ASSIGN_OR_RETURN(Tensor ms, ops::Mean(sq, -1, /*keepdim=*/true));
  TPX_ASSIGN_OR_RETURN(Tensor ms_eps, ops::AddScalar(ms, norm.eps));
  TPX_ASSIGN_OR_RETURN(Tensor rms, ops::Sqrt(ms_eps));
  TPX_ASSIGN_OR_RETURN(Tensor y, ops::Div(xf, rms));
  TPX_ASSIGN_OR_RETURN(Tensor w, norm.weight.To(DType::kF32));
  TPX_ASSIGN_OR_RETURN(y, ops::Mul(y, w));
  return y.To(x.dtype());
}

absl::Status SameShape(const Tensor& a, const Tensor& b, const char* what) {
  if (a.shape() != b.shape()) {
    return absl::InvalidArgumentError(
        absl::StrCat("InferenceNorm: ", what, " ", b.ToString(), " does not match ", a.ToString()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckNorm(const InferenceNorm& norm, int64_t hidden, const char* who) {
  const Shape want{hidden};
  if (!norm.weight.defined() || norm.weight.shape() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": norm weight must be [", hidden, "], got ",
        norm.weight.defined() ? norm.weight.ToString() : std::string("none")));
  }
  if (norm.bias.defined()) {
    if (norm.kind == NormKind::kRmsNorm) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": an RMSNorm has no bias"));
    }
    if (norm.bias.shape() != want) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": norm bias must be [", hidden,
                                                     "], got ", norm.bias.ToString()));
    }
  }
  if (!(norm.eps > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": norm eps ", norm.eps, " must be > 0"));
  }
  return absl::OkStatus();
}

absl::Status NormInto(const InferenceNorm& norm, const Tensor& x, const Tensor& out) {
  if (!x.defined() || x.dim() < 1) {
    return absl::InvalidArgumentError("NormInto: input must have at least one dim");
  }
  TPX_RETURN_IF_ERROR(CheckNorm(norm, x.size(-1), "NormInto"));
  TPX_RETURN_IF_ERROR(SameShape(x, out, "output"));
  if (CpuKernelApplies(norm, {&x, &out, &norm.weight, &norm.bias})) {
    const int64_t h = x.size(-1), rows = x.numel() / std::max<int64_t>(h, 1);
    const float* w = norm.weight.data<float>();
    const float* b = norm.bias.defined() ? norm.bias.data<float>() : nullptr;
    for (int64_t i = 0; i < rows; ++i) {
      NormRow(norm, w, b, x.data<float>() + i * h, out.data<float>() + i * h, h);
    }
    return absl::OkStatus();
  }
  TPX_ASSIGN_OR_RETURN(Tensor y, NormOps(norm, x));
  return out.CopyFrom(y);
}

absl::Status AddNormInto(const InferenceNorm& norm, const Tensor& residual, const Tensor& add,
                         const Tensor& add_bias, const Tensor& out) {
  if (!residual.defined() || residual.dim() < 1) {
    return absl::InvalidArgumentError("AddNormInto: residual must have at least one dim");
  }
  const int64_t h = residual.size(-1);
  TPX_RETURN_IF_ERROR(CheckNorm(norm, h, "AddNormInto"));
  TPX_RETURN_IF_ERROR(SameShape(residual, add, "addend"));
  TPX_RETURN_IF_ERROR(SameShape(residual, out, "output"));
  if (add_bias.defined() && add_bias.shape() != Shape{h}) {
    return absl::InvalidArgumentError(absl::StrCat("AddNormInto: bias must be [", h, "], got ",
                                                   add_bias.ToString()));
  }
  if (CpuKernelApplies(norm, {&residual, &add, &add_bias, &out, &norm.weight, &norm.bias})) {
    const int64_t rows = residual.numel() / std::max<int64_t>(h, 1);
    const float* w = norm.weight.data<float>();
    const float* nb = norm.bias.defined() ? norm.bias.data<float>() : nullptr;
    const float* ab = add_bias.defined() ? add_bias.data<float>() : nullptr;
    for (int64_t i = 0; i < rows; ++i) {
      float* r = residual.data<float>() + i * h;
      const float* a = add.data<float>() + i * h;
      if (ab != nullptr) {
        for (int64_t j = 0; j < h; ++j) r[j] += a[j] + ab[j];
      } else {
        for (int64_t j = 0; j < h; ++j) r[j] += a[j];
      }
      NormRow(norm, w, nb, r, out.data<float>() + i * h, h);
    }
    return absl::OkStatus();
  }
  TPX_RETURN_IF_ERROR(ops::AddInPlace(residual, add));
  if (add_bias.defined()) TPX_RETURN_IF_ERROR(ops::AddInPlace(residual, add_bias));
  TPX_ASSIGN_OR_RETURN(Tensor y, NormOps(norm, residual));
  return out.CopyFrom(y);
}

absl::StatusOr<Tensor> RowBuffer::View(int64_t rows, int64_t cols, DType dtype, Device device) {
  const int64_t n = rows * cols;
  if (!storage_.defined() || storage_.numel() < n || storage_.dtype() != dtype ||
      storage_.device() != device) {
    TPX_ASSIGN_OR_RETURN(storage_, Tensor::Empty({std::max<int64_t>(n, 1)}, dtype, device));
  }
  TPX_ASSIGN_OR_RETURN(Tensor flat, storage_.Narrow(0, 0, n));
  return flat.View({rows, cols});
}

}  // namespace tpx::layers
