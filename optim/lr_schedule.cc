#include "optim/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace tpx::optim {

absl::StatusOr<WarmupCosineSchedule> WarmupCosineSchedule::Create(WarmupCosineOptions o) {
  if (o.min_lr < 0 || o.max_lr < o.min_lr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WarmupCosineSchedule: need 0 <= min_lr <= max_lr, got min_lr ", o.min_lr, ", max_lr ",
        o.max_lr));
  }
  if (o.warmup_steps < 0 || o.total_steps < o.warmup_steps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WarmupCosineSchedule: need 0 <= warmup_steps <= total_steps, got warmup_steps ",
        o.warmup_steps, ", total_steps ", o.total_steps));
  }
  return WarmupCosineSchedule(o);
}

double WarmupCosineSchedule::At(int64_t step) const {
  const WarmupCosineOptions& o = options_;
  if (step < o.warmup_steps) {
    return o.max_lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  }
  if (step >= o.total_steps) return o.min_lr;
  const double progress = static_cast<double>(step - o.warmup_steps) /
                          static_cast<double>(o.total_steps - o.warmup_steps);
  return o.min_lr + 0.5 * (o.max_lr - o.min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace tpx::optim
