#include "core/bf16_gemm.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "core/allocator.h"
#include "core/cpu/transpose16x16.h"
#include "core/cpu_features.h"
#include "core/lane_mask.h"

namespace tpx {
namespace {

#define TPX_BF16_TARGET TPX_AVX512BF16_TARGET

// Operands are packed as pairs of consecutive k values in one 32-bit word
// (low half the even k), the layout vdpbf16ps multiplies, slice by slice of
// the reduction so the packed copies stay in cache (as GotoBLAS does):
//   - a slice of B (Product::slice_pairs k-pairs x up to kGroupPanels
//     panels of kPanel columns) in L2 or, for long slices, L3; for a
//     transposed A and a C larger than L2, all of n (see Product::large_c);
//   - a slice of a transposed A (a chunk of rows of op(A)) in L1 or, for
//     long slices and wide chunks, L2; a plain A is read in place (its
//     rows hold the k-pairs), which measured 1.04-1.13x oneDNN on products
//     with k >= 512.
// Slices are as long as SlicePairs allows (see kLongSlicePairs).
// The first block that needs a panel of B or a chunk of A packs it while
// it multiplies (the others read the packed copy): packing then overlaps
// that block's products instead of running alone before them, which cost
// the GPT example's weight gradients 5-10% of the peak. A transposed B is
// the exception: its panels are transposed 16 pairs at a time, just
// before their first block.
// Each thread has its own buffers and its own part of C (no waiting on
// the others).
// A register block of C is kMr x kPanel: 6 x 4 accumulators, 4 B vectors
// and a broadcast in the 32 zmm registers.
constexpr int64_t kMr = 6;
constexpr int64_t kPanel = 64;
// The short slice: 48 rows of a transposed A's chunk of it fill L1 (48 KiB).
constexpr int64_t kSlicePairs = 256;
// Every slice costs each block a fresh start (its B panel and A rows
// streamed anew, its sums read and written). With A read in place, slices
// of up to 2048 pairs ran 1.03-1.10x the 256-pair ones on 1024-2048-sized
// products on a Zen 5 core (0.84-0.87 -> 0.89-0.92 of the peak), 1.06-1.10x
// on two; 1024 gained only half as much. The B panels of a slice (512 KiB
// each) then stream from L3. A transposed A's weight gradients ran 1.02-1.07x
// with slices of all of k (up to 1024 pairs) against 256.
constexpr int64_t kLongSlicePairs = 2048;
// Where a slice of B spans all of n (Product::large_c), its length keeps it
// within this many words (4 MiB), as 256-pair slices did up to n = 4096.
constexpr int64_t kMaxWideSliceWords = int64_t{1} << 20;
constexpr int64_t kGroupPanels = 8;
// Blocks of rows per chunk, which multiply one panel after another: 8, and
// 16 for a transposed A with a large C, whose slices of B, as wide as n,
// stream from L3 once per chunk (1.02-1.04x on 4096 x 2048 x 1024 and
// 2048 x 2048 x 1024; even for a plain A, -2% to +2% for a small C).
constexpr int64_t kChunkBlocks = 8;
constexpr int64_t kWideChunkBlocks = 16;
// A chunk's rows are a multiple of 16: each pair's packed line is aligned.
static_assert(kChunkBlocks * kMr % 16 == 0 && kWideChunkBlocks * kMr % 16 == 0);

// The zero-masking forms of the AVX-512 conversions and shifts: the plain
// ones start from _mm512_undefined_epi32(), which GCC 12 reports as used
// uninitialized.
constexpr __mmask16 kAll = 0xFFFF;

TPX_BF16_TARGET inline __m512i Widen(__m256i v) { return _mm512_maskz_cvtepu16_epi32(kAll, v); }

// vpermt2w's word indices that interleave 16 values of its first operand,
// from `first` on, with the same 16 of its second (indices from 32 on).
struct PairIndices {
  alignas(64) uint16_t words[32];
};
constexpr PairIndices PairIndicesFrom(int first) {
  PairIndices idx{};
  for (int j = 0; j < 16; ++j) {
    idx.words[2 * j] = static_cast<uint16_t>(first + j);
    idx.words[2 * j + 1] = static_cast<uint16_t>(32 + first + j);
  }
  return idx;
}
constexpr PairIndices kLowPairs = PairIndicesFrom(0), kHighPairs = PairIndicesFrom(16);

// Rows of an operand that a block packs as it goes: pair p is rows
// 2p and 2p + 1 from `rows` (`ld` values apart; from pair `whole_pairs` on
// the second row is past k: zeros), `width` values of them from the first
// (those of the panel inside n, or of the chunk inside m).
struct SourceRows {
  const uint16_t* rows = nullptr;
  int64_t ld = 0, whole_pairs = 0, width = 0;
};

// Values [c, c + 32) of pair p of `src` as two vectors of pairs (columns
// c to c + 15, then c + 16 to c + 31; zeros past its width), with one
// vpermt2w each.
TPX_BF16_TARGET inline void PairUp32(SourceRows src, int64_t p, int64_t c, __m512i low,
                                     __m512i high, __m512i* first, __m512i* second) {
  const uint16_t* row0 = src.rows + 2 * p * src.ld + c;
  const int64_t left = src.width - c;
  __m512i lo, hi = _mm512_setzero_si512();
  const bool whole = p < src.whole_pairs;
  if (left >= 32) {  // masked loads only at the edges: they are slower
    lo = _mm512_loadu_si512(row0);
    if (whole) hi = _mm512_loadu_si512(row0 + src.ld);
  } else {
    const __mmask32 mask = (__mmask32{1} << left) - 1;
    lo = _mm512_maskz_loadu_epi16(mask, row0);
    if (whole) hi = _mm512_maskz_loadu_epi16(mask, row0 + src.ld);
  }
  *first = _mm512_permutex2var_epi16(lo, low, hi);
  *second = _mm512_permutex2var_epi16(lo, high, hi);
}

// Where a slice's partial sums go: straight into an f32 C (alpha applied,
// beta on the first slice), or through an f32 buffer for a bf16 C.
enum class Stage { kOnly, kFirst, kMiddle, kLast };

// One product: C[m, n] = alpha * op(A) op(B) + beta * C, A stored [k, m]
// (or [m, k]: a_rows), B [k, n] (or [n, k]: b_cols).
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
  float* sums;  // [m, n] running sums for a bf16 C over several slices
  // The reduction goes on past this product's k (other threads' slices):
  // its last slice leaves running sums (kMiddle) instead of finishing C.
  bool continues = false;
  // > 0: each slice's own sums go to an f32 C of their own (alpha 1, beta 0),
  // this many floats after the previous slice's: c is the first slice's.
  int64_t slice_stride = 0;
  // C (or its running sums, in f32) is larger than L2: each block
  // prefetches its tile of it, and with a transposed A a slice of B spans
  // all of n (GroupPanels). Measured on
  // a Zen 5 core: the tile's loads and stores, from L3 or memory at every
  // slice, cost the blocks 5-14% (1024 x 1024 x 1024 and up, 512 x 2048 x
  // 1024 with a bf16 C); and with panel groups, the chunks of a transposed
  // A, packed again for each group, another 3-9% (the B slice of 1-4 MiB
  // then no longer stays in L2: it costs less). A product of one slice
  // (k <= 512) loses 0-2% either way.
  bool large_c = false;
  // A stored [m, k] (row i of op(A) at a + i * lda): its rows already hold
  // the k-pairs, which the blocks read in place as broadcasts.
  bool a_rows = false;
  // B stored [n, k] (column j of op(B) at b + j * ldb): each panel of a
  // slice is packed by 16 x 16 transposes before its first block
  // (PackTransposedB).
  bool b_cols = false;
  // k-pairs per slice of the reduction (SlicePairs).
  int64_t slice_pairs = kSlicePairs;

