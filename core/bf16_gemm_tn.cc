#include "core/bf16_gemm_tn.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/allocator.h"
#include "core/gemm.h"

namespace tpx {
namespace {

#define TPX_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// Rows of C per register block, columns of C per packed B panel (four
// 16-float vectors): 6 x 4 accumulators, 4 B vectors and a broadcast fit
// the 32 zmm registers.
constexpr int64_t kMr = 6;
constexpr int64_t kPanel = 64;
// Register blocks per work item: enough items for the threads, few enough
// that a thread reuses its B panel from cache.
constexpr int64_t kBlocksPerItem = 8;
// k-pairs per reduction slice: a 16 KiB slice of a B panel.
constexpr int64_t kPairsPerSlice = 64;

// One product's operands and result, and its packed copies: pairs of
// consecutive k values as one 32-bit word (low half k even), the layout
// vdpbf16ps multiplies. A is packed as [m / kMr blocks][k / 2][kMr],
// B as [n / kPanel panels][k / 2][kPanel]; both zero-padded.
struct Product {
  int64_t m, n, k;
  float alpha, beta;
  const uint16_t* a;
  int64_t lda;
  const uint16_t* b;
  int64_t ldb;
  bool c_bf16;
  void* c;
  int64_t ldc;
  int64_t Pairs() const { return (k + 1) / 2; }
  int64_t Blocks() const { return (m + kMr - 1) / kMr; }
  int64_t Panels() const { return (n + kPanel - 1) / kPanel; }
  // Words from one packed block (panel) to the next: a cache line more than
  // its size, so that packing, which writes to all of them row by row, does
  // not map them all onto the same cache sets (their sizes are multiples
  // of 4 KiB for the usual k).
  int64_t BlockStride() const { return (Pairs() * kMr + 15) / 16 * 16 + 16; }
  int64_t PanelStride() const { return Pairs() * kPanel + 16; }
  int64_t PackedAWords() const { return Blocks() * BlockStride(); }
  int64_t PackedBWords() const { return Panels() * PanelStride(); }
  int64_t Items() const { return Panels() * ((Blocks() + kBlocksPerItem - 1) / kBlocksPerItem); }
};

// The zero-masking forms of the AVX-512 conversions and shifts: the plain
// ones start from _mm512_undefined_epi32(), which GCC 12 reports as used
// uninitialized.
constexpr __mmask16 kAll = 0xFFFF;

TPX_BF16_TARGET inline __m512i Widen(__m256i v) { return _mm512_maskz_cvtepu16_epi32(kAll, v); }

// Interleaves `count` (<= 16) values of rows 2p and 2p + 1 (row 2p + 1 may
// be past k: zeros) into 32-bit pairs.
TPX_BF16_TARGET inline __m512i PairUp(const uint16_t* row0, const uint16_t* row1, __mmask16 mask) {
  const __m256i lo = _mm256_maskz_loadu_epi16(mask, row0);
  const __m256i hi = row1 == nullptr ? _mm256_setzero_si256() : _mm256_maskz_loadu_epi16(mask, row1);
  return _mm512_or_si512(Widen(lo), _mm512_maskz_slli_epi32(kAll, Widen(hi), 16));
}

__mmask16 FirstLanes(int64_t count) {
  return count >= 16 ? kAll : static_cast<__mmask16>((1u << count) - 1);
}

// Register blocks [first, last) of A: op(A)(r, p) = a[p * lda + r].
TPX_BF16_TARGET void PackA(const Product& pr, int64_t first, int64_t last, uint32_t* ap) {
  const int64_t pairs = pr.Pairs();
  for (int64_t p = 0; p < pairs; ++p) {
    const uint16_t* row0 = pr.a + 2 * p * pr.lda;
    const uint16_t* row1 = 2 * p + 1 < pr.k ? row0 + pr.lda : nullptr;
    for (int64_t blk = first; blk < last; ++blk) {
      const int64_t r0 = blk * kMr;
      const __mmask16 mask = FirstLanes(std::min(kMr, pr.m - r0));
      const __m512i v = PairUp(row0 + r0, row1 == nullptr ? nullptr : row1 + r0, mask);
      _mm512_mask_storeu_epi32(ap + blk * pr.BlockStride() + p * kMr, FirstLanes(kMr), v);
    }
  }
}

// Panels [first, last) of B.
TPX_BF16_TARGET void PackB(const Product& pr, int64_t first, int64_t last, uint32_t* bp) {
  const int64_t pairs = pr.Pairs();
  const int64_t col_end = std::min(pr.n, last * kPanel);
  for (int64_t p = 0; p < pairs; ++p) {
    const uint16_t* row0 = pr.b + 2 * p * pr.ldb;
    const uint16_t* row1 = 2 * p + 1 < pr.k ? row0 + pr.ldb : nullptr;
    for (int64_t c0 = first * kPanel; c0 < col_end; c0 += 16) {
      const int64_t panel = c0 / kPanel;
      const __m512i v =
          PairUp(row0 + c0, row1 == nullptr ? nullptr : row1 + c0, FirstLanes(pr.n - c0));
      _mm512_store_si512(bp + panel * pr.PanelStride() + p * kPanel + c0 % kPanel, v);
    }
  }
}

// One slice of the reduction for a block of C (rows <= kMr, cols <= 16 *
// NV): `pairs` k-pairs of the packed A block times the packed B panel. The
// running f32 sums live in `tile` (kMr x kPanel) between slices; the first
// slice starts from zero, the last writes alpha * sum + beta * C to C.
template <int NV>
TPX_BF16_TARGET void Block(const Product& pr, const uint32_t* ap, const uint32_t* bp,
                           int64_t pairs, int64_t row, int64_t col, float* tile, bool first,
                           bool last) {
  __m512 acc[kMr][NV];
#pragma GCC unroll 8
  for (int r = 0; r < kMr; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      acc[r][v] = first ? _mm512_setzero_ps() : _mm512_load_ps(tile + r * kPanel + 16 * v);
    }
  }
  for (int64_t p = 0; p < pairs; ++p) {
    __m512i bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_si512(bp + p * kPanel + 16 * v);
    const uint32_t* a_pair = ap + p * kMr;
#pragma GCC unroll 8
    for (int r = 0; r < kMr; ++r) {
      const __m512i av = _mm512_set1_epi32(static_cast<int>(a_pair[r]));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)av, (__m512bh)bv[v]);
      }
    }
  }
  if (!last) {
#pragma GCC unroll 8
    for (int r = 0; r < kMr; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) _mm512_store_ps(tile + r * kPanel + 16 * v, acc[r][v]);
    }
    return;
  }
  const int64_t rows = std::min(kMr, pr.m - row);
  const __mmask16 tail = FirstLanes(pr.n - col - 16 * (NV - 1));
  const __m512 alpha = _mm512_set1_ps(pr.alpha), beta = _mm512_set1_ps(pr.beta);
