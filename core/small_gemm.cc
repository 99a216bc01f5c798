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

inline void Prefetch(const float* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}
inline void PrefetchForWrite(const float* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_ET0);
}

// Rows of C per register block for NV 16-float vectors per row: NV * MR
// accumulators (at most 28 of the 32 zmm registers).
constexpr int RowsPerBlock(int nv) { return nv == 1 ? 14 : nv == 2 ? 12 : nv == 3 ? 8 : 6; }

// C[MR rows, 16 * NV] = op(A)[MR rows, k] B[k, 16 * NV]. op(A)'s element
// (r, p) is a[r * ars + p * aps].
// Every loop over the MR x NV accumulators is fully unrolled: GCC keeps an
// array it cannot resolve at compile time in memory, and each multiply-add
// then loads and stores its accumulator (a quarter of the speed at NV = 4).
// kPrefetch: the next block's rows of A and of C are prefetched into L1
// while this one runs, for batches of products (attention's per-head
// products: each product's A and B arrive from L3, and a row of A, 512
// bytes, is too short for the hardware prefetchers to catch). On an Emerald
// Rapids core, in 12 interleaved rounds, batches of 128 x 128 x n ran
// 1.04-1.19x as fast with them (P V at n 32 1.19x, from 0.71 to 0.84 of the
// FMA peak; P^T dO 1.19x, 0.65 to 0.78; n 16-64 and 256 x 256 x 32 1.04-1.18x),
// where single products lost 0.84-0.98x (2048 rows with k 128-256, n 16-64:
// B stays in L1 and A streams in long runs the hardware follows).
// Prefetching into L2 instead, two blocks ahead, or each product's B before
// it starts, was slower.
template <int NV, int MR, bool kPrefetch>
TPX_AVX512F_TARGET inline void Block(int64_t k, const float* a, int64_t ars, int64_t aps,
                                     const float* b, int64_t ldb, float* c, int64_t ldc) {
  // Stored A plain (aps 1): the next block's MR rows, one cache line a step
  // (line `line` of row `row`). Stored transposed: this block's columns of
  // A kAhead steps on, where the next block's columns mostly share a line.
  constexpr int64_t kFloatsPerLine = 64 / sizeof(float);
  constexpr int64_t kAhead = 8;
  const float* next_a = a + MR * ars;
  const float* next_c = c + MR * ldc;
  int64_t row = 0, line = 0;
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
    if constexpr (kPrefetch) {
      // Prefetches never fault: those past the operands' ends are harmless.
      if (aps == 1) {
        if (line < k) Prefetch(next_a + row * ars + line);
        if (++row == MR) {
          row = 0;
          line += kFloatsPerLine;
        }
      } else {
        Prefetch(ap + kAhead * aps);
        Prefetch(ap + kAhead * aps + MR - 1);
      }
      // The next block's C, for writing: one line a step, NV to a row.
      if (p < MR * NV) PrefetchForWrite(next_c + (p / NV) * ldc + (p % NV) * kFloatsPerLine);
    }
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
template <int NV, bool kPrefetch, int R = RowsPerBlock(NV)>
TPX_AVX512F_TARGET void Rows(int64_t rows, int64_t k, const float* a, int64_t ars, int64_t aps,
                             const float* b, int64_t ldb, float* c, int64_t ldc) {
  constexpr int kMr = RowsPerBlock(NV);
  if constexpr (R == kMr) {
    int64_t r = 0;
    for (; r + kMr <= rows; r += kMr)
      Block<NV, kMr, kPrefetch>(k, a + r * ars, ars, aps, b, ldb, c + r * ldc, ldc);
    if (r < rows)
      Rows<NV, kPrefetch, kMr - 1>(rows - r, k, a + r * ars, ars, aps, b, ldb, c + r * ldc, ldc);
  } else if constexpr (R >= 1) {
    if (rows == R) {
      Block<NV, R, kPrefetch>(k, a, ars, aps, b, ldb, c, ldc);
    } else {
      Rows<NV, kPrefetch, R - 1>(rows, k, a, ars, aps, b, ldb, c, ldc);
    }
  }
}

using RowsFn = void (*)(int64_t, int64_t, const float*, int64_t, int64_t, const float*, int64_t,
                        float*, int64_t);

template <bool kPrefetch>
RowsFn RowsFor(int64_t n) {
  switch (n) {
    case 16:
      return &Rows<1, kPrefetch>;
    case 32:
      return &Rows<2, kPrefetch>;
    case 48:
      return &Rows<3, kPrefetch>;
    default:
      return &Rows<4, kPrefetch>;
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
  const RowsFn rows_fn = batch > 1 ? RowsFor<true>(n) : RowsFor<false>(n);
  // op(A)(r, p): a[r * lda + p], or a[p * lda + r] when A is stored transposed.
  const int64_t ars = trans_a ? 1 : lda, aps = trans_a ? lda : 1;
  // Work items: (product, chunk of rows); chunks of about 64 rows keep a
  // thread's share of C and A small, and are whole register blocks so that
  // each chunk leaves at most one short block.
  const int64_t block_rows = RowsPerBlock(static_cast<int>(n / 16));
  const int64_t row_chunk = (64 + block_rows - 1) / block_rows * block_rows;
  const int64_t chunks = (m + row_chunk - 1) / row_chunk;
  const int64_t items = batch * chunks;
  auto run = [&](int64_t first, int64_t last) {
    for (int64_t it = first; it < last; ++it) {
      const int64_t i = it / chunks, r0 = (it % chunks) * row_chunk;
      const int64_t rows = std::min(row_chunk, m - r0);
      rows_fn(rows, k, a + i * stride_a + r0 * ars, ars, aps, b + i * stride_b, ldb,
              c + i * stride_c + r0 * ldc, ldc);
    }
  };
  SplitWorkItems(items, batch * m * n * k >= kMinSplitMacs, run);
}

}  // namespace tpx
