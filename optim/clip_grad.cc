#include "optim/clip_grad.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "optim/device_groups.h"

namespace tpx::optim {
namespace {

absl::Status CheckMaxNorm(double max_norm) {
  if (max_norm > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("ClipGradNorm: max_norm must be > 0, got ", max_norm));
}

}  // namespace

absl::StatusOr<double> GlobalGradNorm(absl::Span<const ClipParam> params,
                                      comm::Communicator* tp) {
  const bool count_duplicates = tp == nullptr || tp->rank() == 0;
  std::vector<Tensor> grads;
  std::vector<Device> devices;
  for (const ClipParam& p : params) {
    const Tensor& g = p.var.grad();
    if (!g.defined() || (p.tp_duplicate && !count_duplicates)) continue;
    grads.push_back(g);
    devices.push_back(g.device());
  }
  // Each device's fused kernel over all of its gradients at once; else one
  // f32 sum of squares per tensor. Added up in double in parameter order.
  std::vector<double> sums(grads.size(), 0.0);
  for (const std::vector<size_t>& group : GroupByDevice(devices)) {
    std::vector<Tensor> on_device;
    for (size_t i : group) on_device.push_back(grads[i]);
    absl::StatusOr<std::vector<double>> fused = ops::SumsOfSquares(on_device);
    if (!absl::IsUnimplemented(fused.status())) {
      TPX_RETURN_IF_ERROR(fused.status());
      for (size_t j = 0; j < group.size(); ++j) sums[group[j]] = (*fused)[j];
      continue;
    }
    for (size_t i : group) {
      TPX_ASSIGN_OR_RETURN(Tensor g32, grads[i].To(DType::kF32));
      TPX_ASSIGN_OR_RETURN(Tensor squares, ops::Mul(g32, g32));
      TPX_ASSIGN_OR_RETURN(Tensor sum, ops::SumAll(squares));
      sums[i] = sum.Item();
    }
  }
  double sum_sq = 0;
  for (double s : sums) sum_sq += s;
  if (tp != nullptr && tp->size() > 1) {
    // The collective carries f32; each rank's partial sum is already exact in
    // double, so one rounding per rank is all that is lost.
    float partial = static_cast<float>(sum_sq);
    TPX_RETURN_IF_ERROR(tp->AllReduce(&partial, 1, DType::kF32, comm::ReduceOp::kSum).Wait());
    sum_sq = partial;
  }
  return std::sqrt(sum_sq);
}

absl::StatusOr<double> ClipCoefficient(double norm, double max_norm) {
  TPX_RETURN_IF_ERROR(CheckMaxNorm(max_norm));
  if (!std::isfinite(norm)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClipGradNorm: the global gradient norm is ", norm, " (non-finite gradients)"));
  }
  return std::min(1.0, max_norm / (norm + 1e-6));
}

absl::StatusOr<double> ClipGradNorm(absl::Span<const ClipParam> params, double max_norm,
                                    comm::Communicator* tp) {
  // Before the collective norm: a bad bound fails without communicating.
  TPX_RETURN_IF_ERROR(CheckMaxNorm(max_norm));
  TPX_ASSIGN_OR_RETURN(double norm, GlobalGradNorm(params, tp));
  TPX_ASSIGN_OR_RETURN(double scale, ClipCoefficient(norm, max_norm));
  if (scale < 1.0) {
    for (const ClipParam& p : params) {
      if (p.var.grad().defined()) TPX_RETURN_IF_ERROR(ops::ScaleInPlace(p.var.grad(), scale));
    }
  }
  return norm;
}

}  // namespace tpx::optim
