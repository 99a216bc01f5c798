#include "core/few_rows_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "core/cpu_features.h"
#include "core/gemm.h"
#include "core/gemm_work_split.h"
#include "core/lane_mask.h"

namespace tpx {
namespace {

// Rows of B per step of the dot products: their products with each of A's
// rows share A's loads.
constexpr int64_t kBRows = 4;
// Columns of C per block of B times rows (B not transposed): four vectors.
constexpr int64_t kColumnBlock = 64;
// Below this many elements of B (over the batch) one thread does the whole
// call (the team's start costs more than it saves).
constexpr int64_t kMinSplitElements = int64_t{1} << 18;

constexpr __mmask16 kAll16 = 0xFFFF;

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

// Where one product's outputs go: C of Out (float, or bf16 bits) and an
// optional bias of the inputs' type.
template <typename In, typename Out>
struct Output {
  const In* bias;  // null: none
  Out* c;
  int64_t ldc;

  float BiasAt(int64_t j) const {
    if constexpr (std::is_same_v<In, float>) {
      return bias[j];
    } else {
      return BF16ToFloat(bias[j]);
    }
  }
  // C[i, j] = sum (+ bias[j]), rounded to Out.
  void Put(int64_t i, int64_t j, float sum) const {
    const float v = bias == nullptr ? sum : sum + BiasAt(j);
    if constexpr (std::is_same_v<Out, float>) {
      c[i * ldc + j] = v;
    } else {
      c[i * ldc + j] = FloatToBF16(v);
    }
  }
};

// Writes C[0..M, j0..j0 + NB) from the accumulators' lane sums.
template <typename In, typename Out, int M, int NB>
TPX_AVX512F_TARGET inline void PutSums(__m512 (&acc)[M][NB], const Output<In, Out>& out,
                                       int64_t j0) {
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) out.Put(i, j0 + j, SumLanes(acc[i][j]));
  }
}

// B stored transposed: acc[i][j] += A row i . B row j over the 16 f32
// values from p (those in `mask` unless kWhole: masked loads are slower
// than plain ones).
template <int M, int NB, bool kWhole>
TPX_AVX512F_TARGET inline void DotStepF32(__m512 (&acc)[M][NB], const float* a, int64_t lda,
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

// C[0..M, j0..j0 + NB) for M rows of A and rows j0.. of B (f32).
template <int M, int NB>
TPX_AVX512F_TARGET void DotsF32(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                                const Output<float, float>& out, int64_t j0) {
  __m512 acc[M][NB];
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  const float* bj = b + j0 * ldb;
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) DotStepF32<M, NB, true>(acc, a, lda, bj, ldb, p, kAll16);
  if (p < k) DotStepF32<M, NB, false>(acc, a, lda, bj, ldb, p, FirstLanes(k - p));
  PutSums(acc, out, j0);
}

// As DotStepF32 for bf16: the 32 values from p, whose pairs vdpbf16ps
// multiplies into f32 and adds to each lane.
template <int M, int NB, bool kWhole>
TPX_AVX512BF16_TARGET inline void DotStepBf16(__m512 (&acc)[M][NB], const uint16_t* a, int64_t lda,
                                              const uint16_t* b, int64_t ldb, int64_t p,
                                              __mmask32 mask) {
  __m512i bv[NB];
#pragma GCC unroll 4
  for (int j = 0; j < NB; ++j) {
    bv[j] = kWhole ? _mm512_loadu_si512(b + j * ldb + p)
                   : _mm512_maskz_loadu_epi16(mask, b + j * ldb + p);
  }
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) {
    const __m512i av = kWhole ? _mm512_loadu_si512(a + i * lda + p)
                              : _mm512_maskz_loadu_epi16(mask, a + i * lda + p);
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) {
      acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)av, (__m512bh)bv[j]);
    }
  }
}

