// Activation checkpointing that replays the random numbers of the forward pass.
//
// Checkpoint runs `fn` without keeping its intermediate activations; Backward
// restores every RNG state of the forward pass (the active generator and all
// tracker states, rng/tracker.h), runs `fn` again, back-propagates through it
// and then puts the RNG states back to what they were, so dropout inside the
// block draws the same masks both times and the outer stream is untouched.
//
//   TPX_ASSIGN_OR_RETURN(std::vector<Variable> y,
//                        checkpoint::Checkpoint(block, /*distribute_saved_activations=*/true,
//                                               {x}, tp_comm));
//
// distribute_saved_activations: the first input (replicated on the TP ranks)
// is kept only as this rank's 1-D piece (ops::SplitSizes of its element count)
// and all-gathered over `tp` when Backward recomputes the block. The block's
// gradient for that input must then be the same on every TP rank (true for a
// tensor-parallel block, whose input gradient is all-reduced).
#ifndef TPX_CHECKPOINT_CHECKPOINT_H_
#define TPX_CHECKPOINT_CHECKPOINT_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "core/autograd/recompute.h"
#include "core/autograd/variable.h"

namespace tpx::checkpoint {

// Errors: fn's errors; distribute_saved_activations without a communicator
// or with an undefined first input; communication failures in Backward.
absl::StatusOr<std::vector<Variable>> Checkpoint(ag::RecomputeFn fn,
                                                 bool distribute_saved_activations,
                                                 absl::Span<const Variable> inputs,
                                                 comm::Communicator* tp = nullptr);

}  // namespace tpx::checkpoint

#endif  // TPX_CHECKPOINT_CHECKPOINT_H_