  int64_t Pairs() const { return (k + 1) / 2; }
  int64_t Slices() const { return (Pairs() + slice_pairs - 1) / slice_pairs; }
  // Words from one packed panel to the next: a cache line more than its
  // size, so that the panels do not start on the same cache sets.
  int64_t PanelStride() const { return slice_pairs * kPanel + 16; }
  int64_t Blocks() const { return (m + kMr - 1) / kMr; }
  int64_t Panels() const { return (n + kPanel - 1) / kPanel; }
  // All of n only for a transposed A, whose chunks are packed once per
  // group: with A in place, groups of kGroupPanels ran as fast and bound
  // the buffer.
  int64_t GroupPanels() const { return WideBSlices() ? Panels() : kGroupPanels; }
  int64_t ChunkBlocks() const { return WideBSlices() ? kWideChunkBlocks : kChunkBlocks; }
  // A transposed A with a large C: each slice of B spans all of n.
  bool WideBSlices() const { return large_c && !a_rows; }
  // Rows of a transposed A's chunk: words per pair of its packed slice.
  int64_t ChunkRows() const { return ChunkBlocks() * kMr; }
  bool NeedsSums() const { return c_bf16 && (Slices() > 1 || continues); }
};

// How many of pairs [p0, p0 + pairs) have both rows inside k: all but a
// last one when k is odd.
int64_t WholePairs(const Product& pr, int64_t p0, int64_t pairs) {
  return std::clamp<int64_t>(pr.k / 2 - p0, 0, pairs);
}

// Pair p of a chunk of A's rows into its packed line.
TPX_BF16_TARGET inline void PackALine(SourceRows src, int64_t p, __m512i low, __m512i high,
                                      uint32_t* line) {
  for (int64_t c = 0; c < src.width; c += 32) {
    __m512i first, second;
    PairUp32(src, p, c, low, high, &first, &second);
    _mm512_store_si512(line + c, first);
    if (c + 16 < src.width) _mm512_store_si512(line + c + 16, second);
  }
}

// Calls f(x) with x as a std::bool_constant, so that f's loops test it at
// compile time.
template <typename F>
TPX_BF16_TARGET inline void WithConstant(bool x, F&& f) {
  if (x) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

// What a block packs as it multiplies: nothing, the chunk of A (into ap,
// from its first row: the block is the chunk's first), the panel of B (into
// bp), or both; kAInPlace: A is read from its rows, never packed.
enum Packs { kPacksNone = 0, kPacksA = 1, kPacksB = 2, kPacksBoth = 3, kAInPlace = 4 };
// A packing block packs its chunk of A this many pairs ahead of the pair
// it multiplies: the broadcasts then read lines stored a while before, not
// ones still in flight (attention's dV: 0.72 -> 0.75 of the peak).
// Packing a transposed A costs the GPT example's weight gradients (n of
// 64-128) 6-11% of their time (measured by skipping it), far more than its
// instructions. None of these gained (0.93-1.03x): 12 pairs ahead,
// prefetching the source rows 16 pairs ahead, shifts and blends in place of
// vpermt2w, or the chunk's 16-row groups packed by the blocks that first
// need them.
constexpr int64_t kPackAhead = 4;

// What one block multiplies and packs: its k-pairs and rows, the packed
// copies it reads (and writes, as `packs` says) and their sources.
struct BlockArgs {
  uint32_t* ap = nullptr;  // the packed chunk of A from the block's first row
  uint32_t* bp = nullptr;  // the packed panel of B
  SourceRows a_src, b_src;
  int packs = kPacksNone;
  int64_t pairs = 0, row = 0, col = 0;
  Stage stage = Stage::kOnly;
};

// Prefetches, for writing, the lines of the block's tile of C and of a
// bf16 C's running sums that its epilogue will read or write, so that they
// arrive while it multiplies.
// (Its arguments are values: a reference to the block's BlockArgs would
// have them reloaded at every pair. Always inlined: GCC takes a function
// that only prefetches for one without effects and drops its calls.)
template <int NV, int MR>
[[gnu::always_inline]] TPX_BF16_TARGET inline void PrefetchTile(const Product& pr, int64_t row0,
                                                                int64_t col, Stage stage) {
  const bool to_sums = pr.c_bf16 && stage != Stage::kOnly;
  const bool to_c = !pr.c_bf16 || stage == Stage::kOnly || stage == Stage::kLast;
  const int64_t c_bytes = pr.c_bf16 ? 2 : 4;
  for (int r = 0; r < MR; ++r) {
    const int64_t row = row0 + r;
    if (to_sums) {
      const char* line = reinterpret_cast<const char*>(pr.sums + row * pr.n + col);
      for (int64_t at = 0; at < 16 * NV * 4; at += 64) __builtin_prefetch(line + at, 1, 3);
    }
    if (to_c) {
      const char* line = static_cast<const char*>(pr.c) + (row * pr.ldc + col) * c_bytes;
      for (int64_t at = 0; at < 16 * NV * c_bytes; at += 64) __builtin_prefetch(line + at, 1, 3);
    }
  }
}

// The block of C at (b.row, b.col) (MR rows, cols <= 16 * NV) for b.pairs
// k-pairs of packed A (b.ap: its first row, pairs pr.ChunkRows() words apart;
// with kAInPlace, A itself: b.a_src.rows is the block's first row at the
// slice's first pair, b.a_src.ld apart) and the packed B
// panel, written as b.stage says; packing first what kPacks says from
// b.a_src and b.b_src. b's fields are read once, into locals: the packed
// stores, of may-alias vector types, would otherwise have them reloaded
// each pair. b comes by reference: by value, its source rows were copied
// into the call's stack arguments by 16-byte loads of fields just stored
// 8 bytes at a time, which cannot be forwarded and stalled every call
// (attention's scores, 16 pairs a block, ran 13-14% faster by reference).
template <int NV, int MR, int kPacks>
TPX_BF16_TARGET void Block(const Product& pr, const BlockArgs& b) {
  uint32_t *const ap = b.ap, *const bp = b.bp;
  const SourceRows a_src = b.a_src, b_src = b.b_src;
  const int64_t pairs = b.pairs, row = b.row, col = b.col;
  const Stage stage = b.stage;
  if (pr.large_c) PrefetchTile<NV, MR>(pr, row, col, stage);
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  [[maybe_unused]] const __m512i low = _mm512_load_si512(kLowPairs.words);
  [[maybe_unused]] const __m512i high = _mm512_load_si512(kHighPairs.words);
  const int64_t chunk_rows = pr.ChunkRows();
  if constexpr ((kPacks & kPacksA) != 0) {
    for (int64_t p = 0; p < std::min<int64_t>(pairs, kPackAhead); ++p)
      PackALine(a_src, p, low, high, ap + p * chunk_rows);
  }
  // One k-pair: A's word for row r of the block from a_word(p, r).
  auto step = [&](int64_t p, auto a_word) TPX_BF16_TARGET {
    if constexpr ((kPacks & kPacksA) != 0) {
      if (p + kPackAhead < pairs)
        PackALine(a_src, p + kPackAhead, low, high, ap + (p + kPackAhead) * chunk_rows);
    }
    __m512i bv[NV];
    uint32_t* b_pair = bp + p * kPanel;
    if constexpr ((kPacks & kPacksB) != 0) {
#pragma GCC unroll 2
      for (int v = 0; v < NV; v += 2) {
        __m512i second;
        PairUp32(b_src, p, 16 * v, low, high, &bv[v], &second);
        _mm512_store_si512(b_pair + 16 * v, bv[v]);
        if (v + 1 < NV) {
          bv[v + 1] = second;
          _mm512_store_si512(b_pair + 16 * v + 16, second);
        }
      }
    } else {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_si512(b_pair + 16 * v);
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512i av = _mm512_set1_epi32(static_cast<int>(a_word(p, r)));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)av, (__m512bh)bv[v]);
      }
    }
  };
  if constexpr ((kPacks & kAInPlace) != 0) {
    // Row r's whole pairs as 32-bit words; a last pair past k (odd k) as
    // its one value, since the word's second half may lie past A.
    const uint16_t* const a_row = a_src.rows;
    const int64_t a_ld = a_src.ld, whole = a_src.whole_pairs;
    for (int64_t p = 0; p < whole; ++p) {
      step(p, [&](int64_t q, int r) TPX_BF16_TARGET {
        uint32_t word;
        std::memcpy(&word, a_row + r * a_ld + 2 * q, sizeof(word));
        return word;
      });
    }
    if (whole < pairs) {
      step(whole, [&](int64_t q, int r)
                      TPX_BF16_TARGET { return static_cast<uint32_t>(a_row[r * a_ld + 2 * q]); });
    }
  } else {
    for (int64_t p = 0; p < pairs; ++p) {
      step(p, [&](int64_t q, int r) TPX_BF16_TARGET { return ap[q * chunk_rows + r]; });
    }
  }
  // C (or a bf16 C's running sums) as `stage` says, each case one loop
  // over the accumulators with its choices made at compile time: testing
  // the stage, dtype, alpha and beta at every accumulator cost attention's
  // dV (64 k-pairs a block) 15% of its time and the GPT example's weight
  // gradients (256) 7%. Multiplying by an alpha of 1 changes no bits, so
  // it is left out.
  const __mmask16 tail = FirstLanes(pr.n - col - 16 * (NV - 1));
  // C's layout in locals: the stores, which may alias pr, would have them
  // reloaded after each.
  const int64_t ldc = pr.ldc, sums_ld = pr.n;
  auto each = [&](auto&& write) TPX_BF16_TARGET {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        write(acc[r][v], v == NV - 1 ? tail : kAll, (row + r) * ldc + col + 16 * v,
              (row + r) * sums_ld + col + 16 * v);
      }
    }
  };
  const __m512 alpha = _mm512_set1_ps(pr.alpha), beta = _mm512_set1_ps(pr.beta);
  const bool scaled = pr.alpha != 1.0f, read_c = pr.beta != 0.0f;
  if (!pr.c_bf16) {
    float* c = static_cast<float*>(pr.c);
    if (stage == Stage::kMiddle || stage == Stage::kLast) {
      each([&](__m512 a, __mmask16 mask, int64_t at, int64_t) TPX_BF16_TARGET {
        _mm512_mask_storeu_ps(c + at, mask,
                              _mm512_fmadd_ps(alpha, a, _mm512_maskz_loadu_ps(mask, c + at)));
      });
      return;
    }
    WithConstant(scaled, [&](auto is_scaled) TPX_BF16_TARGET {
      WithConstant(read_c, [&](auto reads_c) TPX_BF16_TARGET {
        each([&](__m512 a, __mmask16 mask, int64_t at, int64_t) TPX_BF16_TARGET {
          __m512 out = a;
          if constexpr (is_scaled) out = _mm512_mul_ps(alpha, out);
          if constexpr (reads_c) {
            out = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(mask, c + at), out);
          }
          _mm512_mask_storeu_ps(c + at, mask, out);
        });
      });
    });
    return;
  }
  // A bf16 C: f32 running sums until the last slice, rounded once.
  float* sums = pr.sums;
  if (stage == Stage::kFirst) {
    each([&](__m512 a, __mmask16 mask, int64_t, int64_t at)
             TPX_BF16_TARGET { _mm512_mask_storeu_ps(sums + at, mask, a); });
    return;
  }
  if (stage == Stage::kMiddle) {
    each([&](__m512 a, __mmask16 mask, int64_t, int64_t at) TPX_BF16_TARGET {
      _mm512_mask_storeu_ps(sums + at, mask,
                            _mm512_add_ps(a, _mm512_maskz_loadu_ps(mask, sums + at)));
    });
    return;
  }
  // Two accumulators of a row go to one vector of 32 bf16 values by one
  // vcvtne2ps2bf16 and one store: with a conversion and a half-vector store
  // each, attention's scores (16 k-pairs a block) ran 9% slower.
  uint16_t* c = static_cast<uint16_t*>(pr.c);
  auto each_pair = [&](auto&& value) TPX_BF16_TARGET {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; v += 2) {
        const int64_t at = (row + r) * ldc + col + 16 * v;
        const int64_t sum_at = (row + r) * sums_ld + col + 16 * v;
        const __mmask16 m0 = v == NV - 1 ? tail : kAll;
        const __m512 lo = value(acc[r][v], m0, at, sum_at);
        if (v + 1 < NV) {
          const __mmask16 m1 = v + 1 == NV - 1 ? tail : kAll;
          const __m512 hi = value(acc[r][v + 1], m1, at + 16, sum_at + 16);
          const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
          if (m1 == kAll) {
            _mm512_storeu_si512(c + at, both);
          } else {
            _mm512_mask_storeu_epi16(c + at, kAll | (__mmask32{m1} << 16), both);
          }
        } else {
          _mm256_mask_storeu_epi16(c + at, m0, (__m256i)_mm512_cvtneps_pbh(lo));
        }
      }
    }
  };
  WithConstant(stage == Stage::kLast, [&](auto adds_sums) TPX_BF16_TARGET {
    WithConstant(scaled, [&](auto is_scaled) TPX_BF16_TARGET {
      WithConstant(read_c, [&](auto reads_c) TPX_BF16_TARGET {
        each_pair([&](__m512 a, __mmask16 mask, int64_t at, int64_t sum_at) TPX_BF16_TARGET {
          __m512 out = a;
          if constexpr (adds_sums) {
            out = _mm512_add_ps(out, _mm512_maskz_loadu_ps(mask, sums + sum_at));
          }
          if constexpr (is_scaled) out = _mm512_mul_ps(alpha, out);
          if constexpr (reads_c) {
            const __m512i old = Widen(_mm256_maskz_loadu_epi16(mask, c + at));
            out = _mm512_fmadd_ps(beta, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, old, 16)),
                                  out);
          }
          return out;
        });
      });
    });
  });
}

