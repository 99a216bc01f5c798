// CPU DeviceKernels: the fused transformer kernels (layer norm forward and
// backward, scaled and causal softmax forward and backward, bias + GeLU
// forward and backward). Each walks a row once or twice, reading and
// writing bf16/f16 in place and computing in f32, instead of the five to
// twelve passes and temporaries of the composed ops, and rows are split
// over the kernel threads. Row loops are compiled per ISA
// (TPX_VECTOR_CLONES); where the CPU has AVX-512 BF16, bias + GeLU and
// layer norm run in intrinsics with the same bits instead
// (core/cpu/row_kernels_isa.h).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/cpu/bf16_convert.h"
#include "core/cpu/column_sums.h"
#include "core/cpu/cpu_kernels.h"
#include "core/cpu/loops.h"
#include "core/cpu/parallel.h"
#include "core/cpu/row_kernels_isa.h"
#include "core/cpu/vec_math.h"
#include "core/cpu/vec_math_avx512.h"
#include "core/cpu_features.h"
#include "core/lane_mask.h"

namespace tpx::cpu {
namespace {

// Rows of layer norm handled together: their reductions overlap
// (Sum8Rows) where one row of 128 would wait on its additions.
constexpr int kNormRows = 4;
// Pairs of rows handled together by the AVX-512 layer norm
// (LayerNormRowPairs), for the same reason.
constexpr int kNormPairs = 4;
// In the backward each pair has two chains (the two sums of the row).
constexpr int kNormBackwardPairs = 2;
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
#define TPX_HAVE_AVX512_ROWS 1
// The bias + GeLU rows sixteen lanes at a time in intrinsics (Gelu16,
// GeluGrad16: the scalar rows' bits), where the CPU has AVX-512 BF16: the
// compiler's vectorisation of the scalar rows ran two vectors an iteration
// with their constants spilled to the stack, at about twice the time per
// element. bf16 is widened on loading and rounded on storing to
// FloatToBF16Array's bits (StoreLanes16).

// The zero-masking forms of the intrinsics take every lane with this: GCC
// 12 reports the plain ones' undefined pass-through as used uninitialized.
constexpr __mmask16 kAll = 0xffff;

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

// Vectors of a row the bias + GeLU rows take at once (Gelu16N,
// GeluGrad16N): one vector's chain of dependent steps stalled the loop.
// The counts that measured best inside GPT training steps at 2 threads on
// the benchmark host in both of its states. The forward with 4 took 10%
// less time than with 1. The backward with 2 took 11-14% less in both;
// with 4 or 8, 24% less while the host ran fast but 10% and 70% more
// while it ran slow (the whole step about 15% slower, as when the two
// cores share resources), where the extra in-flight work costs.
constexpr int kGeluVectors = 4;
constexpr int kGeluGradVectors = 2;

// out[0, 16 N) = v as T (bf16 two vectors to a store, as StoreLanes16).
template <typename T, int N>
TPX_AVX512BF16_TARGET inline void StoreVectors(T* out, const __m512 (&v)[N]) {
  if constexpr (std::is_same_v<T, BF16>) {
    static_assert(N % 2 == 0);
#pragma GCC unroll 8
    for (int i = 0; i < N; i += 2) StoreBF16Pair(out + 16 * i, v[i], v[i + 1]);
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < N; ++i) Lanes16<float>::Store(out + 16 * i, v[i]);
  }
}

// v[i] = x[16 i, 16 i + 16) + b[16 i, 16 i + 16) in f32, for i < N.
template <typename T, int N>
TPX_AVX512BF16_TARGET inline void LoadBiasAdded(const T* x, const float* b, __m512 (&v)[N]) {
#pragma GCC unroll 8
  for (int i = 0; i < N; ++i) {
    v[i] = _mm512_add_ps(Lanes16<T>::Load(x + 16 * i), Lanes16<float>::Load(b + 16 * i));
  }
}

template <typename T>
TPX_AVX512BF16_TARGET void BiasGeluRowAvx512(const T* x, const float* b, T* y, int64_t h) {
  constexpr int64_t kStep = 16 * kGeluVectors;
  int64_t j = 0;
  for (; j + kStep <= h; j += kStep) {
    __m512 v[kGeluVectors];
    LoadBiasAdded(x + j, b + j, v);
    Gelu16N(v);
    StoreVectors(y + j, v);
  }
  x += j, b += j, y += j, h -= j;
  StoreLanes16(y, h, [&](int64_t i, auto... m) TPX_AVX512BF16_TARGET {
    return Gelu16(_mm512_add_ps(Lanes16<T>::Load(x + i, m...), Lanes16<float>::Load(b + i, m...)));
  });
}

template <typename T>
TPX_AVX512BF16_TARGET void BiasGeluBackwardRowAvx512(const T* g, const T* x, const float* b, T* dx,
                                                     float* db_acc, int64_t h) {
  constexpr int64_t kStep = 16 * kGeluGradVectors;
  int64_t j = 0;
  for (; j + kStep <= h; j += kStep) {
    __m512 v[kGeluGradVectors];
    LoadBiasAdded(x + j, b + j, v);
    GeluGrad16N(v);
#pragma GCC unroll 8
    for (int i = 0; i < kGeluGradVectors; ++i) {
      v[i] = _mm512_mul_ps(Lanes16<T>::Load(g + j + 16 * i), v[i]);
      if (db_acc != nullptr) {
        float* acc = db_acc + j + 16 * i;
        Lanes16<float>::Store(acc, _mm512_add_ps(Lanes16<float>::Load(acc), v[i]));
      }
    }
    StoreVectors(dx + j, v);
  }
  g += j, x += j, b += j, dx += j, h -= j;
  if (db_acc != nullptr) db_acc += j;
  StoreLanes16(dx, h, [&](int64_t i, auto... m) TPX_AVX512BF16_TARGET {
    const __m512 v =
        _mm512_add_ps(Lanes16<T>::Load(x + i, m...), Lanes16<float>::Load(b + i, m...));
    const __m512 d = _mm512_mul_ps(Lanes16<T>::Load(g + i, m...), GeluGrad16(v));
    if (db_acc != nullptr) {
      Lanes16<float>::Store(db_acc + i, _mm512_add_ps(Lanes16<float>::Load(db_acc + i, m...), d),
                            m...);
    }
    return d;
  });
}

// Layer norm two rows at a time in intrinsics, LayerNormRows' and
// LayerNormBackwardRows' bits: one vector holds eight values of each row
// (lanes 0-7 the first row's, 8-15 the second's), so each half's chain of
// additions is the one Sum8 makes over its row, eight partial sums wide.
// Rows are read in T and the statistics kept in f32, as there, without
// their widening pass into scratch or rounding through FloatToBF16Array a
// row at a time. For rows whose length is a multiple of eight.

// Lanes 0-7 and 8-15 of v (in the zero-masking forms, as kAll says).
TPX_AVX512BF16_TARGET inline __m256 LowHalf(__m512 v) {
  return _mm512_maskz_extractf32x8_ps(0xff, v, 0);
}
TPX_AVX512BF16_TARGET inline __m256 HighHalf(__m512 v) {
  return _mm512_maskz_extractf32x8_ps(0xff, v, 1);
}

// Eight values from each of two rows as one vector of f32, and back.
template <typename T>
struct RowPairLanes;
template <>
struct RowPairLanes<float> {
  TPX_AVX512BF16_TARGET static __m512 Load(const float* a, const float* b) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(a)), _mm256_loadu_ps(b), 1);
  }
  TPX_AVX512BF16_TARGET static void Store(float* a, float* b, __m512 v) {
    _mm256_storeu_ps(a, LowHalf(v));
    _mm256_storeu_ps(b, HighHalf(v));
  }
};
template <>
struct RowPairLanes<BF16> {
  TPX_AVX512BF16_TARGET static __m512 Load(const BF16* a, const BF16* b) {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
    return Lanes16<BF16>::Widen(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
  }
  TPX_AVX512BF16_TARGET static void Store(BF16* a, BF16* b, __m512 v) {
    const __m256i r = RoundBF16Lanes(v);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(a), _mm256_castsi256_si128(r));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b), _mm256_extracti128_si256(r, 1));
  }
};

