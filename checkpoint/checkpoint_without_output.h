// CheckpointWithoutOutput: a checkpointed block whose OUTPUT memory is also
// given back once its consumer has used it, and recomputed in Backward.
//
// The consumer of the block's output usually saves that output for its own
// backward; keeping it is unnecessary when the block is recomputed anyway.
// After the consumer has run, DiscardOutputAndRegisterRecompute releases the
// physical pages of the outputs (the tensors keep their shape and address)
// and registers a gradient hook on `hook_tensor`: when that gradient arrives,
// the block is recomputed with the forward pass's RNG states and its outputs
// are written back into the same memory, before the consumer's backward needs
// them. Pick hook_tensor so its gradient is computed before the consumer's
// backward reads the outputs (typically the consumer's own output).
//
//   checkpoint::CheckpointWithoutOutput ckpt;
//   TPX_ASSIGN_OR_RETURN(std::vector<Variable> a, ckpt.Checkpoint(activation_block, {h}));
//   TPX_ASSIGN_OR_RETURN(Variable y, ag::Linear(a[0], w2));       // saves a[0]
//   TPX_RETURN_IF_ERROR(ckpt.DiscardOutputAndRegisterRecompute(y));
//
// Memory release on CPU uses madvise(MADV_DONTNEED) on the whole pages inside
// each output's bytes (the allocator's byte counters do not change; the
// process's resident memory does). One Checkpoint per object.
#ifndef TPX_CHECKPOINT_CHECKPOINT_WITHOUT_OUTPUT_H_
#define TPX_CHECKPOINT_CHECKPOINT_WITHOUT_OUTPUT_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/autograd/recompute.h"
#include "core/autograd/variable.h"

namespace tpx::checkpoint {

class CheckpointWithoutOutput {
 public:
  CheckpointWithoutOutput();
  // Runs fn without recording its graph; outputs must be contiguous CPU tensors.
  absl::StatusOr<std::vector<Variable>> Checkpoint(ag::RecomputeFn fn,
                                                   absl::Span<const Variable> inputs);
  // Error: called before Checkpoint or twice.
  absl::Status DiscardOutputAndRegisterRecompute(const Variable& hook_tensor);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// Gives the physical pages fully inside [data, data + bytes) back to the OS;
// they read as zeros until written. Returns the number of bytes released.
size_t ReleasePages(void* data, size_t bytes);

}  // namespace tpx::checkpoint

#endif  // TPX_CHECKPOINT_CHECKPOINT_WITHOUT_OUTPUT_H_
