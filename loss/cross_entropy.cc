#include "loss/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/autograd/function.h"
#include "core/autograd/ops.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tpx::loss {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::string PositionString(const Shape& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return absl::StrCat("[", absl::StrJoin(idx, ", "), "]");
}

class VocabParallelCrossEntropyFn final : public Function {
 public:
  VocabParallelCrossEntropyFn(Tensor target, comm::Communicator* tp, CrossEntropyOptions options)
      : target_(std::move(target)), tp_(tp), opt_(options) {}
  std::string name() const override { return "VocabParallelCrossEntropy"; }

  absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> in) override {
    const Tensor& logits = in[0];
    TPX_RETURN_IF_ERROR(Setup(logits));
    const Device device = logits.device();
    TPX_ASSIGN_OR_RETURN(Tensor local, LocalStats(logits));
    Tensor all = local;
    if (tp_size_ > 1) {
      TPX_ASSIGN_OR_RETURN(all, Tensor::Empty({tp_size_ * rows_, 4}, DType::kF32, device));
      TPX_RETURN_IF_ERROR(tp_->AllGather(local, all).Wait());
    }
    // tp x rows x 4 floats, combined on the host.
    const std::vector<float> stats = all.ToVector<float>();
    std::vector<float> loss(static_cast<size_t>(rows_)), lse(static_cast<size_t>(rows_));
    Combine(stats.data(), loss.data(), lse.data());
    TPX_ASSIGN_OR_RETURN(lse_, RowsOn(lse, {rows_, 1}, device));
    TPX_ASSIGN_OR_RETURN(Tensor loss_t, RowsOn(loss, target_.shape(), device));
    SaveForBackward({logits});
    return std::vector<Tensor>{loss_t};
  }

  absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor> grads) override {
    const Tensor& logits = saved(0);
    if (grads[0].device() != logits.device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(), ": the loss gradient is on ", grads[0].device().ToString(),
          " but the logits are on ", logits.device().ToString()));
    }
    TPX_ASSIGN_OR_RETURN(Tensor g32, grads[0].To(DType::kF32));
    TPX_ASSIGN_OR_RETURN(Tensor g, g32.Contiguous());
    if (!opt_.fused) return BackwardWithOps(logits, g);
    TPX_ASSIGN_OR_RETURN(Tensor targets, KernelTargets(logits.device()));
    TPX_ASSIGN_OR_RETURN(Tensor x, logits.View({rows_, v_local_}));
    absl::StatusOr<Tensor> dx = ops::CrossEntropyBackward(
        x, lse_, g, targets, smoothing_ / static_cast<double>(vocab_), 1.0 - smoothing_,
        opt_.in_place_grad);
    if (absl::IsUnimplemented(dx.status())) return BackwardWithOps(logits, g);
    TPX_RETURN_IF_ERROR(dx.status());
    TPX_ASSIGN_OR_RETURN(Tensor dx_shaped, dx->View(logits.shape()));
    return std::vector<Tensor>{dx_shaped};
  }

 protected:
  void ReleaseSavedState() override {
    lse_ = Tensor();
    target_ = Tensor();
    targets_.clear();
    targets_.shrink_to_fit();
  }

 private:
  // Per row, the target's column in this shard or the codes of
  // ops::CrossEntropyStats (elsewhere / ignored), on `device`.
  absl::StatusOr<Tensor> KernelTargets(Device device) const {
    std::vector<int64_t> t(static_cast<size_t>(rows_));
    for (int64_t r = 0; r < rows_; ++r) {
      t[r] = targets_[r] == opt_.ignore_index ? ops::kTargetIgnored : LocalTarget(r);
    }
    return RowsOn(t, {rows_}, device);
  }

  // Host tensors built from per-row values, moved to `device`.
  template <typename T>
  static absl::StatusOr<Tensor> RowsOn(const std::vector<T>& values, Shape shape, Device device) {
    TPX_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector<T>(values, std::move(shape)));
    return t.To(device);
  }

  // Rows whose target is ignore_index, as a [rows, 1] bool mask on `device`.
  absl::StatusOr<Tensor> IgnoredRows(Device device) const {
    std::vector<bool> ignored(static_cast<size_t>(rows_));
    for (int64_t r = 0; r < rows_; ++r) ignored[r] = targets_[r] == opt_.ignore_index;
    return RowsOn(ignored, {rows_, 1}, device);
  }

  // LocalStats composed from core ops ([rows, 4] f32 on the logits' device).
  absl::StatusOr<Tensor> LocalStatsWithOps(const Tensor& logits) const {
    const Device device = logits.device();
    if (v_local_ == 0) {  // no classes here: max -inf, empty sums
      std::vector<float> none(static_cast<size_t>(rows_ * 4), 0.f);
      for (int64_t r = 0; r < rows_; ++r) none[r * 4] = kNegInf;
      return RowsOn(none, {rows_, 4}, device);
    }
    TPX_ASSIGN_OR_RETURN(Tensor x, logits.View({rows_, v_local_}));
    TPX_ASSIGN_OR_RETURN(x, x.To(DType::kF32));
    TPX_ASSIGN_OR_RETURN(Tensor max, ops::Max(x, 1, /*keepdim=*/true));
    // A row of -inf logits shifts by 0 (not -inf - -inf), as the fused kernel does.
    TPX_ASSIGN_OR_RETURN(Tensor all_neg_inf, ops::EqScalar(max, kNegInf));
    TPX_ASSIGN_OR_RETURN(Tensor shift, ops::MaskedFill(max, all_neg_inf, 0.0));
    TPX_ASSIGN_OR_RETURN(Tensor shifted, ops::Sub(x, shift));
    TPX_ASSIGN_OR_RETURN(Tensor exps, ops::Exp(shifted));
    TPX_ASSIGN_OR_RETURN(Tensor sum_exp, ops::Sum(exps, 1, /*keepdim=*/true));
    TPX_ASSIGN_OR_RETURN(Tensor sum_shifted, ops::Sum(shifted, 1, /*keepdim=*/true));
    // The target's logit where it is local (a gather from the flat logits).
    std::vector<int64_t> at(static_cast<size_t>(rows_));
    std::vector<bool> absent(static_cast<size_t>(rows_));
    for (int64_t r = 0; r < rows_; ++r) {
      const int64_t t = LocalTarget(r);
      at[r] = r * v_local_ + std::max<int64_t>(t, 0);
      absent[r] = t < 0;
    }
    TPX_ASSIGN_OR_RETURN(Tensor at_t, RowsOn(at, {rows_}, device));
    TPX_ASSIGN_OR_RETURN(Tensor absent_t, RowsOn(absent, {rows_, 1}, device));
    TPX_ASSIGN_OR_RETURN(Tensor flat, x.View({rows_ * v_local_}));
    TPX_ASSIGN_OR_RETURN(Tensor target, ops::IndexSelect(flat, 0, at_t));
    TPX_ASSIGN_OR_RETURN(target, target.View({rows_, 1}));
    TPX_ASSIGN_OR_RETURN(target, ops::MaskedFill(target, absent_t, 0.0));
    return ops::Concat({max, sum_exp, sum_shifted, target}, 1);
  }

  // This rank's LocalStats per token: the device's fused kernel, else (or
  // with fused = false) composed from core ops.
  absl::StatusOr<Tensor> LocalStats(const Tensor& logits) const {
    if (opt_.fused) {
      TPX_ASSIGN_OR_RETURN(Tensor targets, KernelTargets(logits.device()));
      TPX_ASSIGN_OR_RETURN(Tensor x, logits.View({rows_, v_local_}));
      absl::StatusOr<Tensor> stats = ops::CrossEntropyStats(x, targets);
      if (!absl::IsUnimplemented(stats.status())) return stats;
    }
    return LocalStatsWithOps(logits);
  }

  // dx = g (softmax(x) - s/K) - [i == target] g (1 - s); zero for ignored rows.
  absl::StatusOr<std::vector<Tensor>> BackwardWithOps(const Tensor& logits, const Tensor& g) {
    const Device device = logits.device();
    TPX_ASSIGN_OR_RETURN(Tensor x, logits.View({rows_, v_local_}));
    TPX_ASSIGN_OR_RETURN(x, x.To(DType::kF32));
    TPX_ASSIGN_OR_RETURN(Tensor g_rows, g.View({rows_, 1}));
    TPX_ASSIGN_OR_RETURN(Tensor p, ops::Sub(x, lse_));
    TPX_ASSIGN_OR_RETURN(p, ops::Exp(p));
    const double smooth_over_k = smoothing_ / static_cast<double>(vocab_);
    if (smooth_over_k != 0.0) {
      TPX_ASSIGN_OR_RETURN(p, ops::AddScalar(p, -smooth_over_k));
    }
    TPX_ASSIGN_OR_RETURN(Tensor dx, ops::Mul(p, g_rows));
    TPX_ASSIGN_OR_RETURN(Tensor ignored, IgnoredRows(device));
    TPX_ASSIGN_OR_RETURN(dx, ops::MaskedFill(dx, ignored, 0.0));
    // The target term, scattered into the rows whose target is local.
    std::vector<int64_t> at, rows;
    for (int64_t r = 0; r < rows_; ++r) {
      const int64_t t = LocalTarget(r);
      if (targets_[r] == opt_.ignore_index || t < 0) continue;
      at.push_back(r * v_local_ + t);
      rows.push_back(r);
    }
    if (!at.empty()) {
      const int64_t n = static_cast<int64_t>(at.size());
      TPX_ASSIGN_OR_RETURN(Tensor at_t, RowsOn(at, {n}, device));
      TPX_ASSIGN_OR_RETURN(Tensor rows_t, RowsOn(rows, {n}, device));
      TPX_ASSIGN_OR_RETURN(Tensor g_flat, g.View({rows_}));
      TPX_ASSIGN_OR_RETURN(Tensor coeff, ops::IndexSelect(g_flat, 0, rows_t));
      TPX_ASSIGN_OR_RETURN(coeff, ops::Scale(coeff, -(1.0 - smoothing_)));
      TPX_ASSIGN_OR_RETURN(Tensor dx_flat, dx.View({rows_ * v_local_}));
      TPX_RETURN_IF_ERROR(ops::IndexAdd(dx_flat, 0, at_t, coeff));
    }
    TPX_ASSIGN_OR_RETURN(dx, dx.To(logits.dtype()));
    TPX_ASSIGN_OR_RETURN(dx, dx.View(logits.shape()));
    if (opt_.in_place_grad) {
      TPX_RETURN_IF_ERROR(logits.CopyFrom(dx));
      return std::vector<Tensor>{logits};
    }
    return std::vector<Tensor>{dx};
  }

  int64_t LocalTarget(int64_t r) const {
    const int64_t t = targets_[r] - vocab_start_;
    return (t >= 0 && t < v_local_) ? t : ops::kTargetElsewhere;
  }

  std::string Where() const {
    return absl::StrCat("VocabParallelCrossEntropy (rank ", rank_, " of ", tp_size_, ")");
  }

  absl::Status Setup(const Tensor& logits) {
    rank_ = tp_ != nullptr ? tp_->rank() : 0;
    tp_size_ = tp_ != nullptr ? tp_->size() : 1;
    if (logits.dim() < 1 || !logits.is_contiguous() || !IsFloatingPoint(logits.dtype())) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(), ": logits must be contiguous floating [..., v_local], got ",
          logits.ToString()));
    }
    const Shape want(logits.shape().begin(), logits.shape().end() - 1);
    if (!target_.defined() || target_.shape() != want ||
        (target_.dtype() != DType::kI64 && target_.dtype() != DType::kI32)) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(), ": target must be i64/i32 of shape ", ShapeString(want), " for logits ",
          logits.ToString(), ", got ", target_.defined() ? target_.ToString() : "undefined"));
    }
    if (!(opt_.label_smoothing >= 0.0 && opt_.label_smoothing < 1.0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(), ": label_smoothing must be in [0, 1), got ", opt_.label_smoothing));
    }
    v_local_ = logits.size(-1);
    rows_ = NumElements(want);
    vocab_ = opt_.vocab_size > 0 ? opt_.vocab_size : v_local_ * tp_size_;
    shard_sizes_ = ops::SplitSizes(vocab_, tp_size_);
    if (shard_sizes_[rank_] != v_local_) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(), ": logits hold ", v_local_, " classes but a vocabulary of ", vocab_,
          " split over ", tp_size_, " ranks gives this rank ", shard_sizes_[rank_]));
    }
    vocab_start_ = 0;
    for (int r = 0; r < rank_; ++r) vocab_start_ += shard_sizes_[r];
    if (opt_.label_smoothing > 0.0 && vocab_ < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(), ": label smoothing needs at least 2 classes"));
    }
    smoothing_ = opt_.label_smoothing > 0.0
                     ? opt_.label_smoothing * static_cast<double>(vocab_) /
                           static_cast<double>(vocab_ - 1)
                     : 0.0;
    TPX_ASSIGN_OR_RETURN(Tensor t64, target_.To(DType::kI64));
    targets_ = t64.ToVector<int64_t>();
    for (int64_t i = 0; i < rows_; ++i) {
      const int64_t t = targets_[i];
      if (t != opt_.ignore_index && (t < 0 || t >= vocab_)) {
        return absl::InvalidArgumentError(absl::StrCat(
            Where(), ": target", PositionString(want, i), " = ", t, " is outside [0, ", vocab_,
            ") and is not ignore_index (", opt_.ignore_index, ")"));
      }
    }
    return absl::OkStatus();
  }

  // Merges every rank's LocalStats per token into the loss and log-sum-exp.
  void Combine(const float* stats, float* loss, float* lse) const {
    const double inv_k = 1.0 / static_cast<double>(vocab_);
    for (int64_t r = 0; r < rows_; ++r) {
      if (targets_[r] == opt_.ignore_index) {
        loss[r] = 0.f;
        lse[r] = 0.f;
        continue;
      }
      float m = kNegInf;
      for (int k = 0; k < tp_size_; ++k) m = std::max(m, stats[(k * rows_ + r) * 4]);
      double s = 0.0, sum_shifted = 0.0, target = 0.0;
      for (int k = 0; k < tp_size_; ++k) {
        const float* st = stats + (k * rows_ + r) * 4;
        if (shard_sizes_[k] == 0) continue;
        if (st[0] != kNegInf) s += st[1] * std::exp(static_cast<double>(st[0]) - m);
        sum_shifted += st[2] + static_cast<double>(shard_sizes_[k]) * (double(st[0]) - m);
        target += st[3];
      }
      const double log_s = std::log(s);
      // log p_target and mean_i log p_i, both as (x - M) - log S.
      const double logp_target = (target - m) - log_s;
      const double mean_logp = sum_shifted * inv_k - log_s;
      loss[r] = static_cast<float>(-(1.0 - smoothing_) * logp_target - smoothing_ * mean_logp);
      lse[r] = static_cast<float>(m + log_s);
    }
  }

  Tensor target_;
  comm::Communicator* tp_;
  CrossEntropyOptions opt_;
  int rank_ = 0, tp_size_ = 1;
  int64_t v_local_ = 0, rows_ = 0, vocab_ = 0, vocab_start_ = 0;
  std::vector<int64_t> shard_sizes_;
  double smoothing_ = 0.0;
  std::vector<int64_t> targets_;
  Tensor lse_;
};

}  // namespace

absl::StatusOr<Variable> VocabParallelCrossEntropy(const Variable& logits, const Tensor& target,
                                                   comm::Communicator* tp,
                                                   const CrossEntropyOptions& options) {
  return Apply(std::make_shared<VocabParallelCrossEntropyFn>(target, tp, options), {logits});
}

absl::StatusOr<Variable> MeanOverNonIgnored(const Variable& loss, const Tensor& target,
                                            int64_t ignore_index) {
  if (!target.defined() || loss.shape() != target.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MeanOverNonIgnored: loss ", loss.value().ToString(), " and target ",
        target.defined() ? target.ToString() : "undefined", " must have the same shape"));
  }
  TPX_ASSIGN_OR_RETURN(Tensor t64, target.To(DType::kI64));
  int64_t count = 0;
  for (int64_t t : t64.ToVector<int64_t>()) count += (t != ignore_index);
  // Ignored tokens already carry loss 0 and get no gradient, so the plain sum
  // over all tokens divided by the count is the masked mean.
  TPX_ASSIGN_OR_RETURN(Variable sum, ag::Sum(loss));
  return ag::Scale(sum, count > 0 ? 1.0 / static_cast<double>(count) : 0.0);
}

}  // namespace tpx::loss
