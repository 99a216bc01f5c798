#include "optim/clip_grad.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tpx::optim {

absl::StatusOr<double> GlobalGradNorm(absl::Span<const ClipParam> params,
                                      comm::Communicator* tp) {
  const bool count_duplicates = tp == nullptr || tp->rank() == 0;
  double sum_sq = 0;
  for (const ClipParam& p : params) {
    const Tensor& g = p.var.grad();
    if (!g.defined() || (p.tp_duplicate && !count_duplicates)) continue;
    // The device's fused kernel; else one f32 sum of squares per tensor,
    // added up in double.
    absl::StatusOr<double> fused = ops::SumOfSquares(g);
    if (!absl::IsUnimplemented(fused.status())) {
      TPX_RETURN_IF_ERROR(fused.status());
      sum_sq += *fused;
      continue;
    }
    TPX_ASSIGN_OR_RETURN(Tensor g32, g.To(DType::kF32));
    TPX_ASSIGN_OR_RETURN(Tensor squares, ops::Mul(g32, g32));
    TPX_ASSIGN_OR_RETURN(Tensor sum, ops::SumAll(squares));
    sum_sq += sum.Item();
  }
  if (tp != nullptr && tp->size() > 1) {
    // The collective carries f32; each rank's partial sum is already exact in
    // double, so one rounding per rank is all that is lost.
    float partial = static_cast<float>(sum_sq);
    TPX_RETURN_IF_ERROR(tp->AllReduce(&partial, 1, DType::kF32, comm::ReduceOp::kSum).Wait());
    sum_sq = partial;
  }
  return std::sqrt(sum_sq);
}

absl::StatusOr<double> ClipGradNorm(absl::Span<const ClipParam> params, double max_norm,
                                    comm::Communicator* tp) {
  if (!(max_norm > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("ClipGradNorm: max_norm must be > 0, got ",
                                                   max_norm));
  }
  TPX_ASSIGN_OR_RETURN(double norm, GlobalGradNorm(params, tp));
  if (!std::isfinite(norm)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClipGradNorm: the global gradient norm is ", norm, " (non-finite gradients)"));
  }
  const double scale = max_norm / (norm + 1e-6);
  if (scale < 1.0) {
    for (const ClipParam& p : params) {
      if (p.var.grad().defined()) TPX_RETURN_IF_ERROR(ops::ScaleInPlace(p.var.grad(), scale));
    }
  }
  return norm;
}

}  // namespace tpx::optim
