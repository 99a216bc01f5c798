#include "loss/cross_entropy.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/autograd/function.h"
#include "core/autograd/ops.h"
#include "core/cpu/vec_math.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tpx::loss {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Independent accumulators per reduction so the compiler keeps them in vector
// registers (a single float accumulator would serialise the loop).
constexpr int kLanes = 16;
// Logits per chunk of the online max/sum-exp pass: small enough that the
// second sweep over the chunk hits L1.
constexpr int64_t kChunk = 1024;

template <typename T>
inline float ToF32(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return v.ToFloat();
  }
}
template <typename T>
inline T FromF32(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return T::FromFloat(v);
  }
}

// What one rank knows about one token's logits.
struct LocalStats {
  float max;          // m: max over the local logits
  float sum_exp;      // sum exp(x - m)
  float sum_shifted;  // sum (x - m)
  float target;       // the target's logit if it is local, else 0
};
static_assert(sizeof(LocalStats) == 4 * sizeof(float));

// Max of x[0, n).
inline float MaxOf(const float* x, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__)
  // vmaxps directly: the compiler does not turn a float select into max
  // (it would change which operand a NaN or -0 comes from).
  __m256 m0 = _mm256_set1_ps(kNegInf), m1 = m0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
    m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + i + 8));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_max_ps(m0, m1));
  float m = lanes[0];
  for (int l = 1; l < 8; ++l) m = lanes[l] > m ? lanes[l] : m;
#else
  float m = kNegInf;
#endif
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// The chunk as f32: the logits themselves for f32, else converted into buf.
template <typename T>
inline const float* ChunkAsF32(const T* x, int64_t n, float* buf) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    for (int64_t i = 0; i < n; ++i) buf[i] = x[i].ToFloat();
    return buf;
  }
}

inline void SumExpShifted(const float* buf, int64_t n, float m, float* sum_exp, float* sum_d) {
  float se[kLanes] = {}, sd[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float d = buf[i + l] - m;
      se[l] += cpu::Exp(d);
      sd[l] += d;
    }
  }
  for (; i < n; ++i) {
    const float d = buf[i] - m;
    se[0] += cpu::Exp(d);
    sd[0] += d;
  }
  float a = 0.f, b = 0.f;
  for (int l = 0; l < kLanes; ++l) {
    a += se[l];
    b += sd[l];
  }
  *sum_exp += a;
  *sum_d += b;
}

// One read of the row: the running max is updated per chunk and the partial
// sums are rescaled to it.
template <typename T>
LocalStats RowStats(const T* x, int64_t v, int64_t local_target) {
  float buf[kChunk];
  float m = kNegInf, s = 0.f, sd = 0.f;
  int64_t seen = 0;
  for (int64_t c = 0; c < v; c += kChunk) {
    const int64_t n = std::min(kChunk, v - c);
    const float* xc = ChunkAsF32(x + c, n, buf);
    const float cm = MaxOf(xc, n);
    if (cm > m) {
      if (seen > 0) {
        s *= cpu::Exp(m - cm);
        sd += static_cast<float>(seen) * (m - cm);
      }
      m = cm;
    }
    if (m != kNegInf) SumExpShifted(xc, n, m, &s, &sd);
    seen += n;
  }
  const float t = local_target >= 0 ? ToF32(x[local_target]) : 0.f;
  return LocalStats{m, s, sd, t};
}

// dx_i = g * (exp(x_i - lse) - s / K) - [i == target] * g * (1 - s).
template <typename T>
void RowGrad(const T* x, T* dx, int64_t v, float lse, float g, float smooth_over_k,
             float target_coeff, int64_t local_target) {
  for (int64_t i = 0; i < v; ++i) {
    dx[i] = FromF32<T>(g * (cpu::Exp(ToF32(x[i]) - lse) - smooth_over_k));
  }
  if (local_target >= 0) {
    dx[local_target] = FromF32<T>(ToF32(dx[local_target]) - g * target_coeff);
  }
}

// Runs fn(begin, end) over [0, n) split in `threads` pieces.
template <typename Fn>
void ParallelFor(int64_t n, int threads, Fn&& fn) {
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n)));
  if (threads <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  const std::vector<int64_t> sizes = ops::SplitSizes(n, threads);
  std::vector<std::thread> pool;
  int64_t begin = sizes[0];
  for (int t = 1; t < threads; ++t) {
    pool.emplace_back([&fn, begin, end = begin + sizes[t]] { fn(begin, end); });
    begin += sizes[t];
  }
  fn(int64_t{0}, sizes[0]);
  for (auto& th : pool) th.join();
}

