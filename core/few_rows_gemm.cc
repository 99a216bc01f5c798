#include "core/few_rows_gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>

#include "core/cpu_features.h"
#include "core/gemm.h"
#include "core/lane_mask.h"

namespace tpx {
namespace {

// Rows of B per step: their dot products with each of A's rows share A's
// loads.
constexpr int64_t kBRows = 4;
// Below this many elements of B (over the batch) one thread does the whole
// call (the team's start costs more than it saves).
constexpr int64_t kMinSplitElements = int64_t{1} << 18;

// The sum of v's 16 lanes. Halves by the zero-masking extract: the plain
// one (behind _mm512_castps512_ps256 and _mm512_reduce_add_ps too) starts
// from an undefined vector, which GCC 12 reports as used uninitialized.
TPX_AVX512F_TARGET inline float SumLanes(__m512 v) {
  const __m512d d = _mm512_castps_pd(v);
  const __m256 half = _mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, d, 0)),
                                    _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, d, 1)));
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

// acc[i][j] += A row i . B row j over the 16 reduction indices from p
// (those in `mask` unless kWhole: masked loads are slower than plain ones).
template <int M, int NB, bool kWhole>
TPX_AVX512F_TARGET inline void Step(__m512 (&acc)[M][NB], const float* a, int64_t lda,
                                    const float* b, int64_t ldb, int64_t p, __mmask16 mask) {
  __m512 bv[NB];
#pragma GCC unroll 4
  for (int j = 0; j < NB; ++j) {
    bv[j] =
        kWhole ? _mm512_loadu_ps(b + j * ldb + p) : _mm512_maskz_loadu_ps(mask, b + j * ldb + p);
  }
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) {
    const __m512 av =
        kWhole ? _mm512_loadu_ps(a + i * lda + p) : _mm512_maskz_loadu_ps(mask, a + i * lda + p);
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
  }
}

// C[0..M, 0..NB) for M rows of A and NB rows of B, plus bias[0..NB) unless
// bias is null.
template <int M, int NB>
TPX_AVX512F_TARGET void Dots(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                             const float* bias, float* c, int64_t ldc) {
  __m512 acc[M][NB];
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) Step<M, NB, true>(acc, a, lda, b, ldb, p, 0xFFFF);
  if (p < k) Step<M, NB, false>(acc, a, lda, b, ldb, p, FirstLanes(k - p));
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) {
      const float dot = SumLanes(acc[i][j]);
      c[i * ldc + j] = bias == nullptr ? dot : dot + bias[j];
    }
  }
}

// Rows [j0, j1) of B for M rows of A.
template <int M>
void RowsOfB(int64_t j0, int64_t j1, int64_t k, const float* a, int64_t lda, const float* b,
             int64_t ldb, const float* bias, float* c, int64_t ldc) {
  int64_t j = j0;
  auto bias_at = [bias](int64_t j) { return bias == nullptr ? nullptr : bias + j; };
  for (; j + kBRows <= j1; j += kBRows) {
    Dots<M, kBRows>(k, a, lda, b + j * ldb, ldb, bias_at(j), c + j, ldc);
  }
  for (; j < j1; ++j) Dots<M, 1>(k, a, lda, b + j * ldb, ldb, bias_at(j), c + j, ldc);
}

void RowsOfBFor(int64_t m, int64_t j0, int64_t j1, int64_t k, const float* a, int64_t lda,
                const float* b, int64_t ldb, const float* bias, float* c, int64_t ldc) {
  switch (m) {
    case 1:
      return RowsOfB<1>(j0, j1, k, a, lda, b, ldb, bias, c, ldc);
    case 2:
      return RowsOfB<2>(j0, j1, k, a, lda, b, ldb, bias, c, ldc);
    case 3:
      return RowsOfB<3>(j0, j1, k, a, lda, b, ldb, bias, c, ldc);
    default:
      return RowsOfB<4>(j0, j1, k, a, lda, b, ldb, bias, c, ldc);
  }
}

}  // namespace

bool FewRowsGemmF32Applies(bool trans_a, bool trans_b, int64_t m) {
  return CpuHasAvx512F() && !trans_a && trans_b && m >= 1 && m <= kFewRowsMax;
}

void FewRowsGemmF32(int64_t batch, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                    int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b, float* c,
                    int64_t ldc, int64_t stride_c, const float* bias) {
  // Work items: (product, step of kBRows rows of B), in order.
  const int64_t steps = (n + kBRows - 1) / kBRows, items = batch * steps;
  auto run = [&](int64_t first, int64_t last) {
    for (int64_t it = first; it < last;) {
      const int64_t i = it / steps, s0 = it % steps, s1 = std::min(steps, s0 + (last - it));
      RowsOfBFor(m, s0 * kBRows, std::min(n, s1 * kBRows), k, a + i * stride_a, lda,
                 b + i * stride_b, ldb, bias, c + i * stride_c, ldc);
      it += s1 - s0;
    }
  };
  const int threads = batch * n * k < kMinSplitElements || omp_in_parallel()
                          ? 1
                          : static_cast<int>(std::min<int64_t>(GemmThreads(), items));
  if (threads <= 1) return run(0, items);
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    run(items * t / nt, items * (t + 1) / nt);
  }
}

}  // namespace tpx