// Sum8's combination of each half's eight partial sums: lane 0 and lane 8
// hold ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)) of their half.
TPX_AVX512BF16_TARGET inline void PairSums(__m512 acc, float* first, float* second) {
  __m512 t = _mm512_add_ps(acc, _mm512_maskz_permute_ps(kAll, acc, 0xb1));  // neighbours
  t = _mm512_add_ps(t, _mm512_maskz_permute_ps(kAll, t, 0x4e));             // pairs of them
  t = _mm512_add_ps(t, _mm512_maskz_shuffle_f32x4(kAll, t, t, 0xb1));       // the 128-bit halves
  *first = _mm512_cvtss_f32(t);
  *second = _mm_cvtss_f32(_mm512_maskz_extractf32x4_ps(0xf, t, 2));
}

// a in lanes 0-7, b in lanes 8-15.
TPX_AVX512BF16_TARGET inline __m512 PairOf(float a, float b) {
  return _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(a), _mm512_set1_ps(b));
}

// p[0..8) in both halves (a weight or bias shared by the rows).
TPX_AVX512BF16_TARGET inline __m512 BothHalves(const float* p) {
  return _mm512_maskz_broadcast_f32x8(kAll, _mm256_loadu_ps(p));
}

// Layer norm of 2P consecutive rows of h (a multiple of 8), as
// LayerNormRows. The P pairs' chains of additions run side by side: one
// pair's alone waits on each addition.
template <int P, typename T>
TPX_AVX512BF16_TARGET void LayerNormRowPairs(const T* x, const float* w, const float* b, T* y,
                                             int64_t h, float eps, float* mean_out,
                                             float* rstd_out) {
  using L = RowPairLanes<T>;
  const float hf = static_cast<float>(h);
  __m512 acc[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) acc[p] = _mm512_setzero_ps();
  for (int64_t i = 0; i < h; i += 8) {
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      acc[p] = _mm512_add_ps(acc[p], L::Load(x + 2 * p * h + i, x + (2 * p + 1) * h + i));
    }
  }
  float mean[2 * P], sq[2 * P];
  __m512 m[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    PairSums(acc[p], &mean[2 * p], &mean[2 * p + 1]);
    mean[2 * p] /= hf;
    mean[2 * p + 1] /= hf;
    m[p] = PairOf(mean[2 * p], mean[2 * p + 1]);
    acc[p] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < h; i += 8) {
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      const __m512 c = _mm512_sub_ps(L::Load(x + 2 * p * h + i, x + (2 * p + 1) * h + i), m[p]);
      acc[p] = _mm512_fmadd_ps(c, c, acc[p]);
    }
  }
  __m512 rs[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    PairSums(acc[p], &sq[2 * p], &sq[2 * p + 1]);
    float rstd[2];
    for (int r = 0; r < 2; ++r) {
      rstd[r] = 1.0f / std::sqrt(sq[2 * p + r] / hf + eps);
      mean_out[2 * p + r] = mean[2 * p + r];
      rstd_out[2 * p + r] = rstd[r];
    }
    rs[p] = PairOf(rstd[0], rstd[1]);
  }
  for (int p = 0; p < P; ++p) {
    const T* x1 = x + 2 * p * h;
    T* y1 = y + 2 * p * h;
    for (int64_t i = 0; i < h; i += 8) {
      const __m512 c = _mm512_sub_ps(L::Load(x1 + i, x1 + h + i), m[p]);
      __m512 v;
      if (w != nullptr && b != nullptr) {
        v = _mm512_fmadd_ps(_mm512_mul_ps(c, rs[p]), BothHalves(w + i), BothHalves(b + i));
      } else if (w != nullptr) {
        v = _mm512_mul_ps(_mm512_mul_ps(c, rs[p]), BothHalves(w + i));
      } else if (b != nullptr) {
        v = _mm512_fmadd_ps(c, rs[p], BothHalves(b + i));
      } else {
        v = _mm512_mul_ps(c, rs[p]);
      }
      L::Store(y1 + i, y1 + h + i, v);
    }
  }
}

