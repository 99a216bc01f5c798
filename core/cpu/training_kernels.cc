// CPU DeviceKernels: the fused training kernels of the vocab-parallel loss
// (loss/cross_entropy.cc), gradient clipping (optim/clip_grad.cc), AdamW
// (optim/adamw.cc) and dropout (rng/dropout.cc). One pass over memory each, rows or element ranges split
// over the kernel threads (core/cpu/parallel.h), bf16/f16 read and written in
// place (converted in registers, arithmetic in f32). Loops are compiled per
// ISA (TPX_VECTOR_CLONES).
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/cpu/cpu_kernels.h"
#include "core/cpu/loops.h"
#include "core/cpu/parallel.h"
#include "core/cpu/vec_math.h"

namespace tpx::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Independent accumulators per reduction so the compiler keeps them in
// vector registers (one float accumulator would serialise the loop).
constexpr int kLanes = 16;
// Logits per chunk of the online max / sum-exp pass: the second sweep over a
// chunk hits L1.
constexpr int64_t kChunk = 1024;
// Target codes of the cross-entropy kernels (core/device_kernels.h).
constexpr int64_t kIgnoredRow = -2;

// ---- Cross entropy. ----

// Max of x[0, n) (a NaN may or may not win; its exp makes the sums NaN anyway).
TPX_VEC_INLINE float MaxOf(const float* x, int64_t n) {
  float m[kLanes];
  std::fill_n(m, kLanes, kNegInf);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) m[l] = x[i + l] > m[l] ? x[i + l] : m[l];
  }
  for (; i < n; ++i) m[0] = x[i] > m[0] ? x[i] : m[0];
  float r = m[0];
  for (int l = 1; l < kLanes; ++l) r = m[l] > r ? m[l] : r;
  return r;
}

// Adds sum exp(x - m) and sum (x - m) over x[0, n) to the running sums.
TPX_VEC_INLINE void SumExpShifted(const float* x, int64_t n, float m, float* sum_exp,
                                  float* sum_d) {
  float se[kLanes] = {}, sd[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float d = x[i + l] - m;
      se[l] += Exp(d);
      sd[l] += d;
    }
  }
  for (; i < n; ++i) {
    const float d = x[i] - m;
    se[0] += Exp(d);
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

// One read of a row: the running max is updated per chunk and the partial
// sums are rescaled to it. Writes {max, sum exp, sum shifted, target logit}.
template <typename T>
TPX_VECTOR_CLONES void RowStats(const T* x, int64_t v, int64_t target, float* out) {
  float buf[kChunk];
  float m = kNegInf, s = 0.f, sd = 0.f;
  int64_t seen = 0;
  for (int64_t c = 0; c < v; c += kChunk) {
    const int64_t n = std::min(kChunk, v - c);
    const float* xc = buf;
    if constexpr (std::is_same_v<T, float>) {
      xc = x + c;
    } else {
      for (int64_t i = 0; i < n; ++i) buf[i] = Load(x[c + i]);
    }
    const float cm = MaxOf(xc, n);
    if (cm > m) {
      if (seen > 0) {
        s *= Exp(m - cm);
        sd += static_cast<float>(seen) * (m - cm);
      }
      m = cm;
    }
    if (m != kNegInf) SumExpShifted(xc, n, m, &s, &sd);
    seen += n;
  }
  out[0] = m;
  out[1] = s;
  out[2] = sd;
  out[3] = target >= 0 ? static_cast<float>(Load(x[target])) : 0.f;
}

// dx_j = g * (exp(x_j - lse) - smooth_over_k) - [j == target] * g * target_coeff.
template <typename T>
TPX_VECTOR_CLONES TPX_INLINE_CALLS void RowGrad(const T* x, T* dx, int64_t v, float lse, float g,
                                                float smooth_over_k, float target_coeff,
                                                int64_t target) {
  StoreRow(dx, v, [&](int64_t j) { return g * (Exp(Load(x[j]) - lse) - smooth_over_k); });
  if (target >= 0) dx[target] = StoreAs<T>(Load(dx[target]) - g * target_coeff);
}

// A freshly mapped gradient buffer as large as the logits costs one page
// fault per 4 KiB on its first write, more than the kernel itself;
// transparent huge pages (where the system allows them on request) cut that
// 512-fold. Only whole 2 MiB pages inside the buffer are advised.
void AdviseHugePages(void* data, size_t bytes) {
#if defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) / kHuge * kHuge;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / kHuge * kHuge;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#endif
}

// ---- Gradient norm. ----

// Elements per partial sum of squares: a fixed chunking, so the sum does not
// depend on the thread count.
constexpr int64_t kSquaresChunk = 4096;

template <typename T>
TPX_VECTOR_CLONES double SumOfSquaresRange(const T* x, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) {
      const double v = Load(x[i + l]);
      acc[l] += v * v;
    }
  }
  double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) {
    const double v = Load(x[i]);
    s += v * v;
  }
  return s;
}

