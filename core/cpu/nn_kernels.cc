// CPU DeviceKernels: the fused transformer kernels (layer norm forward and
// backward, scaled and causal softmax forward and backward, bias + GeLU
// forward and backward). Each walks a
// row once or twice, reading and writing bf16/f16 in place and computing in
// f32, instead of the five to twelve passes and temporaries of the composed
// ops, and rows are split over the kernel threads. Row loops are compiled
// per ISA (TPX_VECTOR_CLONES).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/cpu/bf16_convert.h"
#include "core/cpu/column_sums.h"
#include "core/cpu/cpu_kernels.h"
#include "core/cpu/loops.h"
#include "core/cpu/parallel.h"
#include "core/cpu/vec_math.h"
#include "core/cpu/vec_math_avx512.h"
#include "core/cpu_features.h"
#include "core/lane_mask.h"

namespace tpx::cpu {
namespace {

// Rows of layer norm handled together: their reductions overlap
// (Sum8Rows) where one row of 128 would wait on its additions.
constexpr int kNormRows = 4;
// Rows read ahead of the group in hand. Reading kNormRows short rows side
// by side hides them from the hardware prefetcher, which follows one
// stream; in a training step these inputs come from memory, not cache.
constexpr int64_t kPrefetchRows = 2 * kNormRows;

// Asks for [p, p + bytes) in cache (one prefetch per 64-byte line).
inline void PrefetchBytes(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t i = 0; i < bytes; i += 64) __builtin_prefetch(c + i, 0, 3);
}

// R consecutive rows of layer norm from f32 x (row stride h), written in T.
// w, b may be null. Each row's arithmetic is that of a row alone.
template <int R, typename T>
TPX_VEC_INLINE void LayerNormRowsFromF32(const float* x, const float* w, const float* b, T* y,
                                         int64_t h, float eps, float* mean_out,
                                         float* rstd_out) {
  float mean[R], sq[R];
  Sum8Rows<R>(
      h, [x, h](int r, int64_t i) { return LoadFloat8(x + r * h + i); },
      [x, h](int r, int64_t j) { return x[r * h + j]; }, mean);
  for (int r = 0; r < R; ++r) mean[r] /= static_cast<float>(h);
  Sum8Rows<R>(
      h,
      [x, h, &mean](int r, int64_t i) {
        const Float8 c = LoadFloat8(x + r * h + i) - mean[r];
        return c * c;
      },
      [x, h, &mean](int r, int64_t j) {
        const float c = x[r * h + j] - mean[r];
        return c * c;
      },
      sq);
  for (int r = 0; r < R; ++r) {
    const float* xr = x + r * h;
    T* yr = y + r * h;
    const float m = mean[r];
    const float rstd = 1.0f / std::sqrt(sq[r] / static_cast<float>(h) + eps);
    if (w != nullptr && b != nullptr) {
      StoreRow(yr, h, [&](int64_t j) { return (xr[j] - m) * rstd * w[j] + b[j]; });
    } else if (w != nullptr) {
      StoreRow(yr, h, [&](int64_t j) { return (xr[j] - m) * rstd * w[j]; });
    } else if (b != nullptr) {
      StoreRow(yr, h, [&](int64_t j) { return (xr[j] - m) * rstd + b[j]; });
    } else {
      StoreRow(yr, h, [&](int64_t j) { return (xr[j] - m) * rstd; });
    }
    mean_out[r] = m;
    rstd_out[r] = rstd;
  }
}

// R consecutive rows of layer norm, read and written in T (f32
// arithmetic). bf16/f16 rows are widened into `scratch` (R h floats) once
// instead of in each of the three passes.
template <int R, typename T>
TPX_VECTOR_CLONES TPX_INLINE_CALLS void LayerNormRows(const T* x, const float* w,
                                                      const float* b, T* y, int64_t h, float eps,
                                                      float* mean_out, float* rstd_out,
                                                      float* scratch) {
  if constexpr (kIsReduced<T>) {
    for (int64_t j = 0; j < R * h; ++j) scratch[j] = Load(x[j]);
    LayerNormRowsFromF32<R>(scratch, w, b, y, h, eps, mean_out, rstd_out);
  } else {
    LayerNormRowsFromF32<R>(x, w, b, y, h, eps, mean_out, rstd_out);
  }
}

// The layer-norm backward of R consecutive rows from f32 g and x (row
// stride h): dx (may be null) and the rows' contributions, in row order, to
// dw/db accumulators (may be null). The outputs never overlap each other or
// the inputs; saying so lets the fused loop vectorise (GCC gives up on the
// run-time overlap checks of five arrays).
template <int R, typename T>
TPX_VEC_INLINE void LayerNormBackwardRowsFromF32(const float* __restrict g,
                                                 const float* __restrict x,
                                                 const float* mean, const float* rstd,
                                                 const float* __restrict w, T* __restrict dx,
                                                 float* __restrict dw_acc,
                                                 float* __restrict db_acc, int64_t h) {
  float s1[R], s2[R];
  if (dx != nullptr) {
    // dxhat = g * w; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
    Sum8Rows<R>(
        h, [&](int r, int64_t i) { return LoadFloat8(g + r * h + i) * LoadFloat8(w + i); },
        [&](int r, int64_t j) { return g[r * h + j] * w[j]; }, s1);
    Sum8Rows<R>(
        h,
        [&](int r, int64_t i) {
          return LoadFloat8(g + r * h + i) * LoadFloat8(w + i) *
                 ((LoadFloat8(x + r * h + i) - mean[r]) * rstd[r]);
        },
        [&](int r, int64_t j) {
          return g[r * h + j] * w[j] * ((x[r * h + j] - mean[r]) * rstd[r]);
        },
        s2);
  }
  for (int r = 0; r < R; ++r) {
    const float* gr = g + r * h;
    const float* xr = x + r * h;
    const float mr = mean[r], rs = rstd[r];
    if (dx != nullptr) {
      T* dxr = dx + r * h;
      const float m1 = s1[r] / static_cast<float>(h);
      const float m2 = s2[r] / static_cast<float>(h);
      if (dw_acc != nullptr && db_acc != nullptr) {
        // The usual case: the weight and bias gradients in the same pass as
        // dx (same arithmetic as the separate loops below).
        StoreRow(dxr, h, [&](int64_t j) {
          const float gj = gr[j];
          const float xhat = (xr[j] - mr) * rs;
          dw_acc[j] += gj * xhat;
          db_acc[j] += gj;
          return rs * (gj * w[j] - m1 - xhat * m2);
        });
        continue;
      }
      StoreRow(dxr, h, [&](int64_t j) {
        const float d = gr[j] * w[j];
        return rs * (d - m1 - ((xr[j] - mr) * rs) * m2);
      });
    }
    if (dw_acc != nullptr) {
      for (int64_t j = 0; j < h; ++j) dw_acc[j] += gr[j] * ((xr[j] - mr) * rs);
    }
    if (db_acc != nullptr) {
      for (int64_t j = 0; j < h; ++j) db_acc[j] += gr[j];
    }
  }
}

// The layer-norm backward of R consecutive rows, g and x read in T.
// bf16/f16 rows are widened once into `scratch` (2 R h floats).
template <int R, typename T>
TPX_VECTOR_CLONES TPX_INLINE_CALLS void LayerNormBackwardRows(
    const T* __restrict g, const T* __restrict x, const float* mean, const float* rstd,
    const float* __restrict w, T* __restrict dx, float* __restrict dw_acc,
    float* __restrict db_acc, int64_t h, float* __restrict scratch) {
  if constexpr (kIsReduced<T>) {
    float* gf = scratch;
    float* xf = scratch + R * h;
    for (int64_t j = 0; j < R * h; ++j) {
      gf[j] = Load(g[j]);
      xf[j] = Load(x[j]);
    }
    LayerNormBackwardRowsFromF32<R>(gf, xf, mean, rstd, w, dx, dw_acc, db_acc, h);
  } else {
    LayerNormBackwardRowsFromF32<R>(g, x, mean, rstd, w, dx, dw_acc, db_acc, h);
  }
}

// y[0..valid) = softmax(scale * x[0..valid)), y[valid..n) = 0. The
// exponentials go to `e` (f32, n elements; y itself for f32). bf16/f16 rows
// are first widened into `e`, so that every pass runs on f32 vectors (the
// same values: widening is exact), and rounded back in bulk (StoreRow).
// The passes run over whole vectors up to n where they can: a causal row's
// last vector through scalar code cost as much as the rest of it. Past
// `valid` they compute values that are never read.
template <typename T>
TPX_VECTOR_CLONES void SoftmaxRow(const T* x, T* y, float* e, int64_t valid, int64_t n,
                                  float scale) {
  if (valid > 0) {
    const int64_t whole = std::min(n, (valid + 15) / 16 * 16);
    const float* xf;
    if constexpr (kIsReduced<T>) {
      for (int64_t j = 0; j < whole; ++j) e[j] = Load(x[j]);
      xf = e;
    } else {
      xf = x;
    }
    float mx = ScaledRowMax(xf, valid, n, scale);
    if (std::isinf(mx) && mx < 0) mx = 0.0f;  // all -inf: avoid inf - inf
    for (int64_t j = 0; j < whole; ++j) e[j] = Exp(scale * xf[j] - mx);
    const float inv = 1.0f / Sum8(valid, [e](int64_t j) { return e[j]; });
    StoreRow(y, valid, [e, inv](int64_t j) { return e[j] * inv; });
  }
  for (int64_t j = std::max<int64_t>(valid, 0); j < n; ++j) y[j] = StoreAs<T>(0.0f);
}

// The bias of a row kernel in f32: b itself, or for bf16/f16 widened once
// into `buf` rather than in every row.
template <typename T>
const float* BiasInF32(const T* b, int64_t h, std::vector<float>& buf) {
  if constexpr (kIsReduced<T>) {
    buf.resize(h);
    for (int64_t j = 0; j < h; ++j) buf[j] = Load(b[j]);
    return buf.data();
  } else {
    return b;
  }
}

// y = GeLU(x + b) over a row (b in f32, BiasInF32).
template <typename T>
TPX_VECTOR_CLONES TPX_INLINE_CALLS void BiasGeluRow(const T* x, const float* b, T* y, int64_t h) {
  StoreRow(y, h, [&](int64_t j) { return Gelu(Load(x[j]) + b[j]); });
}

// dx = g * GeLU'(x + b) over a row (b in f32, BiasInF32), and dx added to
// db_acc (f32, before dx is rounded to T) when db_acc is not null.
template <typename T>
TPX_VECTOR_CLONES TPX_INLINE_CALLS void BiasGeluBackwardRow(const T* g, const T* x,
                                                            const float* b, T* dx, float* db_acc,
                                                            int64_t h) {
  if (db_acc == nullptr) {
    StoreRow(dx, h, [&](int64_t j) { return Load(g[j]) * GeluGrad(Load(x[j]) + b[j]); });
    return;
  }
  StoreRow(dx, h, [&](int64_t j) {
    const float d = Load(g[j]) * GeluGrad(Load(x[j]) + b[j]);
    db_acc[j] += d;
    return d;
  });
}

#if defined(TPX_HAVE_AVX512_EXP) && defined(TPX_HAVE_AVX512BF16_PATH)
#define TPX_HAVE_AVX512_GELU_ROWS 1
// The bias + GeLU rows sixteen lanes at a time in intrinsics (Gelu16,
// GeluGrad16: the scalar rows' bits), where the CPU has AVX-512 BF16: the
// compiler's vectorisation of the scalar rows ran two vectors an iteration
// with their constants spilled to the stack, at about twice the time per
// element. bf16 is widened on loading and rounded on storing to
// FloatToBF16Array's bits (StoreLanes16).

// Loads 16 values of a row as f32 (and stores f32): whole vectors unmasked
// (masked loads and stores are slower on the AMD cores measured), the row's
// last partial vector under its mask.
template <typename T>
struct Lanes16;
template <>
struct Lanes16<float> {
  TPX_AVX512BF16_TARGET static __m512 Load(const float* p) { return _mm512_loadu_ps(p); }
  TPX_AVX512BF16_TARGET static __m512 Load(const float* p, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, p);
  }
  TPX_AVX512BF16_TARGET static void Store(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
  TPX_AVX512BF16_TARGET static void Store(float* p, __m512 v, __mmask16 m) {
    _mm512_mask_storeu_ps(p, m, v);
  }
};
template <>
struct Lanes16<BF16> {
  // The zero-masking forms with every lane: GCC 12 reports the plain ones'
  // undefined pass-through as used uninitialized.
  static constexpr __mmask16 kAll = 0xffff;
  TPX_AVX512BF16_TARGET static __m512 Widen(__m256i v) {
    const __m512i wide = _mm512_maskz_cvtepu16_epi32(kAll, v);
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, wide, 16));
  }
  TPX_AVX512BF16_TARGET static __m512 Load(const BF16* p) {
    return Widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  TPX_AVX512BF16_TARGET static __m512 Load(const BF16* p, __mmask16 m) {
    return Widen(_mm256_maskz_loadu_epi16(m, p));
  }
};

