// Gradient clipping by the global L2 norm of all gradients of a
// tensor-parallel model.
//
// Under tensor parallelism each rank holds a shard of the sharded parameters
// and a full copy of the duplicated ones (LayerNorm gains, biases of
// row-parallel layers, position embeddings). The global norm sums the squares
// of every shard once and every duplicated parameter once: duplicates are
// counted on tensor-parallel rank 0 only, then the partial sums are
// all-reduced over the tensor-parallel group. Every rank gets the same norm
// and applies the same scale.
//
//   std::vector<optim::ClipParam> params = {{w_shard, /*tp_duplicate=*/false},
//                                           {ln_gain, /*tp_duplicate=*/true}};
//   TPX_ASSIGN_OR_RETURN(double norm, optim::ClipGradNorm(params, 1.0, &tp));
//
// Data-parallel replicas hold equal gradients after their all-reduce, so
// only the tensor-parallel group takes part.
#ifndef TPX_OPTIM_CLIP_GRAD_H_
#define TPX_OPTIM_CLIP_GRAD_H_

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "core/autograd/variable.h"

namespace tpx::optim {

struct ClipParam {
  Variable var;
  // True when every tensor-parallel rank holds the same full copy.
  bool tp_duplicate = false;
};

// The L2 norm of all gradients (undefined grads count as zero). tp may be
// null (a single rank). Collective over tp. Gradients may live on any device
// (squares summed in double by the device's fused kernel, ops::SumOfSquares;
// on devices without it f32 sums per tensor, added up in double).
absl::StatusOr<double> GlobalGradNorm(absl::Span<const ClipParam> params,
                                      comm::Communicator* tp);

// Scales every gradient by ClipCoefficient(norm, max_norm) when that is
// below 1; returns the norm before clipping. Collective over tp. Error:
// ClipCoefficient's or GlobalGradNorm's (gradients left untouched).
absl::StatusOr<double> ClipGradNorm(absl::Span<const ClipParam> params, double max_norm,
                                    comm::Communicator* tp);

// What ClipGradNorm scales the gradients by for the global norm `norm`:
// max_norm / (norm + 1e-6) when that is below 1, else 1. An optimizer step
// can apply it while it reads the gradients (AdamW::Step's grad_scale)
// instead of a pass that rewrites them first:
//   TPX_ASSIGN_OR_RETURN(double norm, optim::GlobalGradNorm(params, &tp));
//   TPX_ASSIGN_OR_RETURN(double scale, optim::ClipCoefficient(norm, 1.0));
//   TPX_RETURN_IF_ERROR(adam.Step(lr, scale));
// Errors: max_norm <= 0, a non-finite norm (non-finite gradients).
absl::StatusOr<double> ClipCoefficient(double norm, double max_norm);

}  // namespace tpx::optim

#endif  // TPX_OPTIM_CLIP_GRAD_H_