// ---- AdamW. ----

// The arrays never overlap (separate tensors); saying so, and building
// without errno for sqrt, lets the update vectorise.
template <typename G>
TPX_VECTOR_CLONES void AdamWRange(float* __restrict p, const G* __restrict g,
                                  float* __restrict m, float* __restrict s,
                                  BF16* __restrict working, int64_t n,
                                  const AdamWCoefficients& c) {
  const float decay = c.decay, b1 = c.beta1, b2 = c.beta2, step = c.step_size;
  const float inv_sqrt_bias2 = c.inv_sqrt_bias2, eps = c.eps, grad_scale = c.grad_scale;
  for (int64_t j = 0; j < n; ++j) {
    const float gj = Load(g[j]) * grad_scale;
    p[j] *= decay;
    m[j] = b1 * m[j] + (1.0f - b1) * gj;
    s[j] = b2 * s[j] + (1.0f - b2) * gj * gj;
    p[j] -= step * m[j] / (std::sqrt(s[j]) * inv_sqrt_bias2 + eps);
  }
  // The bf16 working weights from the same cache lines, still in L1.
  if (working != nullptr) FloatToBF16Array(p, working, n);
}

// Elements per AdamW block: the working-weight store re-reads p from L1.
constexpr int64_t kAdamWBlock = 2048;

// Block b of an update (kAdamWBlock elements, fewer at the end).
void AdamWBlock(const AdamWOperands& u, int64_t b) {
  const int64_t j = b * kAdamWBlock;
  const int64_t len = std::min(kAdamWBlock, u.param.numel() - j);
  float* p = u.param.data<float>() + j;
  float* m = u.exp_avg.data<float>() + j;
  float* s = u.exp_avg_sq.data<float>() + j;
  BF16* w = u.working.defined() ? u.working.data<BF16>() + j : nullptr;
  if (u.grad.dtype() == DType::kBF16) {
    AdamWRange(p, u.grad.data<BF16>() + j, m, s, w, len, u.coefficients);
  } else {
    AdamWRange(p, u.grad.data<float>() + j, m, s, w, len, u.coefficients);
  }
}

// Fixed-size blocks of several tensors numbered one after another, so that
// one parallel loop covers all of them (an optimizer's parameters: one fork
// and join per step instead of one per tensor, and the small tensors split
// too): entry i's blocks are [first(i), first(i + 1)).
class BlocksOfEntries {
 public:
  BlocksOfEntries(const std::vector<int64_t>& sizes, int64_t block) : first_(sizes.size() + 1) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      first_[i + 1] = first_[i] + (sizes[i] + block - 1) / block;
    }
  }
  int64_t total() const { return first_.back(); }
  int64_t first(size_t i) const { return first_[i]; }
  // fn(entry, block within the entry) for the blocks [begin, end) in order.
  template <typename Fn>
  void ForRange(int64_t begin, int64_t end, Fn&& fn) const {
    // The last entry starting at or before `begin` (entries without blocks
    // share their successor's start and are stepped over).
    size_t e = std::upper_bound(first_.begin(), first_.end(), begin) - first_.begin() - 1;
    for (int64_t b = begin; b < end; ++b) {
      while (b >= first_[e + 1]) ++e;
      fn(e, b - first_[e]);
    }
  }

 private:
  std::vector<int64_t> first_;
};