// Rows per block for NV vectors of columns: as many as the 32 zmm registers
// allow (up to 24 accumulators), and at least enough for 16 accumulators,
// the fewest that keep vdpbf16ps's two pipes busy on Zen 5 (12 independent
// chains run 7% slower: a block with fewer waits on its accumulators every
// step). A panel of at most 32 columns (attention's dV, n = head size)
// therefore takes blocks of 2 * kMr rows, one of 16 columns 16 rows.
constexpr int64_t MaxRowsFor(int nv) { return nv == 1 ? 16 : nv == 2 ? 2 * kMr : kMr; }
constexpr int64_t MinRowsFor(int nv) {
  return std::min<int64_t>(MaxRowsFor(nv), (16 + nv - 1) / nv);
}

// The rows of the next block when `left` rows remain: full blocks, except
// that a remainder which would leave a last block below MinRowsFor is
// split into two near-equal blocks (128 rows at NV = 4: twenty of 6 and two
// of 4 rather than a last one of 2).
template <int NV>
int64_t NextBlockRows(int64_t left) {
  constexpr int64_t max_rows = MaxRowsFor(NV), min_rows = MinRowsFor(NV);
  if (left <= max_rows) return left;
  if (left < max_rows + min_rows) return (left + 1) / 2;
  return max_rows;
}