// The layer-norm backward of 2P consecutive rows of h (a multiple of 8), as
// LayerNormBackwardRows with dx and either both of dw_acc and db_acc or
// neither; the pairs' reductions side by side as in LayerNormRowPairs.
template <int P, typename T>
TPX_AVX512BF16_TARGET void LayerNormBackwardRowPairs(const T* g, const T* x, const float* mean,
                                                     const float* rstd, const float* w, T* dx,
                                                     float* dw_acc, float* db_acc, int64_t h) {
  using L = RowPairLanes<T>;
  const float hf = static_cast<float>(h);
  __m512 m[P], rs[P], acc1[P], acc2[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    m[p] = PairOf(mean[2 * p], mean[2 * p + 1]);
    rs[p] = PairOf(rstd[2 * p], rstd[2 * p + 1]);
    acc1[p] = _mm512_setzero_ps();
    acc2[p] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < h; i += 8) {
    const __m512 wv = BothHalves(w + i);
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      const int64_t at = 2 * p * h + i;
      const __m512 gv = L::Load(g + at, g + at + h);
      const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(L::Load(x + at, x + at + h), m[p]), rs[p]);
      acc1[p] = _mm512_fmadd_ps(gv, wv, acc1[p]);
      acc2[p] = _mm512_fmadd_ps(_mm512_mul_ps(gv, wv), xhat, acc2[p]);
    }
  }
  for (int p = 0; p < P; ++p) {
    float s1[2], s2[2];
    PairSums(acc1[p], &s1[0], &s1[1]);
    PairSums(acc2[p], &s2[0], &s2[1]);
    const __m512 m1 = PairOf(s1[0] / hf, s1[1] / hf);
    const __m512 m2 = PairOf(s2[0] / hf, s2[1] / hf);
    for (int64_t i = 0; i < h; i += 8) {
      const int64_t at = 2 * p * h + i;
      const __m512 gv = L::Load(g + at, g + at + h);
      const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(L::Load(x + at, x + at + h), m[p]), rs[p]);
      if (dw_acc != nullptr) {
        // The first row's contributions, then the second's, as the rows
        // one after the other add them.
        __m256 dw = _mm256_loadu_ps(dw_acc + i), db = _mm256_loadu_ps(db_acc + i);
        dw = _mm256_fmadd_ps(LowHalf(gv), LowHalf(xhat), dw);
        dw = _mm256_fmadd_ps(HighHalf(gv), HighHalf(xhat), dw);
        db = _mm256_add_ps(db, LowHalf(gv));
        db = _mm256_add_ps(db, HighHalf(gv));
        _mm256_storeu_ps(dw_acc + i, dw);
        _mm256_storeu_ps(db_acc + i, db);
      }
      const __m512 d = _mm512_fmsub_ps(gv, BothHalves(w + i), m1);
      L::Store(dx + at, dx + at + h, _mm512_mul_ps(rs[p], _mm512_fnmadd_ps(xhat, m2, d)));
    }
  }
}
#endif

