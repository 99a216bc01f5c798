// core/attention.h: argument checks and output allocation; the loops are
// the device's DeviceKernels::CausalSelfAttention and its backward.
#include "core/attention.h"

#include "absl/strings/str_cat.h"
#include "core/device_kernels.h"
#include "core/ops_internal.h"
#include "core/status_macros.h"

namespace tpx::ops {
namespace {

using internal::CheckFloating;
using internal::CheckInput;

// qkv floating [t, b, 3 * heads * head_dim] with positive heads/head_dim.
absl::Status CheckQkv(const Tensor& qkv, int64_t heads, int64_t head_dim, const char* op) {
  TPX_RETURN_IF_ERROR(CheckInput(qkv, op, "qkv"));
  TPX_RETURN_IF_ERROR(CheckFloating(qkv, op, "qkv"));
  if (heads < 1 || head_dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": heads ", heads, " and head_dim ",
                                                   head_dim, " must be positive"));
  }
  if (qkv.dim() != 3 || qkv.size(2) != 3 * heads * head_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": qkv ", qkv.ToString(), " must be [t, b, 3 * heads * head_dim] = [t, b, ",
                     3 * heads * head_dim, "] for heads ", heads, " and head_dim ", head_dim));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CausalSelfAttentionResult> CausalSelfAttention(const Tensor& qkv, int64_t heads,
                                                              int64_t head_dim, double scale,
                                                              bool keep_stats) {
  constexpr const char* kOp = "CausalSelfAttention";
  TPX_RETURN_IF_ERROR(CheckQkv(qkv, heads, head_dim, kOp));
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k, internal::KernelsOf(kOp, {&qkv}));
  const int64_t t = qkv.size(0), b = qkv.size(1);
  TPX_ASSIGN_OR_RETURN(Tensor qc, qkv.Contiguous());
  CausalSelfAttentionResult r;
  TPX_ASSIGN_OR_RETURN(r.ctx, Tensor::Empty({t, b, heads * head_dim}, qkv.dtype(), qkv.device()));
  if (keep_stats) {
    TPX_ASSIGN_OR_RETURN(r.stats, Tensor::Empty({b * heads, t, kAttentionStatsPerRow},
                                                 DType::kF32, qkv.device()));
  }
  if (t > 0 && b > 0) {
    TPX_RETURN_IF_ERROR(k->CausalSelfAttention(r.ctx, r.stats, qc, t, b, heads, head_dim, scale));
  }
  return r;
}

absl::StatusOr<Tensor> CausalSelfAttentionBackward(const Tensor& grad_ctx, const Tensor& qkv,
                                                   const Tensor& stats, int64_t heads,
                                                   int64_t head_dim, double scale) {
  constexpr const char* kOp = "CausalSelfAttentionBackward";
  TPX_RETURN_IF_ERROR(CheckQkv(qkv, heads, head_dim, kOp));
  TPX_RETURN_IF_ERROR(CheckInput(grad_ctx, kOp, "grad_ctx"));
  TPX_RETURN_IF_ERROR(CheckInput(stats, kOp, "stats"));
  const int64_t t = qkv.size(0), b = qkv.size(1);
  if (grad_ctx.dtype() != qkv.dtype() || grad_ctx.shape() != Shape{t, b, heads * head_dim}) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": grad_ctx ", grad_ctx.ToString(),
                                                   " must be [", t, ", ", b, ", ",
                                                   heads * head_dim, "] of qkv's dtype (qkv ",
                                                   qkv.ToString(), ")"));
  }
  if (stats.dtype() != DType::kF32 ||
      stats.shape() != Shape{b * heads, t, kAttentionStatsPerRow}) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": stats ", stats.ToString(),
                                                   " must be f32 [", b * heads, ", ", t, ", ",
                                                   kAttentionStatsPerRow, "] (the forward's)"));
  }
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k, internal::KernelsOf(kOp, {&grad_ctx, &qkv, &stats}));
  TPX_ASSIGN_OR_RETURN(Tensor gc, grad_ctx.Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor qc, qkv.Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor sc, stats.Contiguous());
  TPX_ASSIGN_OR_RETURN(Tensor dqkv, Tensor::Empty(qkv.shape(), qkv.dtype(), qkv.device()));
  if (t > 0 && b > 0) {
    TPX_RETURN_IF_ERROR(
        k->CausalSelfAttentionBackward(dqkv, gc, qc, sc, t, b, heads, head_dim, scale));
  }
  return dqkv;
}

}  // namespace tpx::ops