#pragma GCC unroll 8
  for (int r = 0; r < kMr; ++r) {
    if (r >= rows) break;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __mmask16 mask = v == NV - 1 ? tail : kAll;
      const int64_t offset = (row + r) * pr.ldc + col + 16 * v;
      __m512 out = _mm512_mul_ps(alpha, acc[r][v]);
      if (pr.c_bf16) {
        uint16_t* cp = static_cast<uint16_t*>(pr.c) + offset;
        if (pr.beta != 0.0f) {
          const __m512i old = Widen(_mm256_maskz_loadu_epi16(mask, cp));
          out = _mm512_fmadd_ps(
              beta, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, old, 16)), out);
        }
        _mm256_mask_storeu_epi16(cp, mask, (__m256i)_mm512_cvtneps_pbh(out));
      } else {
        float* cp = static_cast<float*>(pr.c) + offset;
        if (pr.beta != 0.0f) out = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(mask, cp), out);
        _mm512_mask_storeu_ps(cp, mask, out);
      }
    }
  }
}

// Work items [first, last): (panel, kBlocksPerItem register blocks), panel
// by panel so consecutive items share the packed B panel. The reduction
// goes in slices of kPairsPerSlice k-pairs so that a slice of the B panel
// stays in L1 while every block of the item uses it.
void Compute(const Product& pr, const uint32_t* ap, const uint32_t* bp, int64_t first,
             int64_t last) {
  const int64_t pairs = pr.Pairs(), blocks = pr.Blocks();
  const int64_t items_per_panel = (blocks + kBlocksPerItem - 1) / kBlocksPerItem;
  alignas(64) float tiles[kBlocksPerItem][kMr * kPanel];
  for (int64_t it = first; it < last; ++it) {
    const int64_t panel = it / items_per_panel;
    const int64_t col = panel * kPanel;
    const int64_t vectors = std::min<int64_t>(4, (pr.n - col + 15) / 16);
    const int64_t blk0 = (it % items_per_panel) * kBlocksPerItem;
    const int64_t blk_end = std::min(blocks, blk0 + kBlocksPerItem);
    for (int64_t p0 = 0; p0 < pairs; p0 += kPairsPerSlice) {
      const int64_t slice = std::min(kPairsPerSlice, pairs - p0);
      const bool first_slice = p0 == 0, last_slice = p0 + slice == pairs;
      const uint32_t* b_slice = bp + panel * pr.PanelStride() + p0 * kPanel;
      for (int64_t blk = blk0; blk < blk_end; ++blk) {
        const uint32_t* a_slice = ap + blk * pr.BlockStride() + p0 * kMr;
        float* tile = tiles[blk - blk0];
        switch (vectors) {
          case 1:
            Block<1>(pr, a_slice, b_slice, slice, blk * kMr, col, tile, first_slice, last_slice);
            break;
          case 2:
            Block<2>(pr, a_slice, b_slice, slice, blk * kMr, col, tile, first_slice, last_slice);
            break;
          case 3:
            Block<3>(pr, a_slice, b_slice, slice, blk * kMr, col, tile, first_slice, last_slice);
            break;
          default:
            Block<4>(pr, a_slice, b_slice, slice, blk * kMr, col, tile, first_slice, last_slice);
            break;
        }
      }
    }
  }
}