// ---- Dropout + bias + residual. ----

template <typename T, bool kBias, bool kKeep, bool kResidual>
TPX_VEC_INLINE void DropoutAddRange(T* out, const T* x, const T* bias, const bool* keep,
                                    const T* residual, int64_t n, float scale) {
  StoreRow(out, n, [&](int64_t i) {
    float v = Load(x[i]);
    if constexpr (kBias) v += Load(bias[i]);
    if constexpr (kKeep) v = keep[i] ? v * scale : 0.0f;
    else v *= scale;
    if constexpr (kResidual) v += Load(residual[i]);
    return v;
  });
}

// The eight variants of one dtype, chosen per call (the branches stay out of
// the element loop).
template <typename T>
TPX_VECTOR_CLONES TPX_INLINE_CALLS void DropoutAddAny(T* out, const T* x, const T* bias,
                                                      const bool* keep, const T* residual,
                                                      int64_t n, float scale) {
  const int variant = (bias != nullptr ? 4 : 0) | (keep != nullptr ? 2 : 0) |
                      (residual != nullptr ? 1 : 0);
  switch (variant) {
    case 0: DropoutAddRange<T, false, false, false>(out, x, bias, keep, residual, n, scale); break;
    case 1: DropoutAddRange<T, false, false, true>(out, x, bias, keep, residual, n, scale); break;
    case 2: DropoutAddRange<T, false, true, false>(out, x, bias, keep, residual, n, scale); break;
    case 3: DropoutAddRange<T, false, true, true>(out, x, bias, keep, residual, n, scale); break;
    case 4: DropoutAddRange<T, true, false, false>(out, x, bias, keep, residual, n, scale); break;
    case 5: DropoutAddRange<T, true, false, true>(out, x, bias, keep, residual, n, scale); break;
    case 6: DropoutAddRange<T, true, true, false>(out, x, bias, keep, residual, n, scale); break;
    default: DropoutAddRange<T, true, true, true>(out, x, bias, keep, residual, n, scale); break;
  }
}

// Elements per dropout piece without a bias (with one, a piece is a bias row).
constexpr int64_t kDropoutPiece = 4096;