// RowKernelsIsaInUse(): set once from the environment, and by tests.
std::atomic<RowKernelsIsa>& RowKernelsIsaSetting() {
  static std::atomic<RowKernelsIsa> isa{[] {
    const char* env = std::getenv("TPX_ROW_KERNELS_ISA");
    const bool portable = env != nullptr && std::string_view(env) == "portable";
    return CpuHasAvx512Bf16() && !portable ? RowKernelsIsa::kAvx512 : RowKernelsIsa::kPortable;
  }()};
  return isa;
}

// The element types the intrinsics rows above are written for.
template <typename T>
inline constexpr bool kAvx512RowType = std::is_same_v<T, float> || std::is_same_v<T, BF16>;

// Whether element type T runs the intrinsics rows (where they were
// compiled and RowKernelsIsaInUse() says so).
template <typename T>
bool UseAvx512Rows() {
#if defined(TPX_HAVE_AVX512_ROWS)
  if constexpr (kAvx512RowType<T>) return RowKernelsIsaInUse() == RowKernelsIsa::kAvx512;
#endif
  return false;
}

// The rows above in intrinsics where they apply, else the compiler's
// vectorisation.
template <typename T>
void BiasGeluRowAny(const T* x, const float* b, T* y, int64_t h) {
#if defined(TPX_HAVE_AVX512_ROWS)
  if constexpr (kAvx512RowType<T>) {
    if (UseAvx512Rows<T>()) return BiasGeluRowAvx512(x, b, y, h);
  }
#endif
  BiasGeluRow(x, b, y, h);
}

