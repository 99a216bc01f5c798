// Cross entropy over a vocabulary split across tensor-parallel ranks.
//
// Each rank holds logits for its slice of the vocabulary ([..., v_local]); the
// targets are replicated. The per-token loss is the same at every TP size:
//   log p_i = (x_i - M) - log(sum_j exp(x_j - M))          (M = global max)
//   loss    = -(1 - s) log p_target - s * mean_i log p_i,   s = eps * K / (K - 1)
// with K the GLOBAL vocabulary size and the mean over all K classes. Tokens
// whose target is ignore_index get loss 0 and no gradient.
//
//   loss::CrossEntropyOptions opts{.label_smoothing = 0.1};
//   TPX_ASSIGN_OR_RETURN(Variable loss, loss::VocabParallelCrossEntropy(logits, target, tp, opts));
//   TPX_ASSIGN_OR_RETURN(Variable mean, loss::MeanOverNonIgnored(loss, target, opts.ignore_index));
//   TPX_RETURN_IF_ERROR(Backward(mean));
//
// Numerics: computed in f32 for bf16/f16 logits. Communication: one
// all-gather of 4 f32 per token (local max, sum-exp rescaled to it, target
// logit, sum of logits), combined locally, in place of separate max and sum
// all-reduces. Backward recomputes the softmax from the saved logits and
// per-token log-sum-exp (one read of the logits, one write of the gradient)
// instead of keeping a softmax copy.
// The caller's logits are not modified unless `in_place_grad` is set: then
// Backward writes the logits gradient into the logits' storage (saving one
// logits-sized buffer), and the logits must not be used afterwards.
#ifndef TPX_LOSS_CROSS_ENTROPY_H_
#define TPX_LOSS_CROSS_ENTROPY_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/autograd/variable.h"
#include "core/tensor.h"

namespace tpx::loss {

struct CrossEntropyOptions {
  // eps in [0, 1).
  double label_smoothing = 0.0;
  int64_t ignore_index = -100;
  // Global vocabulary size K; 0 means v_local * tp size (even split). When
  // set, rank r holds classes [start_r, start_r + v_local) with the sizes of
  // ops::SplitSizes(K, tp size), so uneven vocabularies work.
  int64_t vocab_size = 0;
  bool in_place_grad = false;
  // The per-token passes run as the device's fused kernels
  // (ops::CrossEntropyStats / CrossEntropyBackward; on the CPU over the
  // GEMM threads, core/gemm.h). false, or a device without them: composed
  // from core ops (same results within rounding; one all-gather of 4 f32
  // per token as well).
  bool fused = true;
};

// logits: [..., v_local] f32/bf16/f16 contiguous, on any device (targets are
// read on the host); target: logits' shape without the last dim, i64 or i32.
// tp may be null (one rank). Returns the per-token loss (f32, target's shape,
// on the logits' device). Errors: shapes/dtypes; a loss gradient on another
// device than the logits; a target outside [0, K) other than ignore_index
// (names the first such position); vocab size not matching the shards;
// communication failures.
absl::StatusOr<Variable> VocabParallelCrossEntropy(const Variable& logits, const Tensor& target,
                                                   comm::Communicator* tp,
                                                   const CrossEntropyOptions& options = {});

// Sum of loss over tokens whose target is not ignore_index, divided by their
// count (0-d; 0 when every token is ignored).
absl::StatusOr<Variable> MeanOverNonIgnored(const Variable& loss, const Tensor& target,
                                            int64_t ignore_index = -100);

}  // namespace tpx::loss

#endif  // TPX_LOSS_CROSS_ENTROPY_H_
