// AdamW: Adam with decoupled weight decay (Loshchilov & Hutter), on
// parameters held as autograd leaves, with f32 master weights for bf16 ones.
//
//   std::vector<optim::AdamW::Param> params = {{w, /*decay=*/true}, {ln_gain, false}};
//   TPX_ASSIGN_OR_RETURN(optim::AdamW opt, optim::AdamW::Create(params, {.weight_decay = 0.1}));
//   ... Backward(loss) ...
//   TPX_RETURN_IF_ERROR(opt.Step(/*lr=*/schedule.At(step)));
//   opt.ZeroGrad();
//
// Update of one element (t = number of steps taken, from 1):
//   p -= lr * wd * p                       (only for params with decay)
//   m  = b1 * m + (1 - b1) * g
//   v  = b2 * v + (1 - b2) * g^2
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
// A parameter whose grad() is undefined in a step is left untouched (its
// moments do not advance), as in PyTorch. Moments live on the parameter's
// device; the parameters of a device update together in one call of its
// fused kernel (ops::AdamWSteps: one pass over all of them on the CPU,
// which also refreshes the bf16 working copies), or through core ops on
// devices without it (AdamWOptions::fused).
//
// Mixed precision (Megatron's --bf16): a bf16 parameter is the working copy
// the model computes with. The optimizer keeps an f32 master copy of it
// (master(i)), applies the update above to the master in f32 from the
// gradient read as f32 (bf16 grad(), or an f32 one), then refreshes the bf16
// working weights from it (round to nearest even). Moments are always f32.
// An f32 parameter is its own master.
// Thread-safety: none; one thread drives an optimizer.
#ifndef TPX_OPTIM_ADAMW_H_
#define TPX_OPTIM_ADAMW_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/autograd/variable.h"
#include "core/tensor.h"

namespace tpx::optim {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  // The device's fused kernel (ops::AdamWSteps). false: the core-op update
  // that devices without the kernel use.
  bool fused = true;
};

class AdamW {
 public:
  struct Param {
    Variable var;
    // Biases, norms' gains and similar usually train without decay.
    bool weight_decay = true;
  };

  // Errors: a parameter that is not a contiguous f32 or bf16 leaf requiring grad;
  // betas outside [0, 1); eps or weight_decay negative.
  static absl::StatusOr<AdamW> Create(std::vector<Param> params, AdamWOptions options = {});

  // One update with learning rate `lr` from each parameter's grad(), read
  // as grad * grad_scale (gradient clipping's coefficient,
  // optim::ClipCoefficient, applied in the same pass; the gradients are not
  // changed). Errors (nothing updated): a gradient whose shape differs from
  // its parameter or lives on another device; grad_scale not finite and > 0.
  absl::Status Step(double lr, double grad_scale = 1.0);
  // Clears every parameter's gradient.
  void ZeroGrad();

  int64_t steps_taken() const { return steps_; }
  const std::vector<Param>& params() const { return params_; }
  // The f32 weights the update applies to: parameter i's value when it is
  // f32, else its master copy. Checkpoints save and load these; after
  // writing into them, RefreshWorkingWeights() updates the bf16 parameters.
  const Tensor& master(size_t i) const { return master_[i]; }
  // Copies every master into its bf16 working parameter (no-op for f32 ones).
  absl::Status RefreshWorkingWeights();
  // First and second moments of parameter i (for tests and checkpoints).
  const Tensor& exp_avg(size_t i) const { return exp_avg_[i]; }
  const Tensor& exp_avg_sq(size_t i) const { return exp_avg_sq_[i]; }
  // Steps taken by parameter i (it skips steps where its grad is undefined).
  const std::vector<int64_t>& param_steps() const { return param_steps_; }
  // Resuming from a checkpoint: the step counts (the moments are restored
  // in place through exp_avg / exp_avg_sq). Error: a count per parameter
  // is not given, or a count is negative.
  absl::Status RestoreStepCounts(int64_t steps, std::vector<int64_t> param_steps);

 private:
  AdamW(std::vector<Param> params, AdamWOptions options)
      : params_(std::move(params)), options_(options) {}

  std::vector<Param> params_;
  AdamWOptions options_;
  std::vector<Tensor> master_;
  std::vector<Tensor> exp_avg_;
  std::vector<Tensor> exp_avg_sq_;
  std::vector<int64_t> param_steps_;
  int64_t steps_ = 0;
};

}  // namespace tpx::optim

#endif  // TPX_OPTIM_ADAMW_H_