// The gradient buffer is as large as the logits and freshly mapped: with
// 4 KiB pages its first write costs one page fault per 4 KiB, more than the
// kernel itself. Transparent huge pages (where the system allows them on
// request) cut that 512-fold. Only whole 2 MiB pages inside the buffer are
// advised.
void AdviseHugePages(void* data, size_t bytes) {
#if defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) / kHuge * kHuge;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / kHuge * kHuge;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#endif
}

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
    if (!UsesFusedLoops(logits)) return ForwardWithOps(logits);
    TPX_ASSIGN_OR_RETURN(Tensor stats, Tensor::Empty({tp_size_, rows_, 4}, DType::kF32));
    float* local = stats.data<float>() + static_cast<int64_t>(rank_) * rows_ * 4;
    TPX_RETURN_IF_ERROR(DispatchLogits(logits.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* x = logits.data<T>();
      ParallelFor(rows_, opt_.num_threads, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          LocalStats st{kNegInf, 0.f, 0.f, 0.f};
          if (targets_[r] != opt_.ignore_index)
            st = RowStats(x + r * v_local_, v_local_, LocalTarget(r));
          std::memcpy(local + r * 4, &st, sizeof(st));
        }
      });
      return absl::OkStatus();
    }));
    if (tp_size_ > 1) {
      // In-place all-gather: this rank's block already sits at its slot.
      TPX_RETURN_IF_ERROR(tp_->AllGather(stats.raw_data(), rows_ * 4, DType::kF32).Wait());
    }
    TPX_ASSIGN_OR_RETURN(Tensor loss, Tensor::Empty(target_.shape(), DType::kF32));
    TPX_ASSIGN_OR_RETURN(lse_, Tensor::Empty({rows_, 1}, DType::kF32));
    Combine(stats.data<float>(), loss.data<float>(), lse_.data<float>());
    SaveForBackward({logits});
    return std::vector<Tensor>{loss};
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
    if (!UsesFusedLoops(logits)) return BackwardWithOps(logits, g);
    Tensor dx = logits;
    if (!opt_.in_place_grad) {
      TPX_ASSIGN_OR_RETURN(dx, Tensor::Empty(logits.shape(), logits.dtype()));
      AdviseHugePages(dx.raw_data(), dx.nbytes());
    }
    const float* gp = g.data<float>();
    const float* lse = lse_.data<float>();
    const float smooth_over_k = static_cast<float>(smoothing_ / static_cast<double>(vocab_));
    const float target_coeff = static_cast<float>(1.0 - smoothing_);
    TPX_RETURN_IF_ERROR(DispatchLogits(logits.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* x = logits.data<T>();
      T* out = dx.data<T>();
      ParallelFor(rows_, opt_.num_threads, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          T* o = out + r * v_local_;
          if (targets_[r] == opt_.ignore_index) {
            std::fill(o, o + v_local_, FromF32<T>(0.f));
            continue;
          }
          RowGrad(x + r * v_local_, o, v_local_, lse[r], gp[r], smooth_over_k, target_coeff,
                  LocalTarget(r));
        }
      });
      return absl::OkStatus();
    }));
    return std::vector<Tensor>{dx};
  }

 protected:
  void ReleaseSavedState() override {
    lse_ = Tensor();
    target_ = Tensor();
    targets_.clear();
    targets_.shrink_to_fit();
  }

 private:
  // The fused loops read the logits on the host; other devices (and
  // fused = false) take the core-op path, which computes the same per-token
  // statistics and gradient.
  bool UsesFusedLoops(const Tensor& logits) const {
    return opt_.fused && logits.device().is_cpu();
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

  // This rank's LocalStats per token ([rows, 4] f32 on the logits' device).
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
    // A row of -inf logits shifts by 0 (not -inf - -inf), as RowStats does.
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

  absl::StatusOr<std::vector<Tensor>> ForwardWithOps(const Tensor& logits) {
    const Device device = logits.device();
    TPX_ASSIGN_OR_RETURN(Tensor local, LocalStatsWithOps(logits));
    Tensor all = local;
    if (tp_size_ > 1) {
      TPX_ASSIGN_OR_RETURN(all, Tensor::Empty({tp_size_ * rows_, 4}, DType::kF32, device));
      TPX_RETURN_IF_ERROR(tp_->AllGather(local, all).Wait());
    }
    // rows x tp x 4 floats: combined on the host like the fused path.
    const std::vector<float> stats = all.ToVector<float>();
    std::vector<float> loss(static_cast<size_t>(rows_)), lse(static_cast<size_t>(rows_));
    Combine(stats.data(), loss.data(), lse.data());
    TPX_ASSIGN_OR_RETURN(lse_, RowsOn(lse, {rows_, 1}, device));
    TPX_ASSIGN_OR_RETURN(Tensor loss_t, RowsOn(loss, target_.shape(), device));
    SaveForBackward({logits});
    return std::vector<Tensor>{loss_t};
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

  template <typename Fn>
  static absl::Status DispatchLogits(DType dtype, Fn&& fn) {
    switch (dtype) {
      case DType::kF32: return fn(float{});
      case DType::kBF16: return fn(BF16{});
      case DType::kF16: return fn(F16{});
      default: return absl::InternalError("VocabParallelCrossEntropy: bad logits dtype");
    }
  }

  int64_t LocalTarget(int64_t r) const {
    const int64_t t = targets_[r] - vocab_start_;
    return (t >= 0 && t < v_local_) ? t : -1;
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