// Block<NV, rows, packs> for rows in [MR, MaxRowsFor(NV)], picked at run
// time.
template <int NV, int kPacks, int MR = 1>
void BlockRows(int64_t rows, const Product& pr, const BlockArgs& b) {
  if constexpr (MR <= MaxRowsFor(NV)) {
    if (rows == MR) return Block<NV, MR, kPacks>(pr, b);
    BlockRows<NV, kPacks, MR + 1>(rows, pr, b);
  }
}

// The block at (b.row, b.col) with NV vectors of columns and NextBlockRows
// rows before row_end. Returns the rows done.
template <int NV>
int64_t BlockOf(const Product& pr, const BlockArgs& b, int64_t row_end) {
  const int64_t rows = NextBlockRows<NV>(row_end - b.row);
  switch (b.packs) {
    case kPacksNone:
      BlockRows<NV, kPacksNone>(rows, pr, b);
      break;
    case kPacksA:
      BlockRows<NV, kPacksA>(rows, pr, b);
      break;
    case kPacksB:
      BlockRows<NV, kPacksB>(rows, pr, b);
      break;
    case kAInPlace:
      BlockRows<NV, kAInPlace>(rows, pr, b);
      break;
    case kAInPlace | kPacksB:
      BlockRows<NV, kAInPlace | kPacksB>(rows, pr, b);
      break;
    default:
      BlockRows<NV, kPacksBoth>(rows, pr, b);
      break;
  }
  return rows;
}