template <typename Out, int M, int NB>
TPX_AVX512BF16_TARGET void DotsBf16(int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
                                    int64_t ldb, const Output<uint16_t, Out>& out, int64_t j0) {
  __m512 acc[M][NB];
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  const uint16_t* bj = b + j0 * ldb;
  int64_t p = 0;
  for (; p + 32 <= k; p += 32) DotStepBf16<M, NB, true>(acc, a, lda, bj, ldb, p, ~__mmask32{0});
  if (p < k) {
    const __mmask32 mask = (__mmask32{1} << (k - p)) - 1;  // k - p < 32
    DotStepBf16<M, NB, false>(acc, a, lda, bj, ldb, p, mask);
  }
  PutSums(acc, out, j0);
}

// Dots of the inputs' type.
template <typename In, typename Out, int M, int NB>
void Dots(int64_t k, const In* a, int64_t lda, const In* b, int64_t ldb, const Output<In, Out>& out,
          int64_t j0) {
  if constexpr (std::is_same_v<In, float>) {
    DotsF32<M, NB>(k, a, lda, b, ldb, out, j0);
  } else {
    DotsBf16<Out, M, NB>(k, a, lda, b, ldb, out, j0);
  }
}

// 16 bf16 values as f32.
TPX_AVX512BF16_TARGET inline __m512 WidenBf16(__m256i v) {
  return _mm512_castsi512_ps(
      _mm512_maskz_slli_epi32(kAll16, _mm512_maskz_cvtepu16_epi32(kAll16, v), 16));
}

// B not transposed (bf16): C[0..M, j0..j0 + 16 NV) (the last vector's lanes
// in `tail`) = A's M rows times B's columns there, each bf16 value widened
// to f32 and multiplied in f32 (exactly) and summed in f32.
template <typename Out, int M, int NV>
TPX_AVX512BF16_TARGET void ColumnBlock(int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
                                       int64_t ldb, const Output<uint16_t, Out>& out, int64_t j0,
                                       __mmask16 tail) {
  __m512 acc[M][NV];
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < k; ++p) {
    const uint16_t* row = b + p * ldb + j0;
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      bv[v] = WidenBf16(v == NV - 1
                            ? _mm256_maskz_loadu_epi16(tail, row + 16 * v)
                            : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 16 * v)));
    }
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) {
      const __m512 av = _mm512_set1_ps(BF16ToFloat(a[i * lda + p]));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
    }
  }
  alignas(64) float sums[16];
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      _mm512_store_ps(sums, acc[i][v]);
      const int lanes = v == NV - 1 ? __builtin_popcount(tail) : 16;
      for (int l = 0; l < lanes; ++l) out.Put(i, j0 + 16 * v + l, sums[l]);
    }
  }
}

// One product's outputs in columns [j0, j1) (whole steps of kBRows rows of
// B, or whole column blocks, from j0) for M rows of A.
template <typename In, typename Out, int M>
void Columns(bool trans_b, int64_t j0, int64_t j1, int64_t k, const In* a, int64_t lda, const In* b,
             int64_t ldb, const Output<In, Out>& out) {
  if (trans_b) {
    int64_t j = j0;
    for (; j + kBRows <= j1; j += kBRows) Dots<In, Out, M, kBRows>(k, a, lda, b, ldb, out, j);
    for (; j < j1; ++j) Dots<In, Out, M, 1>(k, a, lda, b, ldb, out, j);
    return;
  }
  // B not transposed: bf16 only (FewRowsGemmApplies).
  if constexpr (std::is_same_v<In, uint16_t>) {
    for (int64_t j = j0; j < j1; j += kColumnBlock) {
      const int64_t cols = std::min(kColumnBlock, j1 - j);
      const __mmask16 tail = FirstLanes(cols - 16 * ((cols - 1) / 16));
      switch ((cols + 15) / 16) {
        case 1:
          ColumnBlock<Out, M, 1>(k, a, lda, b, ldb, out, j, tail);
          break;
        case 2:
          ColumnBlock<Out, M, 2>(k, a, lda, b, ldb, out, j, tail);
          break;
        case 3:
          ColumnBlock<Out, M, 3>(k, a, lda, b, ldb, out, j, tail);
          break;
        default:
          ColumnBlock<Out, M, 4>(k, a, lda, b, ldb, out, j, tail);
      }
    }
  }
}