// Calls step(j) for the whole vectors of a row of h, then step(j, mask)
// for its last partial one.
template <typename Step>
TPX_AVX512BF16_TARGET inline void ForLanes16(int64_t h, Step&& step) {
  int64_t j = 0;
  for (; j + 16 <= h; j += 16) step(j);
  if (j < h) step(j, FirstLanes(h - j));
}

// Writes out[j] = value(j, mask...) for the row's 16-lane steps (value as
// ForLanes16's step): f32 straight; bf16 two vectors at a time
// (StoreBF16Pair), the row's last odd or partial vector by StoreBF16Lanes:
// the bits FloatToBF16Array gives.
template <typename T, typename Value>
TPX_AVX512BF16_TARGET inline void StoreLanes16(T* out, int64_t h, Value&& value) {
  if constexpr (std::is_same_v<T, BF16>) {
    int64_t j = 0;
    for (; j + 32 <= h; j += 32) {
      const __m512 lo = value(j);
      StoreBF16Pair(out + j, lo, value(j + 16));
    }
    for (; j < h; j += 16) {
      const __mmask16 m = FirstLanes(h - j);
      StoreBF16Lanes(out + j, value(j, m), m);
    }
  } else {
    ForLanes16(h, [&](int64_t j, auto... m) TPX_AVX512BF16_TARGET {
      Lanes16<float>::Store(out + j, value(j, m...), m...);
    });
  }
}

