// Causal self-attention straight from a fused q/k/v projection, one kernel
// each way (DeviceKernels::CausalSelfAttention and its backward).
//
// The composed form (split q, k, v; move heads to the front; q k^T; causal
// softmax; P v; move heads back) copies every operand twice and computes the
// masked half of both products. This op reads each head's q, k and v columns
// in place, computes only the causal part and writes the context in the
// [t, b, heads * head_dim] layout the output projection takes.
//
//   // qkv: [t, b, 3 * heads * head_dim] = [all q | all k | all v]
//   TPX_ASSIGN_OR_RETURN(ops::CausalSelfAttentionResult r,
//                        ops::CausalSelfAttention(qkv, heads, head_dim, 1 / sqrt(head_dim),
//                                                 /*keep_stats=*/true));
//   ...
//   TPX_ASSIGN_OR_RETURN(Tensor dqkv, ops::CausalSelfAttentionBackward(
//                                         grad_ctx, qkv, r.stats, heads, head_dim, scale));
//
// As flash attention does, the forward keeps two numbers per row of P for
// the backward, not P itself (t^2 floats per head, which went to memory and
// came back); the backward recomputes the scores and P from q, k and them,
// bit for bit as the forward had them.
//
// Devices without the kernels return Unimplemented; ag::CausalSelfAttention
// (core/autograd/attention.h) then composes the same math from other ops.
#ifndef TPX_CORE_ATTENTION_H_
#define TPX_CORE_ATTENTION_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace tpx::ops {

struct CausalSelfAttentionResult {
  Tensor ctx;  // [t, b, heads * head_dim], qkv's dtype
  // f32 [b * heads, t, 2], the softmax statistics for the backward; undefined
  // unless kept. Row i of P: the maximum m of its scaled scores (0 when all
  // are -inf) and the reciprocal of sum_j exp(scale * s_ij - m).
  Tensor stats;
};

// For every batch row and head h, with q, k, v the [t, head_dim] columns of
// head h in the first, second and third third of qkv's last dim: ctx = P v,
// P = softmax(scale * q k^T) where query i sees keys j <= i. qkv is
// floating [t, b, 3 * heads * head_dim]; arithmetic and P are f32, ctx is
// rounded once to qkv's dtype. keep_stats: return the statistics the
// backward needs.
absl::StatusOr<CausalSelfAttentionResult> CausalSelfAttention(const Tensor& qkv, int64_t heads,
                                                              int64_t head_dim, double scale,
                                                              bool keep_stats);

// The gradient of qkv (its shape and dtype) given grad_ctx (ctx's shape and
// dtype), qkv and the forward's stats.
absl::StatusOr<Tensor> CausalSelfAttentionBackward(const Tensor& grad_ctx, const Tensor& qkv,
                                                   const Tensor& stats, int64_t heads,
                                                   int64_t head_dim, double scale);

}  // namespace tpx::ops

#endif  // TPX_CORE_ATTENTION_H_