// BlockOf with as many 16-column vectors as C has at b.col (up to 4).
int64_t BlockAt(const Product& pr, const BlockArgs& b, int64_t row_end) {
  switch ((pr.n - b.col + 15) / 16) {
    case 1:
      return BlockOf<1>(pr, b, row_end);
    case 2:
      return BlockOf<2>(pr, b, row_end);
    case 3:
      return BlockOf<3>(pr, b, row_end);
    default:
      return BlockOf<4>(pr, b, row_end);
  }
}

// Packs pairs [p0, p0 + pairs) of a panel of a B stored [n, k] into `line`
// (pair p at line + (p - p0) * kPanel): a source row's pairs are already
// 32-bit words, so 16 of them from each of 16 rows make one transpose.
// Values past k and columns past n are zeros. Sixteen rows at a time, along
// k, each row's line kTransposeAhead transposes on prefetched: from
// memory, 64 rows a line at a time left the hardware's prefetchers behind
// (the products ran 2-6% slower).
constexpr int64_t kTransposeAhead = 4;
TPX_BF16_TARGET void PackTransposedB(const Product& pr, int64_t p0, int64_t pairs, int64_t panel,
                                     uint32_t* line) {
  const int64_t c0 = panel * kPanel, width = std::min(kPanel, pr.n - c0);
  const uint16_t* const b = pr.b;
  const int64_t ldb = pr.ldb, k = pr.k;
  for (int64_t j0 = 0; j0 < width; j0 += 16) {
    // The tile's rows of B (columns of op(B)) inside the panel.
    const uint16_t* const first = b + (c0 + j0) * ldb + 2 * p0;
    const int64_t tile_rows = std::min<int64_t>(16, width - j0);
    for (int64_t q0 = 0; q0 < pairs; q0 += 16) {
      const int64_t values = std::min<int64_t>(32, k - 2 * (p0 + q0));
      if (q0 + 16 * kTransposeAhead < pairs) {
        for (int64_t i = 0; i < tile_rows; ++i) {
          _mm_prefetch(reinterpret_cast<const char*>(first + i * ldb + 2 * q0 +
                                                     32 * kTransposeAhead),
                       _MM_HINT_T0);
        }
      }
      __m512 rows[16];  // 32-bit words: the transpose moves bits, not floats
      if (values == 32 && tile_rows == 16) {
        // Sixteen whole rows of 16 pairs: plain loads and no tests. Loaded
        // by the masked, tested loop below, the rows went through the
        // stack: a pack of attention's scores took 1.5x as long.
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) rows[i] = _mm512_loadu_ps(first + i * ldb + 2 * q0);
      } else {
        const __mmask32 mask = values >= 32 ? ~__mmask32{0} : (__mmask32{1} << values) - 1;
        for (int i = 0; i < 16; ++i) {
          const uint16_t* src = first + i * ldb + 2 * q0;
          rows[i] = i < tile_rows ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(mask, src))
                                  : _mm512_setzero_ps();
        }
      }
      cpu::Transpose16x16(rows);
      const int64_t lines = std::min<int64_t>(16, pairs - q0);
      uint32_t* const out = line + q0 * kPanel + j0;
      if (lines == 16) {
#pragma GCC unroll 16
        for (int q = 0; q < 16; ++q) _mm512_store_ps(out + q * kPanel, rows[q]);
      } else {
        for (int64_t q = 0; q < lines; ++q) _mm512_store_ps(out + q * kPanel, rows[q]);
      }
    }
  }
}

