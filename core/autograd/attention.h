// Differentiable causal self-attention over a fused q/k/v projection.
//
//   // qkv: [t, b, 3 * heads * head_dim] = [all heads' q | all k | all v]
//   TPX_ASSIGN_OR_RETURN(Variable ctx, ag::CausalSelfAttention(qkv, heads, head_dim,
//                                                              1 / std::sqrt(head_dim)));
//   // ctx: [t, b, heads * head_dim], ready for the output projection
//
// Where the device has the fused kernels (core/attention.h) this is one op
// each way that reads q, k, v in place and computes only the causal half of
// the products; elsewhere it is ComposedCausalSelfAttention, the same math
// from Chunk, Permute, Matmul and ScaledSoftmax. The composed form also takes
// a hook on the probabilities (attention dropout), which the fused op has not.
#ifndef TPX_CORE_AUTOGRAD_ATTENTION_H_
#define TPX_CORE_AUTOGRAD_ATTENTION_H_

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "core/autograd/variable.h"

namespace tpx::ag {

// Per batch row and head: softmax(scale * q k^T) v, query i seeing keys
// j <= i. qkv is floating [t, b, 3 * heads * head_dim]; the result is
// [t, b, heads * head_dim] of qkv's dtype (bf16/f16 computed in f32).
absl::StatusOr<Variable> CausalSelfAttention(const Variable& qkv, int64_t heads,
                                             int64_t head_dim, double scale);

// Applied to the probabilities [b * heads, t, t] before they weight v.
using AttentionProbsHook = std::function<absl::StatusOr<Variable>(const Variable& probs)>;

// CausalSelfAttention from the unfused ops (probabilities in qkv's dtype),
// with an optional hook on the probabilities.
absl::StatusOr<Variable> ComposedCausalSelfAttention(const Variable& qkv, int64_t heads,
                                                     int64_t head_dim, double scale,
                                                     const AttentionProbsHook& on_probs = nullptr);

}  // namespace tpx::ag

#endif  // TPX_CORE_AUTOGRAD_ATTENTION_H_