template <typename In, typename Out>
void ColumnsFor(int64_t m, bool trans_b, int64_t j0, int64_t j1, int64_t k, const In* a,
                int64_t lda, const In* b, int64_t ldb, const Output<In, Out>& out) {
  switch (m) {
    case 1:
      return Columns<In, Out, 1>(trans_b, j0, j1, k, a, lda, b, ldb, out);
    case 2:
      return Columns<In, Out, 2>(trans_b, j0, j1, k, a, lda, b, ldb, out);
    case 3:
      return Columns<In, Out, 3>(trans_b, j0, j1, k, a, lda, b, ldb, out);
    default:
      return Columns<In, Out, 4>(trans_b, j0, j1, k, a, lda, b, ldb, out);
  }
}

// The batch as work items (product, group of columns: kBRows rows of B, or
// a column block), split between the GEMM threads by SplitWorkItems.
template <typename In, typename Out>
void Run(bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k, const In* a, int64_t lda,
         int64_t stride_a, const In* b, int64_t ldb, int64_t stride_b, Out* c, int64_t ldc,
         int64_t stride_c, const In* bias) {
  const int64_t group = trans_b ? kBRows : kColumnBlock;
  const int64_t groups = (n + group - 1) / group, items = batch * groups;
  auto run = [&](int64_t first, int64_t last) {
    for (int64_t it = first; it < last;) {
      const int64_t i = it / groups, g0 = it % groups, g1 = std::min(groups, g0 + (last - it));
      ColumnsFor<In, Out>(m, trans_b, g0 * group, std::min(n, g1 * group), k, a + i * stride_a, lda,
                          b + i * stride_b, ldb, Output<In, Out>{bias, c + i * stride_c, ldc});
      it += g1 - g0;
    }
  };
  SplitWorkItems(items, batch * n * k >= kMinSplitElements, run);
}

}  // namespace

bool FewRowsGemmApplies(DType ab_dtype, DType c_dtype, bool trans_a, bool trans_b, int64_t m) {
  if (trans_a || m < 1 || m > kFewRowsMax) return false;
  if (ab_dtype == DType::kF32) return c_dtype == DType::kF32 && trans_b && CpuHasAvx512F();
  return ab_dtype == DType::kBF16 && (c_dtype == DType::kF32 || c_dtype == DType::kBF16) &&
         CpuHasAvx512Bf16();
}

void FewRowsGemm(DType ab_dtype, DType c_dtype, bool trans_b, int64_t batch, int64_t m, int64_t n,
                 int64_t k, const void* a, int64_t lda, int64_t stride_a, const void* b,
                 int64_t ldb, int64_t stride_b, void* c, int64_t ldc, int64_t stride_c,
                 const void* bias) {
  if (ab_dtype == DType::kF32) {
    return Run(trans_b, batch, m, n, k, static_cast<const float*>(a), lda, stride_a,
               static_cast<const float*>(b), ldb, stride_b, static_cast<float*>(c), ldc, stride_c,
               static_cast<const float*>(bias));
  }
  const uint16_t* a16 = static_cast<const uint16_t*>(a);
  const uint16_t* b16 = static_cast<const uint16_t*>(b);
  const uint16_t* bias16 = static_cast<const uint16_t*>(bias);
  if (c_dtype == DType::kF32) {
    return Run(trans_b, batch, m, n, k, a16, lda, stride_a, b16, ldb, stride_b,
               static_cast<float*>(c), ldc, stride_c, bias16);
  }
  Run(trans_b, batch, m, n, k, a16, lda, stride_a, b16, ldb, stride_b, static_cast<uint16_t*>(c),
      ldc, stride_c, bias16);
}

}  // namespace tpx
