#include "optim/adamw.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "optim/device_groups.h"

namespace tpx::optim {
namespace {

// The update of the fused kernel (ops::AdamWStep) through core ops, for
// devices without it and fused = false (same formula; intermediate roundings
// may differ in the last ulp).
absl::Status StepWithOps(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& s,
                         const AdamWCoefficients& c) {
  if (c.decay != 1.0f) TPX_RETURN_IF_ERROR(ops::ScaleInPlace(p, c.decay));
  TPX_RETURN_IF_ERROR(ops::ScaleInPlace(m, c.beta1));
  TPX_RETURN_IF_ERROR(ops::AddInPlace(m, g, 1.0f - c.beta1));
  TPX_ASSIGN_OR_RETURN(Tensor g2, ops::Mul(g, g));
  TPX_RETURN_IF_ERROR(ops::ScaleInPlace(s, c.beta2));
  TPX_RETURN_IF_ERROR(ops::AddInPlace(s, g2, 1.0f - c.beta2));
  TPX_ASSIGN_OR_RETURN(Tensor denom, ops::Sqrt(s));
  TPX_ASSIGN_OR_RETURN(denom, ops::Scale(denom, c.inv_sqrt_bias2));
  TPX_ASSIGN_OR_RETURN(denom, ops::AddScalar(denom, c.eps));
  TPX_ASSIGN_OR_RETURN(Tensor update, ops::Div(m, denom));
  return ops::AddInPlace(p, update, -c.step_size);
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

absl::Status AdamW::Step(double lr, double grad_scale) {
  if (!(grad_scale > 0) || !std::isfinite(grad_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("AdamW::Step: grad_scale must be finite and > 0, got ", grad_scale));
  }
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
  // The updates of the parameters with a gradient, in order.
  std::vector<size_t> index;
  std::vector<AdamWOperands> updates;
  std::vector<Device> devices;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Variable& v = params_[i].var;
    const Tensor& g_t = v.grad();
    if (!g_t.defined()) continue;
    const int64_t t = ++param_steps_[i];
    const double b1 = options_.beta1, b2 = options_.beta2;
    const double bias1 = 1.0 - std::pow(b1, static_cast<double>(t));
    const double bias2 = 1.0 - std::pow(b2, static_cast<double>(t));
    const AdamWCoefficients c{
        .decay = params_[i].weight_decay ? static_cast<float>(1.0 - lr * options_.weight_decay)
                                         : 1.0f,
        .beta1 = static_cast<float>(b1),
        .beta2 = static_cast<float>(b2),
        .step_size = static_cast<float>(lr / bias1),
        .inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(bias2)),
        .eps = static_cast<float>(options_.eps),
        .grad_scale = static_cast<float>(grad_scale)};
    // A bf16 gradient is read as is by the fused kernel; other dtypes become f32.
    Tensor g = g_t;
    if (g_t.dtype() != DType::kF32 && g_t.dtype() != DType::kBF16) {
      TPX_ASSIGN_OR_RETURN(g, g_t.To(DType::kF32));
    }
    const Tensor working = v.value().dtype() == DType::kF32 ? Tensor() : v.value();
    index.push_back(i);
    updates.push_back({master_[i], std::move(g), exp_avg_[i], exp_avg_sq_[i], working, c});
    devices.push_back(v.value().device());
  }
  for (const std::vector<size_t>& group : GroupByDevice(devices)) {
    if (options_.fused) {
      std::vector<AdamWOperands> on_device;
      for (size_t j : group) on_device.push_back(updates[j]);
      absl::Status fused = ops::AdamWSteps(on_device);
      if (!absl::IsUnimplemented(fused)) {
        TPX_RETURN_IF_ERROR(fused);
        continue;
      }
    }
    for (size_t j : group) {
      const AdamWOperands& u = updates[j];
      TPX_ASSIGN_OR_RETURN(Tensor g32, u.grad.To(DType::kF32));
      if (grad_scale != 1.0) {
        TPX_ASSIGN_OR_RETURN(g32, ops::Scale(g32, grad_scale));
      }
      TPX_RETURN_IF_ERROR(StepWithOps(u.param, g32, u.exp_avg, u.exp_avg_sq, u.coefficients));
      TPX_RETURN_IF_ERROR(RefreshWorkingWeight(params_[index[j]].var, u.param));
    }
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