template <typename T>
TPX_AVX512BF16_TARGET void BiasGeluRowAvx512(const T* x, const float* b, T* y, int64_t h) {
  StoreLanes16(y, h, [&](int64_t j, auto... m) TPX_AVX512BF16_TARGET {
    return Gelu16(_mm512_add_ps(Lanes16<T>::Load(x + j, m...), Lanes16<float>::Load(b + j, m...)));
  });
}

template <typename T>
TPX_AVX512BF16_TARGET void BiasGeluBackwardRowAvx512(const T* g, const T* x, const float* b, T* dx,
                                                     float* db_acc, int64_t h) {
  StoreLanes16(dx, h, [&](int64_t j, auto... m) TPX_AVX512BF16_TARGET {
    const __m512 v =
        _mm512_add_ps(Lanes16<T>::Load(x + j, m...), Lanes16<float>::Load(b + j, m...));
    const __m512 d = _mm512_mul_ps(Lanes16<T>::Load(g + j, m...), GeluGrad16(v));
    if (db_acc != nullptr) {
      Lanes16<float>::Store(db_acc + j, _mm512_add_ps(Lanes16<float>::Load(db_acc + j, m...), d),
                            m...);
    }
    return d;
  });
}
#endif

// The rows above in intrinsics where they apply (f32 and bf16 on a CPU
// with AVX-512 BF16), else the compiler's vectorisation.
template <typename T>
void BiasGeluRowAny(const T* x, const float* b, T* y, int64_t h) {
#if defined(TPX_HAVE_AVX512_GELU_ROWS)
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, BF16>) {
    if (CpuHasAvx512Bf16()) return BiasGeluRowAvx512(x, b, y, h);
  }
