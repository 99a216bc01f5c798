// Data-parallel gradient averaging: after Backward, every data-parallel
// replica all-reduces (averages) its gradients so all replicas take the same
// optimizer step.
//
//   TPX_RETURN_IF_ERROR(optim::AllReduceGradients(state->dp(), params));
//
// One all-reduce per parameter that has a gradient; parameters without one
// must lack it on every replica (the same model code runs everywhere).
#ifndef TPX_OPTIM_GRAD_SYNC_H_
#define TPX_OPTIM_GRAD_SYNC_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "core/autograd/variable.h"

namespace tpx::optim {

// Averages grad() of each parameter over `dp` (no-op for a single replica).
// Collective over dp. Error: a non-contiguous gradient, or a failed collective.
absl::Status AllReduceGradients(comm::Communicator& dp, absl::Span<const Variable> params);

}  // namespace tpx::optim

#endif  // TPX_OPTIM_GRAD_SYNC_H_