// One product on the calling thread, with its own buffers: bp for a B
// slice, ap for an A slice, pr.sums for a bf16 C's running sums.
void RunProduct(const Product& pr, uint32_t* bp, uint32_t* ap) {
  const int64_t pairs = pr.Pairs(), blocks = pr.Blocks(), panels = pr.Panels();
  // Slices in order: (panel group, first k-pair).
  struct Slice {
    int64_t g0, g1, p0, pairs;
  };
  const int64_t group_panels = pr.GroupPanels(), chunk_blocks = pr.ChunkBlocks();
  auto slice_at = [&](int64_t g0, int64_t p0) {
    return Slice{g0, std::min(panels, g0 + group_panels), p0, std::min(pr.slice_pairs, pairs - p0)};
  };
  for (Slice sl = slice_at(0, 0); sl.g0 < panels;) {
    const bool first = sl.p0 == 0, last = sl.p0 + sl.pairs == pairs && !pr.continues;
    Stage stage = first && last ? Stage::kOnly
                  : first       ? Stage::kFirst
                  : last        ? Stage::kLast
                                : Stage::kMiddle;
    // Where this slice's sums go.
    Product out = pr;
    if (pr.slice_stride > 0) {
      out.c = static_cast<float*>(pr.c) + sl.p0 / pr.slice_pairs * pr.slice_stride;
      stage = Stage::kOnly;
    }
    const int64_t whole = WholePairs(pr, sl.p0, sl.pairs);
    for (int64_t b0 = 0; b0 < blocks; b0 += chunk_blocks) {
      const int64_t r0 = b0 * kMr, row_end = std::min(pr.m, (b0 + chunk_blocks) * kMr);
      for (int64_t panel = sl.g0; panel < sl.g1; ++panel) {
        const int64_t c0 = panel * kPanel;
        uint32_t* const panel_bp = bp + (panel - sl.g0) * pr.PanelStride();
        if (pr.b_cols && b0 == 0) PackTransposedB(pr, sl.p0, sl.pairs, panel, panel_bp);
        // One BlockArgs for the panel's blocks, updated per block: a fresh
        // one was zeroed by a `rep stos` each time (2-3% of short blocks).
        BlockArgs b;
        b.bp = panel_bp;
        b.pairs = sl.pairs;
        b.col = c0;
        b.stage = stage;
        for (int64_t row = r0; row < row_end;) {
          b.ap = ap + (row - r0);
          b.row = row;
          b.packs = kPacksNone;
          // A plain A is read in place by every block; a transposed one is
          // packed by the chunk's first block on the slice's first panel.
          // The first chunk's first block on each panel packs the panel of
          // a plain B.
          if (pr.a_rows) {
            b.packs |= kAInPlace;
            b.a_src = SourceRows{pr.a + row * pr.lda + 2 * sl.p0, pr.lda, whole, 0};
          } else if (panel == sl.g0 && row == r0) {
            b.packs |= kPacksA;
            b.a_src = SourceRows{pr.a + 2 * sl.p0 * pr.lda + r0, pr.lda, whole, row_end - r0};
          }
          if (b0 == 0 && row == r0 && !pr.b_cols) {
            b.packs |= kPacksB;
            b.b_src = SourceRows{pr.b + 2 * sl.p0 * pr.ldb + c0, pr.ldb, whole,
                                 std::min(kPanel, pr.n - c0)};
          }
          row += BlockAt(out, b, row_end);
        }
      }
    }
    sl = sl.p0 + sl.pairs < pairs ? slice_at(sl.g0, sl.p0 + sl.pairs)
                                  : slice_at(sl.g0 + group_panels, 0);
  }
}

// Part t of nt of a product, for one thread: a range of whole blocks of
// rows or of whole panels of columns, whichever of m and n is larger. Each
// thread packs its part of the split operand and all of the other, so
// splitting the larger one packs the least.
Product Part(const Product& pr, int t, int nt) {
  Product part = pr;
  const size_t c_size = pr.c_bf16 ? 2 : 4;
  if (pr.n > pr.m) {
    const int64_t c0 = std::min(pr.n, pr.Panels() * t / nt * kPanel);
    const int64_t c1 = std::min(pr.n, pr.Panels() * (t + 1) / nt * kPanel);
    part.b += pr.b_cols ? c0 * pr.ldb : c0;
    part.n = c1 - c0;
    part.c = static_cast<char*>(pr.c) + c0 * c_size;
    return part;
  }
  const int64_t r0 = std::min(pr.m, pr.Blocks() * t / nt * kMr);
  const int64_t r1 = std::min(pr.m, pr.Blocks() * (t + 1) / nt * kMr);
  part.a += pr.a_rows ? r0 * pr.lda : r0;
  part.m = r1 - r0;
  part.c = static_cast<char*>(pr.c) + r0 * pr.ldc * c_size;
  return part;
}