#endif
  BiasGeluRow(x, b, y, h);
}

template <typename T>
void BiasGeluBackwardRowAny(const T* g, const T* x, const float* b, T* dx, float* db_acc,
                            int64_t h) {
#if defined(TPX_HAVE_AVX512_GELU_ROWS)
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, BF16>) {
    if (CpuHasAvx512Bf16()) return BiasGeluBackwardRowAvx512(g, x, b, dx, db_acc, h);
  }
#endif
  BiasGeluBackwardRow(g, x, b, dx, db_acc, h);
}

// dx = scale * y * (g - sum(g * y)).
template <typename T>
TPX_VECTOR_CLONES void SoftmaxBackwardRow(const T* g, const T* y, T* dx, int64_t n,
                                          float scale) {
  const float dot = Sum8(n, [g, y](int64_t j) { return Load(g[j]) * Load(y[j]); });
  StoreRow(dx, n, [g, y, dot, scale](int64_t j) {
    return scale * (Load(y[j]) * (Load(g[j]) - dot));
  });
}

const float* OptionalF32(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

}  // namespace

absl::Status CpuDeviceKernels::LayerNorm(const Tensor& y, const Tensor& mean, const Tensor& rstd,
                                         const Tensor& x, const Tensor& weight,
                                         const Tensor& bias, int64_t rows, int64_t h,
                                         double eps) {
  const float* w = OptionalF32(weight);
  const float* b = OptionalF32(bias);
  float* mo = mean.data<float>();
  float* ro = rstd.data<float>();
  const float e = static_cast<float>(eps);
  ParallelFloatRows(x.dtype(), rows, h, [&](auto tag, int64_t first, int64_t last) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    std::vector<float> scratch(kIsReduced<T> ? kNormRows * h : 0);
    int64_t r = first;
    for (; r + kNormRows <= last; r += kNormRows) {
      const int64_t ahead = std::min<int64_t>(kNormRows, last - kPrefetchRows - r);
      if (ahead > 0) PrefetchBytes(xp + (r + kPrefetchRows) * h, ahead * h * sizeof(T));
      LayerNormRows<kNormRows>(xp + r * h, w, b, yp + r * h, h, e, mo + r, ro + r,
                               scratch.data());
    }
    for (; r < last; ++r) {
      LayerNormRows<1>(xp + r * h, w, b, yp + r * h, h, e, mo + r, ro + r, scratch.data());
    }
  });
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::LayerNormBackward(const Tensor& dx, const Tensor& dweight,
                                                 const Tensor& dbias, const Tensor& grad,
                                                 const Tensor& x, const Tensor& mean,
                                                 const Tensor& rstd, const Tensor& weight,
                                                 int64_t rows, int64_t h) {
  std::vector<float> ones;
  const float* w = OptionalF32(weight);
  if (w == nullptr) {
    ones.assign(h, 1.0f);
    w = ones.data();
  }
  const float* mp = mean.data<float>();
  const float* rp = rstd.data<float>();
  const bool want_dw = dweight.defined(), want_db = dbias.defined();
  // Per chunk of rows: sum 0 of dweight, sum 1 of dbias.
  ColumnSums sums(rows, (want_dw || want_db) ? h : 0, 2);
  if (!sums.ok()) return absl::ResourceExhaustedError("LayerNormBackward: out of memory");
  constexpr int64_t kChunk = ColumnSums::kRowsPerChunk;
  ParallelFloatRows(x.dtype(), sums.chunks(), kChunk * h,
                    [&](auto tag, int64_t first, int64_t last) {
    using T = decltype(tag);
    const T* gp = grad.data<T>();
    const T* xp = x.data<T>();
    T* dxp = dx.defined() ? dx.data<T>() : nullptr;
    std::vector<float> scratch(kIsReduced<T> ? 2 * kNormRows * h : 0);
    for (int64_t c = first; c < last; ++c) {
      float* dw_acc = want_dw ? sums.ZeroedPartial(c, 0) : nullptr;
      float* db_acc = want_db ? sums.ZeroedPartial(c, 1) : nullptr;
      const int64_t end = sums.last_row(c);
      int64_t r = sums.first_row(c);
      // f32 rows go one at a time: with inputs from memory, as in training,
      // four f32 rows side by side measured slower than one (bench:nn_kernels
      // --input_sets=24); bf16 rows, widened into scratch first, gain.
      for (; kIsReduced<T> && r + kNormRows <= end; r += kNormRows) {
        const int64_t ahead = std::min<int64_t>(kNormRows, rows - kPrefetchRows - r);
        if (ahead > 0) {
          PrefetchBytes(gp + (r + kPrefetchRows) * h, ahead * h * sizeof(T));
          PrefetchBytes(xp + (r + kPrefetchRows) * h, ahead * h * sizeof(T));
        }
        LayerNormBackwardRows<kNormRows>(gp + r * h, xp + r * h, mp + r, rp + r, w,
                                         dxp != nullptr ? dxp + r * h : nullptr, dw_acc,
                                         db_acc, h, scratch.data());
      }
      for (; r < end; ++r) {
        LayerNormBackwardRows<1>(gp + r * h, xp + r * h, mp + r, rp + r, w,
                                 dxp != nullptr ? dxp + r * h : nullptr, dw_acc, db_acc, h,
                                 scratch.data());
      }
    }
  });
  if (want_dw) sums.Total(0, 1.0f, dweight.data<float>());
  if (want_db) sums.Total(1, 1.0f, dbias.data<float>());
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::ScaledSoftmax(const Tensor& out, const Tensor& in, int64_t batch,
                                             int64_t m, int64_t n, double scale, bool causal) {
  const float s = static_cast<float>(scale);
  ParallelFloatRows(in.dtype(), batch * m, n, [&](auto tag, int64_t first, int64_t last) {
    using T = decltype(tag);
    const T* xp = in.data<T>();
    T* yp = out.data<T>();
    std::vector<float> ebuf(std::is_same_v<T, float> ? 0 : n);
    for (int64_t r = first; r < last; ++r) {
      const int64_t i = r % m;
      const int64_t valid = causal ? std::clamp<int64_t>(i + 1 + n - m, 0, n) : n;
      T* yr = yp + r * n;
      float* er = ebuf.data();
      if constexpr (std::is_same_v<T, float>) er = yr;
      SoftmaxRow(xp + r * n, yr, er, valid, n, s);
    }
  });
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::ScaledSoftmaxBackward(const Tensor& dx, const Tensor& grad,
                                                     const Tensor& y, int64_t rows, int64_t n,
                                                     double scale) {
  const float s = static_cast<float>(scale);
  ParallelFloatRows(y.dtype(), rows, n, [&](auto tag, int64_t first, int64_t last) {
    using T = decltype(tag);
    const T* gp = grad.data<T>();
    const T* yp = y.data<T>();
    T* dp = dx.data<T>();
    for (int64_t r = first; r < last; ++r) {
      SoftmaxBackwardRow(gp + r * n, yp + r * n, dp + r * n, n, s);
    }
  });
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::BiasGelu(const Tensor& y, const Tensor& x, const Tensor& bias,
                                        int64_t rows, int64_t h) {
  ParallelFloatRows(x.dtype(), rows, h, [&](auto tag, int64_t first, int64_t last) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    std::vector<float> bias_buf;
    const float* bp = BiasInF32(bias.data<T>(), h, bias_buf);
    T* yp = y.data<T>();
    for (int64_t r = first; r < last; ++r) BiasGeluRowAny(xp + r * h, bp, yp + r * h, h);
  });
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::BiasGeluBackward(const Tensor& dx, const Tensor& dbias,
                                                const Tensor& grad, const Tensor& x,
                                                const Tensor& bias, int64_t rows, int64_t h) {
  const bool want_db = dbias.defined();
  // dbias is summed per chunk of rows while dx is written (chunks of one
  // row without it, so the threads split as finely as before).
  ColumnSums sums(want_db ? rows : 0, h, 1);
  if (!sums.ok()) return absl::ResourceExhaustedError("BiasGeluBackward: out of memory");
  const int64_t per_item = want_db ? ColumnSums::kRowsPerChunk : 1;
  const int64_t items = want_db ? sums.chunks() : rows;
  ParallelFloatRows(x.dtype(), items, per_item * h, [&](auto tag, int64_t first, int64_t last) {
    using T = decltype(tag);
    const T* gp = grad.data<T>();
    const T* xp = x.data<T>();
    std::vector<float> bias_buf;
    const float* bp = BiasInF32(bias.data<T>(), h, bias_buf);
    T* dp = dx.data<T>();
    for (int64_t c = first; c < last; ++c) {
      float* db_acc = want_db ? sums.ZeroedPartial(c, 0) : nullptr;
      const int64_t r_end = std::min(rows, (c + 1) * per_item);
      for (int64_t r = c * per_item; r < r_end; ++r) {
        BiasGeluBackwardRowAny(gp + r * h, xp + r * h, bp, dp + r * h, db_acc, h);
      }
    }
  });
  if (want_db) {
    DispatchFloat(dbias.dtype(), [&](auto tag) {
      using T = decltype(tag);
      sums.Total(0, 1.0f, dbias.data<T>());
    });
  }
  return absl::OkStatus();
}

}  // namespace tpx::cpu