template <typename T>
void BiasGeluBackwardRowAny(const T* g, const T* x, const float* b, T* dx, float* db_acc,
                            int64_t h) {
#if defined(TPX_HAVE_AVX512_ROWS)
  if constexpr (kAvx512RowType<T>) {
    if (UseAvx512Rows<T>()) return BiasGeluBackwardRowAvx512(g, x, b, dx, db_acc, h);
  }
#endif
  BiasGeluBackwardRow(g, x, b, dx, db_acc, h);
}

// Whether layer-norm rows of h in T go by pairs (LayerNormRowPairs).
template <typename T>
bool NormsRowPairs(int64_t h) {
  return h % 8 == 0 && UseAvx512Rows<T>();
}

// The pair forms where they were compiled (NormsRowPairs is false
// elsewhere, so these are never called there).
template <int P, typename T>
void LayerNormRowPairsAny(const T* x, const float* w, const float* b, T* y, int64_t h, float eps,
                          float* mean_out, float* rstd_out) {
#if defined(TPX_HAVE_AVX512_ROWS)
  if constexpr (kAvx512RowType<T>) {
    LayerNormRowPairs<P>(x, w, b, y, h, eps, mean_out, rstd_out);
  }
#endif
}

template <int P, typename T>
void LayerNormBackwardRowPairsAny(const T* g, const T* x, const float* mean, const float* rstd,
                                  const float* w, T* dx, float* dw_acc, float* db_acc, int64_t h) {
#if defined(TPX_HAVE_AVX512_ROWS)
  if constexpr (kAvx512RowType<T>) {
    LayerNormBackwardRowPairs<P>(g, x, mean, rstd, w, dx, dw_acc, db_acc, h);
  }
#endif
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
    if (NormsRowPairs<T>(h)) {
      for (; r + 2 * kNormPairs <= last; r += 2 * kNormPairs) {
        const int64_t ahead = std::min<int64_t>(2 * kNormPairs, last - kPrefetchRows - r);
        if (ahead > 0) PrefetchBytes(xp + (r + kPrefetchRows) * h, ahead * h * sizeof(T));
        LayerNormRowPairsAny<kNormPairs>(xp + r * h, w, b, yp + r * h, h, e, mo + r, ro + r);
      }
      for (; r + 2 <= last; r += 2) {
        LayerNormRowPairsAny<1>(xp + r * h, w, b, yp + r * h, h, e, mo + r, ro + r);
      }
    }
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
      // bf16 rows go by pairs where they can. f32 rows go one at a time:
      // with inputs from memory, as in training, f32 rows side by side (four
      // of them, or two pairs) measured slower than one (bench:nn_kernels
      // --input_sets=24).
      if (kIsReduced<T> && NormsRowPairs<T>(h) && dxp != nullptr && want_dw == want_db) {
        for (; r + 2 * kNormBackwardPairs <= end; r += 2 * kNormBackwardPairs) {
          const int64_t ahead = std::min<int64_t>(2 * kNormBackwardPairs, rows - kPrefetchRows - r);
          if (ahead > 0) {
            PrefetchBytes(gp + (r + kPrefetchRows) * h, ahead * h * sizeof(T));
            PrefetchBytes(xp + (r + kPrefetchRows) * h, ahead * h * sizeof(T));
          }
          LayerNormBackwardRowPairsAny<kNormBackwardPairs>(gp + r * h, xp + r * h, mp + r, rp + r,
                                                           w, dxp + r * h, dw_acc, db_acc, h);
        }
        for (; r + 2 <= end; r += 2) {
          LayerNormBackwardRowPairsAny<1>(gp + r * h, xp + r * h, mp + r, rp + r, w, dxp + r * h,
                                          dw_acc, db_acc, h);
        }
      }
      // Elsewhere bf16 rows are widened into scratch four at a time.
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

RowKernelsIsa RowKernelsIsaInUse() {
  return RowKernelsIsaSetting().load(std::memory_order_relaxed);
}

void SetRowKernelsIsaForTesting(RowKernelsIsa isa) {
  const bool avx512 = isa == RowKernelsIsa::kAvx512 && CpuHasAvx512Bf16();
  RowKernelsIsaSetting().store(avx512 ? RowKernelsIsa::kAvx512 : RowKernelsIsa::kPortable,
                               std::memory_order_relaxed);
}

}  // namespace tpx::cpu
