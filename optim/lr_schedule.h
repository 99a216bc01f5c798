// Learning-rate schedule: linear warm-up followed by cosine decay.
//
//   TPX_ASSIGN_OR_RETURN(auto schedule, optim::WarmupCosineSchedule::Create(
//       {.max_lr = 3e-3, .min_lr = 3e-4, .warmup_steps = 50, .total_steps = 1000}));
//   double lr = schedule.At(step);   // step counts from 0
//
// Steps [0, warmup): lr rises linearly, max_lr * (step + 1) / warmup (the
// first step already trains). Steps [warmup, total): cosine from max_lr down
// to min_lr; at and past total_steps: min_lr.
#ifndef TPX_OPTIM_LR_SCHEDULE_H_
#define TPX_OPTIM_LR_SCHEDULE_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace tpx::optim {

struct WarmupCosineOptions {
  double max_lr = 1e-3;
  double min_lr = 0.0;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
};

class WarmupCosineSchedule {
 public:
  // Errors: negative rates, min_lr > max_lr, warmup_steps < 0 or
  // total_steps < warmup_steps.
  static absl::StatusOr<WarmupCosineSchedule> Create(WarmupCosineOptions options);

  double At(int64_t step) const;
  const WarmupCosineOptions& options() const { return options_; }

 private:
  explicit WarmupCosineSchedule(WarmupCosineOptions options) : options_(options) {}
  WarmupCosineOptions options_;
};

}  // namespace tpx::optim

#endif  // TPX_OPTIM_LR_SCHEDULE_H_