// The reduction split between threads, for few products with a small C and
// a long k: splitting rows or columns has every thread pack all of the
// other operand, splitting k has each pack a 1/threads share of both and
// costs one pass over C and the slices' sums. Since each panel and chunk is
// packed by the block that first multiplies it, the duplicated packing
// costs little while the operands stay in L2; measured at 2 threads in
// 256-pair slices, k wins only for a C of at most 2k (and 8192) values
// with k >= 2048 (a tiny C): 32 x 32 (k 2048-4096) +4-14%, 64 x 64 and
// 100 x 32 (k 4096-8192) +5-10%, 48 x 16 (k 16384) +22%; even at 64 x 64
// (k 2048) and 128 x 128 or 128 x 64 (k 4096-8192); rows or columns win
// for 128 x 64 (k 2048) +7%, 96 x 96 +12%, 32 x 32 (k 1024) +5%. With a
// transposed A, in two slices of half of k each (SplitSlicePairs), k also
// wins up to 16384 values: 128 x 2048 x 128 and 128 x 2048 x 64 (the GPT
// example's projection weight gradients) +3-16% and +3-19%, 128 x 4096 x
// 128 +8-15%, within +-3% on one thread; at 192 x 128 to 384 x 128
// (k 2048) rows still win by 2-7%. With a plain A, two slices lost:
// 128 x 2048 x 128 and 128 x 2048 x 64 -7-12% with B plain, -2-4% on one
// thread with B transposed. Every thread gets whole slices.
constexpr int64_t kMinSplitK = 2048, kMaxTinyC = 8192, kMaxSplitC = 16384;
bool TinyC(int64_t m, int64_t n, int64_t k) { return m * n <= std::min(kMaxTinyC, 2 * k); }
bool SmallCLongReduction(bool trans_a, int64_t m, int64_t n, int64_t k) {
  return k >= kMinSplitK && (TinyC(m, n, k) || (trans_a && m * n <= kMaxSplitC));
}
// k-pairs per slice of a small C's long reduction: kSlicePairs for a tiny
// C (which as many threads as slices share), else half of k in whole
// lines of 16 pairs (two slices for two threads: 256-pair slices gained
// 128 x 2048 x 128 nothing on two threads and cost it 3-4% on one).
int64_t SplitSlicePairs(int64_t m, int64_t n, int64_t k) {
  if (TinyC(m, n, k)) return kSlicePairs;
  const int64_t half = ((k + 1) / 2 + 1) / 2;
  return std::clamp<int64_t>((half + 15) / 16 * 16, kSlicePairs, kLongSlicePairs);
}
// k-pairs per slice of a product of this shape: all of k, up to
// kLongSlicePairs, but SplitSlicePairs where threads may split the
// reduction (C's bits then do not depend on their number). A transposed
// A's slices are never shorter than kSlicePairs: its buffers keep the
// sizes they were measured with for short k (cut to attention's dV's 64
// pairs, they ran it 12-15% slower on two threads; cause unmeasured). Nor
// are they longer where C has one panel, whose blocks alone read each
// chunk of A: 128 x 2048 x 64, split by rows, ran 2-4% slower on two
// threads with one long slice (even on one), 128 x 2048 x 128 even. Where
// a slice of B spans all of n, kMaxWideSliceWords bounds it.
int64_t SlicePairs(bool trans_a, bool large_c, int64_t m, int64_t n, int64_t k) {
  if (SmallCLongReduction(trans_a, m, n, k)) return SplitSlicePairs(m, n, k);
  const int64_t pairs = (k + 1) / 2;
  if (!trans_a) return std::clamp<int64_t>(pairs, 1, kLongSlicePairs);
  if (n <= kPanel) return kSlicePairs;
  int64_t most = kLongSlicePairs;
  if (large_c) {
    const int64_t words_per_pair = (n + kPanel - 1) / kPanel * kPanel;  // of all the panels
    most = std::clamp<int64_t>(kMaxWideSliceWords / words_per_pair / 16 * 16, kSlicePairs, most);
  }
  return std::clamp<int64_t>(pairs, kSlicePairs, most);
}

bool SplitReduction(const Product& pr, int threads) {
  return threads >= 2 && pr.Slices() >= threads &&
         SmallCLongReduction(!pr.a_rows, pr.m, pr.n, pr.k);
}

// Thread t's first slice when nt threads share `slices`.
int64_t SliceBefore(int64_t slices, int t, int nt) { return slices * t / nt; }

// The product's slices [s0, s1) as one product of its own.
Product SlicesOf(const Product& pr, int64_t s0, int64_t s1) {
  Product part = pr;
  const int64_t k0 = 2 * pr.slice_pairs * s0;
  part.a += pr.a_rows ? k0 : k0 * pr.lda;
  part.b += pr.b_cols ? k0 : k0 * pr.ldb;
  part.k = std::min(pr.k, 2 * pr.slice_pairs * s1) - k0;
  return part;
}

// Rows [r0, r1) of C after a split reduction: thread 0 left slices
// [0, s_first) applied to C (f32) or to running sums (bf16 C), and
// `slice_sums` holds each later slice's own [m, n] sums, `slice_words` apart.
// Adds them in slice order with the operations RunProduct's stages use, so
// C has the bits it has without the split, at any thread count.
TPX_BF16_TARGET void FinishSplitRows(const Product& pr, const float* slice_sums,
                                     int64_t slice_words, int64_t later_slices, int64_t r0,
                                     int64_t r1) {
  const __m512 alpha = _mm512_set1_ps(pr.alpha), beta = _mm512_set1_ps(pr.beta);
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = 0; c < pr.n; c += 16) {
      const __mmask16 mask = FirstLanes(pr.n - c);
      const float* later = slice_sums + r * pr.n + c;
      const int64_t offset = r * pr.ldc + c;
      if (!pr.c_bf16) {
        float* cp = static_cast<float*>(pr.c) + offset;
        __m512 out = _mm512_maskz_loadu_ps(mask, cp);
        for (int64_t j = 0; j < later_slices; ++j) {
          out = _mm512_fmadd_ps(alpha, _mm512_maskz_loadu_ps(mask, later + j * slice_words), out);
        }
        _mm512_mask_storeu_ps(cp, mask, out);
        continue;
      }
      __m512 sum = _mm512_maskz_loadu_ps(mask, pr.sums + r * pr.n + c);
      for (int64_t j = 0; j < later_slices; ++j) {
        sum = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, later + j * slice_words), sum);
      }
      uint16_t* cp = static_cast<uint16_t*>(pr.c) + offset;
      __m512 out = _mm512_mul_ps(alpha, sum);
      if (pr.beta != 0.0f) {
        const __m512i old = Widen(_mm256_maskz_loadu_epi16(mask, cp));
        out =
            _mm512_fmadd_ps(beta, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, old, 16)), out);
      }
      _mm256_mask_storeu_epi16(cp, mask, (__m256i)_mm512_cvtneps_pbh(out));
    }
  }
}

}  // namespace