// One product on `threads` threads: pack both operands, then the blocks.
void RunProduct(const Product& pr, uint32_t* ap, uint32_t* bp, int threads) {
  if (threads <= 1) {
    PackA(pr, 0, pr.Blocks(), ap);
    PackB(pr, 0, pr.Panels(), bp);
    Compute(pr, ap, bp, 0, pr.Items());
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t blocks = pr.Blocks(), panels = pr.Panels(), items = pr.Items();
    PackA(pr, blocks * t / nt, blocks * (t + 1) / nt, ap);
    PackB(pr, panels * t / nt, panels * (t + 1) / nt, bp);
#pragma omp barrier
    Compute(pr, ap, bp, items * t / nt, items * (t + 1) / nt);
  }
}

}  // namespace

bool Bf16GemmTNApplies() {
  static const bool supported = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  }();
  return supported;
}

absl::Status Bf16GemmTN(int64_t batch, int64_t m, int64_t n, int64_t k, float alpha,
                        const uint16_t* a, int64_t lda, int64_t stride_a, const uint16_t* b,
                        int64_t ldb, int64_t stride_b, float beta, DType c_dtype, void* c,
                        int64_t ldc, int64_t stride_c) {
  if (batch <= 0 || m <= 0 || n <= 0) return absl::OkStatus();
  const size_t c_size = SizeOf(c_dtype);
  auto product = [&](int64_t i) {
    return Product{m, n, k, alpha, beta, a + i * stride_a, lda, b + i * stride_b, ldb,
                   c_dtype == DType::kBF16, static_cast<char*>(c) + i * stride_c * c_size, ldc};
  };
  const Product first = product(0);
  const int threads = omp_in_parallel() ? 1 : std::max(1, GemmThreads());
  // Many products: each thread packs and multiplies whole products in its
  // own buffers; few: one product at a time across all threads.
  const bool per_thread = batch >= threads;
  const int buffers = per_thread ? threads : 1;
  // Each buffer: packed A, then packed B (both sizes whole cache lines).
  const size_t a_words = static_cast<size_t>(first.PackedAWords());
  const size_t stride = a_words + static_cast<size_t>(first.PackedBWords());
  const size_t bytes = stride * sizeof(uint32_t) * buffers;
  CpuAllocator& alloc = GetCpuAllocator();
  uint32_t* scratch = static_cast<uint32_t*>(alloc.Allocate(bytes));
  if (scratch == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("Gemm: no memory for ", bytes, " bytes of packed bf16 operands (m=", m,
                     " n=", n, " k=", k, ")"));
  }
  if (!per_thread || threads == 1) {
    for (int64_t i = 0; i < batch; ++i) RunProduct(product(i), scratch, scratch + a_words, threads);
  } else {
#pragma omp parallel num_threads(threads)
    {
      const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      uint32_t* ap = scratch + t * stride;
      for (int64_t i = batch * t / nt; i < batch * (t + 1) / nt; ++i) {
        RunProduct(product(i), ap, ap + a_words, 1);
      }
    }
  }
  alloc.Deallocate(scratch, bytes);
  return absl::OkStatus();
}

}  // namespace tpx
