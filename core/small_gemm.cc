#include "core/small_gemm.h"

#include <immintrin.h>

#include <algorithm>

#include "core/cpu_features.h"
#include "core/gemm.h"
#include "core/gemm_work_split.h"

namespace tpx {
namespace {

constexpr int64_t kMaxBBytes = 32 * 1024;
// Below this many multiply-adds (over the batch) one thread does the whole
// call: a decoding step's products, where the team's start costs more than
// it saves.
constexpr int64_t kMinSplitMacs = int64_t{1} << 18;

// Rows of C per register block for NV 16-float vectors per row: NV * MR
// accumulators (at most 28 of the 32 zmm registers).
constexpr int RowsPerBlock(int nv) { return nv == 1 ? 14 : nv == 2 ? 12 : nv == 3 ? 8 : 6; }

// C[MR rows, 16 * NV] = op(A)[MR rows, k] B[k, 16 * NV]. op(A)'s element
// (r, p) is a[r * ars + p * aps].
// Every loop over the MR x NV accumulators is fully unrolled: GCC keeps an
// array it cannot resolve at compile time in memory, and each multiply-add
// then loads and stores its accumulator (a quarter of the speed at NV = 4).
template <int NV, int MR>
TPX_AVX512F_TARGET inline void Block(int64_t k, const float* a, int64_t ars, int64_t aps,
                                     const float* b, int64_t ldb, float* c, int64_t ldc) {
  __m512 acc[MR][NV];
#pragma GCC unroll 14
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < k; ++p) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + p * ldb + 16 * v);
    const float* ap = a + p * aps;
#pragma GCC unroll 14
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r * ars]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 14
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
  }
}

// The rows [first, last) of one product, full blocks then the remainder.
template <int NV, int R = RowsPerBlock(NV)>
TPX_AVX512F_TARGET void Rows(int64_t rows, int64_t k, const float* a, int64_t ars, int64_t aps,
                             const float* b, int64_t ldb, float* c, int64_t ldc) {
  constexpr int kMr = RowsPerBlock(NV);
  if constexpr (R == kMr) {
    int64_t r = 0;
    for (; r + kMr <= rows; r += kMr) Block<NV, kMr>(k, a + r * ars, ars, aps, b, ldb, c + r * ldc, ldc);
    if (r < rows) Rows<NV, kMr - 1>(rows - r, k, a + r * ars, ars, aps, b, ldb, c + r * ldc, ldc);
  } else if constexpr (R >= 1) {
    if (rows == R) {
      Block<NV, R>(k, a, ars, aps, b, ldb, c, ldc);
    } else {
      Rows<NV, R - 1>(rows, k, a, ars, aps, b, ldb, c, ldc);
    }
  }
}

using RowsFn = void (*)(int64_t, int64_t, const float*, int64_t, int64_t, const float*, int64_t,
                        float*, int64_t);

RowsFn RowsFor(int64_t n) {
  switch (n) {
    case 16: return &Rows<1>;
    case 32: return &Rows<2>;
    case 48: return &Rows<3>;
    default: return &Rows<4>;
  }
}

}  // namespace

bool SmallGemmF32Applies(bool trans_b, int64_t m, int64_t n, int64_t k) {
  if (!CpuHasAvx512F() || trans_b || m <= 0 || k <= 0 || n % 16 != 0 || n < 16 || n > 64) {
    return false;
  }
  // Rows of one register block read B once, so it need not stay in L1.
  const bool one_block = m <= RowsPerBlock(static_cast<int>(n / 16));
  return one_block || k * n * static_cast<int64_t>(sizeof(float)) <= kMaxBBytes;
}

void SmallGemmF32(int64_t batch, bool trans_a, int64_t m, int64_t n, int64_t k, const float* a,
                  int64_t lda, int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b,
                  float* c, int64_t ldc, int64_t stride_c) {
  const RowsFn rows_fn = RowsFor(n);
  // op(A)(r, p): a[r * lda + p], or a[p * lda + r] when A is stored transposed.
  const int64_t ars = trans_a ? 1 : lda, aps = trans_a ? lda : 1;
  // Work items: (product, block of rows); blocks of 64 rows keep a thread's
  // share of C and A small.
  constexpr int64_t kRowChunk = 64;
  const int64_t chunks = (m + kRowChunk - 1) / kRowChunk;
  const int64_t items = batch * chunks;
  auto run = [&](int64_t first, int64_t last) {
    for (int64_t it = first; it < last; ++it) {
      const int64_t i = it / chunks, r0 = (it % chunks) * kRowChunk;
      const int64_t rows = std::min(kRowChunk, m - r0);
      rows_fn(rows, k, a + i * stride_a + r0 * ars, ars, aps, b + i * stride_b, ldb,
              c + i * stride_c + r0 * ldc, ldc);
    }
  };
  SplitWorkItems(items, batch * m * n * k >= kMinSplitMacs, run);
}

}  // namespace tpx