bool Bf16GemmApplies() { return CpuHasAvx512Bf16(); }

absl::Status Bf16Gemm(bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
                      float alpha, const uint16_t* a, int64_t lda, int64_t stride_a,
                      const uint16_t* b, int64_t ldb, int64_t stride_b, float beta, DType c_dtype,
                      void* c, int64_t ldc, int64_t stride_c) {
  if (trans_a && trans_b) {
    return absl::InvalidArgumentError("Bf16Gemm: A and B both transposed (oneDNN computes those)");
  }
  if (batch <= 0 || m <= 0 || n <= 0) return absl::OkStatus();
  const size_t c_size = SizeOf(c_dtype);
  constexpr int64_t kMaxL2C = int64_t{1} << 18;  // f32 values (1 MiB), for Product::large_c
  const bool large_c = m * n > kMaxL2C;
  const int64_t slice_pairs = SlicePairs(trans_a, large_c, m, n, k);
  auto product = [&](int64_t i, float* sums) {
    Product pr{m,
               n,
               k,
               alpha,
               beta,
               a + i * stride_a,
               lda,
               b + i * stride_b,
               ldb,
               c_dtype == DType::kBF16,
               static_cast<char*>(c) + i * stride_c * c_size,
               ldc,
               sums};
    pr.large_c = large_c;
    pr.a_rows = !trans_a;
    pr.slice_pairs = slice_pairs;
    pr.b_cols = trans_b;
    return pr;
  };
  const int threads = omp_in_parallel() ? 1 : std::max(1, omp_get_max_threads());
  // Many products: each thread multiplies whole products; few: each product
  // is split into one part per thread. Either way a thread works alone with
  // its own buffers, without waiting on the others (which a shared host
  // may have descheduled).
  const bool per_thread = batch >= threads;
  const Product first = product(0, nullptr);  // every product has its shape
  const bool split_k = !per_thread && SplitReduction(first, threads);
  // Per thread: a B slice, a transposed A's slice and the sums, in words;
  // every piece a whole number of cache lines.
  const int64_t b_words = first.GroupPanels() * first.PanelStride();
  const int64_t a_words = trans_a ? slice_pairs * first.ChunkRows() : 0;
  // A bf16 C's running sums; with split_k also each later slice's sums.
  const int64_t mn_words = (m * n + 15) / 16 * 16;
  const int64_t sum_words = split_k || first.NeedsSums() ? mn_words : 0;
  const int64_t words = b_words + a_words + sum_words;
  const int64_t later_slices =
      split_k ? first.Slices() - SliceBefore(first.Slices(), 1, threads) : 0;
  const size_t bytes =
      sizeof(uint32_t) * static_cast<size_t>(threads * words + later_slices * mn_words);
  CpuAllocator& alloc = GetCpuAllocator();
  uint32_t* scratch = static_cast<uint32_t*>(alloc.Allocate(bytes));
  if (scratch == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("Gemm: no memory for ", bytes,
                                                     " bytes of packed bf16 operands (m=", m,
                                                     " n=", n, " k=", k, ")"));
  }
  auto run = [&](const Product& pr, int t) {
    uint32_t* buf = scratch + t * words;
    Product own = pr;
    own.sums = reinterpret_cast<float*>(buf + b_words + a_words);
    RunProduct(own, buf, buf + b_words);
  };
  if (threads == 1) {
    for (int64_t i = 0; i < batch; ++i) run(product(i, nullptr), 0);
  } else if (per_thread) {
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      for (int64_t i = batch * t / nt; i < batch * (t + 1) / nt; ++i) run(product(i, nullptr), t);
    }
  } else if (split_k) {
    // Thread 0 takes the first slices on C itself; every later slice goes
    // to its own f32 sums, added in slice order once all are done.
    float* slice_sums = reinterpret_cast<float*>(scratch + threads * words);
    for (int64_t i = 0; i < batch; ++i) {
#pragma omp parallel num_threads(threads)
      {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const Product pr = product(i, reinterpret_cast<float*>(scratch + b_words + a_words));
        const int64_t slices = pr.Slices(), first_later = SliceBefore(slices, 1, nt);
        uint32_t* buf = scratch + t * words;
        if (t == 0) {
          Product head = SlicesOf(pr, 0, first_later);
          // Always: FinishSplitRows finishes C, also when the team has
          // one thread and no later slices.
          head.continues = true;
          RunProduct(head, buf, buf + b_words);
        }
        const int64_t s0 = std::max(SliceBefore(slices, t, nt), first_later);
        const int64_t s1 = SliceBefore(slices, t + 1, nt);
        if (s1 > s0) {
          Product own = SlicesOf(pr, s0, s1);
          own.alpha = 1.0f;
          own.beta = 0.0f;
          own.c_bf16 = false;
          own.c = slice_sums + (s0 - first_later) * mn_words;
          own.ldc = n;
          own.slice_stride = mn_words;
          RunProduct(own, buf, buf + b_words);
        }
#pragma omp barrier
        FinishSplitRows(pr, slice_sums, mn_words, slices - first_later, m * t / nt,
                        m * (t + 1) / nt);
      }
    }
  } else {
    for (int64_t i = 0; i < batch; ++i) {
#pragma omp parallel num_threads(threads)
      {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const Product part = Part(product(i, nullptr), t, nt);
        if (part.m > 0 && part.n > 0) run(part, t);
      }
    }
  }
  alloc.Deallocate(scratch, bytes);
  return absl::OkStatus();
}

}  // namespace tpx
