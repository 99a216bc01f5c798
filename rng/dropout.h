// Dropout drawing its mask from the active generator (rng/tracker.h).
//
// Training: y = x * mask / (1 - p), mask[i] = (uniform_i >= p), the uniforms
// being one draw (one stream) of the active generator; Backward applies the
// same mask and scale. p == 0 or training == false: y is x (no draw).
// With a ShardSpec the mask of element i depends on its global index, so a
// sharded activation gets the slice of the unsharded tensor's mask.
//
//   { TPX_ASSIGN_OR_RETURN(rng::RngFork f, rng::GetRngTracker().Fork());
//     TPX_ASSIGN_OR_RETURN(Variable y, rng::Dropout(x, 0.1)); }
#ifndef TPX_RNG_DROPOUT_H_
#define TPX_RNG_DROPOUT_H_

#include "absl/status/statusor.h"
#include "core/autograd/variable.h"
#include "core/tensor.h"
#include "rng/generator.h"
#include "rng/random.h"

namespace tpx::rng {

// The mask is drawn on the host (the same on every device) and applied by
// the device's fused kernel (ops::DropoutAdd), or by core ops on devices
// without it.
// Errors: p outside [0, 1); x not floating; shard not matching x.
absl::StatusOr<Variable> Dropout(const Variable& x, double p, bool training = true,
                                 const ShardSpec* shard = nullptr);

// residual + Dropout(x + bias) in one pass over memory each way where the
// device has the fused kernel (ops::DropoutAdd): Megatron's
// bias-dropout-add after a layer created with skip_bias_add. bias
// ([size(-1)], x's dtype) may be undefined; with p == 0 or training ==
// false nothing is drawn and y = residual + x + bias. The mask is the one
// Dropout(x + bias, p, training, shard) would draw. Errors: p outside [0,
// 1); x or residual undefined or not floating; shapes or dtypes that do not
// match (named by ops::DropoutAdd); shard not matching x.
absl::StatusOr<Variable> BiasDropoutAdd(const Variable& x, const Variable& bias,
                                        const Variable& residual, double p,
                                        bool training = true, const ShardSpec* shard = nullptr);

// The keep mask (kBool, x's shape) of one draw from gen: exposed for tests and
// for fused kernels that apply it themselves.
absl::StatusOr<Tensor> DropoutMask(const Shape& shape, double p, Generator& gen,
                                   const ShardSpec* shard = nullptr);

}  // namespace tpx::rng

#endif  // TPX_RNG_DROPOUT_H_
