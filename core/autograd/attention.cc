#include "core/autograd/attention.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/attention.h"
#include "core/autograd/ops.h"
#include "core/autograd/ops_internal.h"
#include "core/status_macros.h"

namespace tpx::ag {
namespace {

using internal::ApplyOp;
using internal::LambdaOp;
using internal::Tensors;

absl::Status CheckQkv(const Variable& qkv, int64_t heads, int64_t head_dim, const char* op) {
  if (!qkv.defined()) return absl::InvalidArgumentError(absl::StrCat(op, ": undefined qkv"));
  if (heads < 1 || head_dim < 1 || qkv.dim() != 3 || qkv.shape()[2] != 3 * heads * head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": qkv ", qkv.value().ToString(), " must be [t, b, 3 * heads * head_dim] with heads ",
        heads, " and head_dim ", head_dim, " positive"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Variable> ComposedCausalSelfAttention(const Variable& qkv, int64_t heads,
                                                     int64_t head_dim, double scale,
                                                     const AttentionProbsHook& on_probs) {
  TPX_RETURN_IF_ERROR(CheckQkv(qkv, heads, head_dim, "ComposedCausalSelfAttention"));
  const int64_t t = qkv.shape()[0], b = qkv.shape()[1];
  TPX_ASSIGN_OR_RETURN(std::vector<Variable> parts, Chunk(qkv, 3, -1));
  // [t, b, heads * head_dim] -> [b * heads, t, head_dim]
  auto per_head = [&](const Variable& x) -> absl::StatusOr<Variable> {
    TPX_ASSIGN_OR_RETURN(Variable r, Reshape(x, {t, b, heads, head_dim}));
    TPX_ASSIGN_OR_RETURN(r, Permute(r, {1, 2, 0, 3}));
    return Reshape(r, {b * heads, t, head_dim});
  };
  TPX_ASSIGN_OR_RETURN(Variable q, per_head(parts[0]));
  TPX_ASSIGN_OR_RETURN(Variable k, per_head(parts[1]));
  TPX_ASSIGN_OR_RETURN(Variable v, per_head(parts[2]));
  // q k^T as a transposed-operand product: k's gradient is then dS^T q, a
  // [t, t] x [t, head_dim] product, not a transposed one plus a copy.
  TPX_ASSIGN_OR_RETURN(Variable scores, Matmul(q, k, false, /*trans_b=*/true));
  TPX_ASSIGN_OR_RETURN(Variable probs, ScaledSoftmax(scores, scale, /*causal=*/true));
  if (on_probs) {
    TPX_ASSIGN_OR_RETURN(probs, on_probs(probs));
  }
  TPX_ASSIGN_OR_RETURN(Variable ctx, Matmul(probs, v));  // [b * heads, t, head_dim]
  TPX_ASSIGN_OR_RETURN(ctx, Reshape(ctx, {b, heads, t, head_dim}));
  TPX_ASSIGN_OR_RETURN(ctx, Permute(ctx, {2, 0, 1, 3}));
  return Reshape(ctx, {t, b, heads * head_dim});
}

absl::StatusOr<Variable> CausalSelfAttention(const Variable& qkv, int64_t heads,
                                             int64_t head_dim, double scale) {
  TPX_RETURN_IF_ERROR(CheckQkv(qkv, heads, head_dim, "CausalSelfAttention"));
  absl::StatusOr<Variable> fused = ApplyOp(
      "CausalSelfAttention",
      [heads, head_dim, scale](LambdaOp& op,
                               absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        const bool keep = op.needs_input_grad(0);
        TPX_ASSIGN_OR_RETURN(ops::CausalSelfAttentionResult r,
                             ops::CausalSelfAttention(in[0], heads, head_dim, scale, keep));
        if (keep) op.Save({in[0], r.stats});
        return Tensors{r.ctx};
      },
      [heads, head_dim, scale](LambdaOp& op,
                               absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor dqkv,
                             ops::CausalSelfAttentionBackward(g[0], op.Saved(0), op.Saved(1),
                                                              heads, head_dim, scale));
        return Tensors{dqkv};
      },
      {qkv});
  // A device without the fused kernels fails before anything is recorded.
  if (absl::IsUnimplemented(fused.status())) {
    return ComposedCausalSelfAttention(qkv, heads, head_dim, scale);
  }
  return fused;
}

}  // namespace tpx::ag
