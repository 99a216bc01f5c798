// Data-parallel gradient averaging: after Backward, every data-parallel
// replica all-reduces (averages) its gradients so all replicas take the same
// optimizer step.
//
//   TPX_RETURN_IF_ERROR(optim::AllReduceGradients(state->dp(), params));
//
// One all-reduce per parameter that has a gradient; parameters without one
// must lack it on every replica (the same model code runs everywhere).
//
// Mixed precision (Megatron's accumulate_allreduce_grads_in_fp32): with
// reduce_dtype kF32 a bf16 gradient is converted to f32, reduced, and the f32
// sum becomes the parameter's gradient (AdamW reads it as f32); with kBF16 a
// bf16 gradient is reduced as it is (half the bytes, bf16 rounding per hop).
#ifndef TPX_OPTIM_GRAD_SYNC_H_
#define TPX_OPTIM_GRAD_SYNC_H_

#include "absl/status/status.h"
#include "core/dtype.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "core/autograd/variable.h"

namespace tpx::optim {

// Averages grad() of each parameter over `dp` (no-op for a single replica).
// Collective over dp. Error: a non-contiguous gradient, or a failed collective.
absl::Status AllReduceGradients(comm::Communicator& dp, absl::Span<const Variable> params,
                                DType reduce_dtype = DType::kF32);

// Reduces one parameter's gradient over `comm` with `op` in reduce_dtype
// (f32 or bf16; a gradient of another dtype is converted and the result
// replaces it). No-op without a gradient. Error: a non-contiguous gradient,
// an unsupported reduce_dtype, or a failed collective.
absl::Status AllReduceGradient(comm::Communicator& comm, const Variable& param, comm::ReduceOp op,
                               DType reduce_dtype);

}  // namespace tpx::optim

#endif  // TPX_OPTIM_GRAD_SYNC_H_