template <typename T>
const T* DataOrNull(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

absl::Status CpuDeviceKernels::CrossEntropyStats(const Tensor& stats, const Tensor& logits,
                                                 const Tensor& target, int64_t rows, int64_t v) {
  float* st = stats.data<float>();
  const int64_t* tp = target.data<int64_t>();
  ParallelFloatRows(logits.dtype(), rows, v, [&](auto tag, int64_t first, int64_t last) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    for (int64_t r = first; r < last; ++r) {
      float* out = st + r * 4;
      if (tp[r] == kIgnoredRow) {
        out[0] = kNegInf;
        out[1] = out[2] = out[3] = 0.f;
        continue;
      }
      RowStats(x + r * v, v, tp[r], out);
    }
  });
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::CrossEntropyBackward(const Tensor& dx, const Tensor& logits,
                                                    const Tensor& lse, const Tensor& g,
                                                    const Tensor& target, int64_t rows,
                                                    int64_t v, float smooth_over_k,
                                                    float target_coeff) {
  if (!dx.SharesStorageWith(logits)) AdviseHugePages(dx.raw_data(), dx.nbytes());
  const float* lp = lse.data<float>();
  const float* gp = g.data<float>();
  const int64_t* tp = target.data<int64_t>();
  ParallelFloatRows(logits.dtype(), rows, v, [&](auto tag, int64_t first, int64_t last) {
    using T = decltype(tag);
    const T* x = logits.data<T>();
    T* out = dx.data<T>();
    for (int64_t r = first; r < last; ++r) {
      T* o = out + r * v;
      if (tp[r] == kIgnoredRow) {
        std::fill(o, o + v, StoreAs<T>(0.0f));
        continue;
      }
      RowGrad(x + r * v, o, v, lp[r], gp[r], smooth_over_k, target_coeff, tp[r]);
    }
  });
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::SumOfSquares(const Tensor& x, int64_t, double* out) {
  return SumsOfSquares(absl::Span<const Tensor>(&x, 1), out);
}

absl::Status CpuDeviceKernels::SumsOfSquares(absl::Span<const Tensor> xs, double* out) {
  std::vector<int64_t> sizes;
  for (const Tensor& x : xs) sizes.push_back(x.numel());
  const BlocksOfEntries chunks(sizes, kSquaresChunk);
  std::vector<double> partial(chunks.total());
  ParallelFor(chunks.total(), kSquaresChunk, [&](int64_t first, int64_t last) {
    chunks.ForRange(first, last, [&](size_t e, int64_t c) {
      const int64_t i = c * kSquaresChunk;
      const int64_t len = std::min(kSquaresChunk, sizes[e] - i);
      DispatchFloat(xs[e].dtype(), [&](auto tag) {
        using T = decltype(tag);
        partial[chunks.first(e) + c] = SumOfSquaresRange(xs[e].data<T>() + i, len);
      });
    });
  });
  // Each tensor's partials added in chunk order: its sum does not depend on
  // the thread count or on the other tensors.
  for (size_t e = 0; e < xs.size(); ++e) {
    double s = 0;
    for (int64_t c = chunks.first(e); c < chunks.first(e + 1); ++c) s += partial[c];
    out[e] = s;
  }
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::AdamWStep(const Tensor& param, const Tensor& grad,
                                         const Tensor& exp_avg, const Tensor& exp_avg_sq,
                                         const Tensor& working, int64_t,
                                         const AdamWCoefficients& c) {
  const AdamWOperands update{param, grad, exp_avg, exp_avg_sq, working, c};
  return AdamWSteps(absl::Span<const AdamWOperands>(&update, 1));
}

absl::Status CpuDeviceKernels::AdamWSteps(absl::Span<const AdamWOperands> updates) {
  std::vector<int64_t> sizes;
  for (const AdamWOperands& u : updates) sizes.push_back(u.param.numel());
  const BlocksOfEntries blocks(sizes, kAdamWBlock);
  ParallelFor(blocks.total(), kAdamWBlock, [&](int64_t first, int64_t last) {
    blocks.ForRange(first, last, [&](size_t e, int64_t b) { AdamWBlock(updates[e], b); });
  });
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::DropoutAdd(const Tensor& out, const Tensor& x, const Tensor& bias,
                                          const Tensor& keep, const Tensor& residual, int64_t n,
                                          int64_t bias_n, float scale) {
  const bool* k = keep.defined() ? keep.data<bool>() : nullptr;
  const int64_t piece = bias.defined() ? bias_n : kDropoutPiece;
  const int64_t pieces = piece == 0 ? 0 : (n + piece - 1) / piece;
  ParallelFloatRows(x.dtype(), pieces, piece, [&](auto tag, int64_t first, int64_t last) {
    using T = decltype(tag);
    T* o = out.data<T>();
    const T* xp = x.data<T>();
    const T* b = DataOrNull<T>(bias);
    const T* r = DataOrNull<T>(residual);
    for (int64_t q = first; q < last; ++q) {
      const int64_t i = q * piece;
      const int64_t len = std::min(piece, n - i);
      DropoutAddAny(o + i, xp + i, b, k != nullptr ? k + i : nullptr,
                    r != nullptr ? r + i : nullptr, len, scale);
    }
  });
  return absl::OkStatus();
}

}  // namespace tpx::cpu
