#include "optim/adamw.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tpx::optim {
namespace {

// The update of Step's host loop through core ops, for parameters on other
// devices (same formula; intermediate roundings may differ in the last ulp).
absl::Status StepWithOps(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& s,
                         float decay, float b1, float b2, float step_size, float inv_sqrt_bias2,
                         float eps) {
  if (decay != 1.0f) TPX_RETURN_IF_ERROR(ops::ScaleInPlace(p, decay));
  TPX_RETURN_IF_ERROR(ops::ScaleInPlace(m, b1));
  TPX_RETURN_IF_ERROR(ops::AddInPlace(m, g, 1.0f - b1));
  TPX_ASSIGN_OR_RETURN(Tensor g2, ops::Mul(g, g));
  TPX_RETURN_IF_ERROR(ops::ScaleInPlace(s, b2));
  TPX_RETURN_IF_ERROR(ops::AddInPlace(s, g2, 1.0f - b2));
  TPX_ASSIGN_OR_RETURN(Tensor denom, ops::Sqrt(s));
  TPX_ASSIGN_OR_RETURN(denom, ops::Scale(denom, inv_sqrt_bias2));
  TPX_ASSIGN_OR_RETURN(denom, ops::AddScalar(denom, eps));
  TPX_ASSIGN_OR_RETURN(Tensor update, ops::Div(m, denom));
  return ops::AddInPlace(p, update, -step_size);
}

// A bf16 parameter takes its master's new values; an f32 one is its master.
absl::Status RefreshWorkingWeight(const Variable& param, const Tensor& master) {
  if (param.value().dtype() == DType::kF32) return absl::OkStatus();
  return param.value().CopyFrom(master);
}

}  // namespace

absl::StatusOr<AdamW> AdamW::Create(std::vector<Param> params, AdamWOptions options) {
  if (!(options.beta1 >= 0 && options.beta1 < 1) || !(options.beta2 >= 0 && options.beta2 < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("AdamW: betas must lie in [0, 1), got (",
                                                   options.beta1, ", ", options.beta2, ")"));
  }
  if (options.eps < 0 || options.weight_decay < 0) {
    return absl::InvalidArgumentError(absl::StrCat("AdamW: eps (", options.eps,
                                                   ") and weight_decay (", options.weight_decay,
                                                   ") must be >= 0"));
  }
  AdamW opt(std::move(params), options);
  for (size_t i = 0; i < opt.params_.size(); ++i) {
    const Variable& v = opt.params_[i].var;
    const DType dtype = v.value().dtype();
    if (!v.is_leaf() || !v.requires_grad() || (dtype != DType::kF32 && dtype != DType::kBF16) ||
        !v.value().is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AdamW: parameter ", i, " ('", v.name(), "', ", v.value().ToString(),
          ") must be a contiguous f32 or bf16 leaf that requires grad"));
    }
    const Device device = v.value().device();
    if (dtype == DType::kF32) {
      opt.master_.push_back(v.value());
    } else {
      TPX_ASSIGN_OR_RETURN(Tensor master, v.value().To(DType::kF32));  // a new f32 copy
      opt.master_.push_back(std::move(master));
    }
    TPX_ASSIGN_OR_RETURN(Tensor m, Tensor::Zeros(v.shape(), DType::kF32, device));
    TPX_ASSIGN_OR_RETURN(Tensor s, Tensor::Zeros(v.shape(), DType::kF32, device));
    opt.exp_avg_.push_back(std::move(m));
    opt.exp_avg_sq_.push_back(std::move(s));
    opt.param_steps_.push_back(0);
  }
  return opt;
}

absl::Status AdamW::Step(double lr) {
  // Every gradient is checked before any parameter changes, so a failed step
  // leaves the optimizer and the parameters as they were.
  for (const Param& param : params_) {
    const Variable& v = param.var;
    const Tensor& g_t = v.grad();
    if (!g_t.defined()) continue;
    if (g_t.shape() != v.shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("AdamW::Step: gradient of '", v.name(), "' is ", g_t.ToString(),
                       " but the parameter is ", v.value().ToString()));
    }
    if (g_t.device() != v.value().device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AdamW::Step: gradient of '", v.name(), "' is on ", g_t.device().ToString(),
          " but the parameter is on ", v.value().device().ToString()));
    }
  }
  ++steps_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Variable& v = params_[i].var;
    const Tensor& g_t = v.grad();
    if (!g_t.defined()) continue;
    TPX_ASSIGN_OR_RETURN(Tensor g_c, g_t.To(DType::kF32));  // contiguous f32
    const int64_t t = ++param_steps_[i];
    const double b1 = options_.beta1, b2 = options_.beta2;
    const double bias1 = 1.0 - std::pow(b1, static_cast<double>(t));
    const double bias2 = 1.0 - std::pow(b2, static_cast<double>(t));
    const float step_size = static_cast<float>(lr / bias1);
    const float inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(bias2));
    const float decay =
        params_[i].weight_decay ? static_cast<float>(1.0 - lr * options_.weight_decay) : 1.0f;
    const float fb1 = static_cast<float>(b1), fb2 = static_cast<float>(b2);
    const float eps = static_cast<float>(options_.eps);
    const Tensor& master = master_[i];
    if (!options_.fused || !master.device().is_cpu()) {
      TPX_RETURN_IF_ERROR(StepWithOps(master, g_c, exp_avg_[i], exp_avg_sq_[i], decay,
                                      fb1, fb2, step_size, inv_sqrt_bias2, eps));
      TPX_RETURN_IF_ERROR(RefreshWorkingWeight(v, master));
      continue;
    }
    float* p = master.data<float>();
    const float* g = g_c.data<float>();
    float* m = exp_avg_[i].data<float>();
    float* s = exp_avg_sq_[i].data<float>();
    const int64_t n = v.value().numel();
    for (int64_t j = 0; j < n; ++j) {
      p[j] *= decay;
      m[j] = fb1 * m[j] + (1.0f - fb1) * g[j];
      s[j] = fb2 * s[j] + (1.0f - fb2) * g[j] * g[j];
      p[j] -= step_size * m[j] / (std::sqrt(s[j]) * inv_sqrt_bias2 + eps);
    }
    TPX_RETURN_IF_ERROR(RefreshWorkingWeight(v, master));
  }
  return absl::OkStatus();
}

absl::Status AdamW::RefreshWorkingWeights() {
  for (size_t i = 0; i < params_.size(); ++i) {
    TPX_RETURN_IF_ERROR(RefreshWorkingWeight(params_[i].var, master_[i]));
  }
  return absl::OkStatus();
}

absl::Status AdamW::RestoreStepCounts(int64_t steps, std::vector<int64_t> param_steps) {
  if (param_steps.size() != params_.size() || steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("AdamW::RestoreStepCounts: ", param_steps.size(),
                                                   " counts for ", params_.size(),
                                                   " parameters, steps ", steps));
  }
  for (int64_t s : param_steps) {
    if (s < 0 || s > steps) {
      return absl::InvalidArgumentError(absl::StrCat("AdamW::RestoreStepCounts: a parameter count ",
                                                     s, " outside [0, ", steps, "]"));
    }
  }
  steps_ = steps;
  param_steps_ = std::move(param_steps);
  return absl::OkStatus();
}

void AdamW::ZeroGrad() {
  for (Param& p : params_) p.var.ClearGrad();
}

}  // namespace tpx::optim
