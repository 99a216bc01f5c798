// Recompute: activation checkpointing. Runs a block without keeping its
// intermediate activations and runs it again during Backward to get them.
//
//   auto block = [&](absl::Span<const Variable> in) -> absl::StatusOr<std::vector<Variable>> {
//     TPX_ASSIGN_OR_RETURN(Variable h, ag::Linear(in[0], w1));
//     TPX_ASSIGN_OR_RETURN(Variable a, ag::Gelu(h));
//     TPX_ASSIGN_OR_RETURN(Variable y, ag::Linear(a, w2));
//     return std::vector<Variable>{y};
//   };
//   TPX_ASSIGN_OR_RETURN(std::vector<Variable> out, ag::Recompute(block, {x}));
//
// The forward pass runs `fn` with grad mode off, so only the inputs are kept.
// Backward runs `fn` again with grad mode on, on detached copies of the
// inputs, and calls Backward() on that sub-graph (the engine is reentrant):
// Variables captured by `fn` (weights) get their gradients accumulated there,
// the inputs' gradients flow on through the outer graph. With grad mode on,
// the outputs always require grad (even when no input does), so captured
// weights of a model's first block still get gradients. `fn` must compute
// the same thing both times: a caller with randomness (dropout) restores its
// generator state at the start of `fn` (see `before_recompute`).
#ifndef TPX_CORE_AUTOGRAD_RECOMPUTE_H_
#define TPX_CORE_AUTOGRAD_RECOMPUTE_H_

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/autograd/variable.h"

namespace tpx::ag {

using RecomputeFn =
    std::function<absl::StatusOr<std::vector<Variable>>(absl::Span<const Variable> inputs)>;

struct RecomputeOptions {
  // Called in Backward right before `fn` runs again (e.g. to restore the RNG
  // state saved before the forward pass, and to save the current one).
  std::function<absl::Status()> before_recompute;
  // Called after the recomputed block's Backward (e.g. to restore the RNG
  // state saved by before_recompute).
  std::function<absl::Status()> after_recompute;
};

// Errors: fn's errors (forward), and in Backward fn's or the sub-graph's.
absl::StatusOr<std::vector<Variable>> Recompute(RecomputeFn fn, absl::Span<const Variable> inputs,
                                                RecomputeOptions options = {});

}  // namespace tpx::ag

#endif  // TPX_CORE_AUTOGRAD_RECOMPUTE_H_
