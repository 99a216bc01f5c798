// CPU DeviceKernels: causal self-attention forward and backward
// (core/attention.h). A task is one batch row and a group of its heads
// (all of them when there are at least as many batch rows as threads);
// tasks are split over the kernel threads.
//
// A task reads its q, k and v columns straight from the [t, b, 3 * h * d]
// projection and writes its ctx columns of [t, b, h * d] (its dq, dk, dv
// columns of the gradient): no layout copies of whole tensors. f32 is read
// and written in place, the tile stepping a whole row of qkv between time
// steps; bf16/f16 are first widened into per-head f32 [t, d] blocks in one
// sequential pass and the results rounded back the same way. Only the
// causal part of every product is computed: score row block [i0, i0 + r)
// needs keys below i0 + r (rounded up to 16 columns), P v and dS k reduce
// over those keys only, and P^T dO and dS^T q over the queries from the
// block's first row on. Softmax statistics and accumulation are f32. The
// forward keeps two statistics per row of P (SoftmaxChunk), and the
// backward recomputes each chunk's scores and P from them with the
// forward's own code (ScoresChunk, RecomputeChunk), so P is the forward's
// bit for bit without going to memory and back.
//
// The products run on one register-blocked tile (AVX-512, chosen at run
// time, as core/small_gemm.cc does for whole products) or a portable loop
// (other CPUs, or TPX_ATTENTION_ISA=baseline).
//
// bf16 on a CPU with AVX-512 BF16 and no AMX (ActiveIsa) takes a second
// form: operands stay bf16, as pairs consecutive along the reduction index
// (one 32-bit word, as vdpbf16ps multiplies them). With an even head_dim a head's row of qkv is
// whole pairs already, so q, k and v are read in place like f32's (an odd
// head_dim is packed first); the results are rounded into ctx or dqkv as
// the tile stores them. P and dS are rounded to bf16 for the products that
// consume them (as the composed bf16 ops do), and the tile accumulates in
// f32. On a CPU with AMX the same pair products run on AMX tiles (the AMX
// form) where t and head_dim are multiples of 32, so that every product is
// whole 16 x 16 tiles; there dS^T and P^T are transposed for their products
// (a tile takes A only with its pairs along rows). Elsewhere (or with
// TPX_ATTENTION_ISA=avx512 / baseline) bf16 is widened to f32 on packing
// and runs the f32 form.
//
// The blocking depends only on t and head_dim, so results do not depend on
// the thread count or on how many heads a rank holds.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/amx_tile_config.h"
#include "core/cpu/bf16_convert.h"
#include "core/cpu/cpu_kernels.h"
#include "core/cpu/loops.h"
#include "core/cpu/parallel.h"
#include "core/cpu/transpose16x16.h"
#include "core/cpu/vec_math.h"
#include "core/cpu/vec_math_avx512.h"
#include "core/cpu_features.h"
#include "core/lane_mask.h"

namespace tpx::cpu {
namespace {

// The pair form's functions (ActiveIsa checks the CPU for all of these).
#define TPX_PAIR_TARGET TPX_AVX512BF16_TARGET

constexpr int64_t kLanes = 16;     // floats per AVX-512 vector
constexpr int64_t kMaxCols = 64;   // columns per tile (four vectors)
// Score rows kept in L1 between their products: kRowChunk, or the AMX
// form's kAmxRowChunk (whole 16-row tiles, and band edges on whole 32-key
// steps); kMaxRowChunk bounds both.
constexpr int64_t kRowChunk = 24;
constexpr int64_t kAmxRowChunk = 32;
constexpr int64_t kMaxRowChunk = 32;
// Operands read in place from qkv (f32) have rows a whole row of qkv apart:
// every row on its own page (the hardware prefetchers stop at pages) and
// all of a head's rows in the same L1 set (8 ways). Rows kFarStride floats
// or more apart are asked for explicitly where a wait on them shows: the
// next row block's rows of a product's A and C, and (portable transpose)
// kAheadRows rows ahead, few enough that the rows in flight and the one in
// use fit the set's ways. A tile asking for B's next rows ran slower: the
// prefetches took load slots and pushed out rows still in use.
constexpr int64_t kFarStride = 1024;
constexpr int64_t kAheadRows = 4;

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Asks for the cache line holding p, to read it or to write it (prefetchw
// is not in the baseline ISA; on one socket, a line read exclusively is
// written without another trip). An asm statement: GCC 12 deletes a loop
// whose only statement is __builtin_prefetch.
inline void PrefetchLine(const void* p) {
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
}

// Which reduction indices p row block [r0, r0 + rows) of a product uses,
// given that op(A) is zero outside them (causal P and dS).
enum class Band {
  kAll,
  kUpTo,  // p < r0 + rows: A's row r is zero beyond column r
  kFrom,  // p >= r0: A's row r is zero before column r
};

// C[rows, w] = op(A)[rows, k] B[k, w], f32 row-major, for rows <= the
// ISA's rows_per_tile(ceil(w / 16)) and w <= kMaxCols. op(A)'s element (r, p)
// is a[r * ars + p * aps]; B's rows are ldb apart.
using TileFn = void (*)(int64_t rows, int64_t w, int64_t k, const float* a, int64_t ars,
                        int64_t aps, const float* b, int64_t ldb, float* c, int64_t ldc);

// Two bf16 values consecutive along a product's reduction index: the low
// half is the even index.
using Pair = uint32_t;

// As TileFn on pairs: op(A)'s pair (r, pp) is a[r * ars + pp * aps], B's
// pair row pp (reduction indices 2pp, 2pp + 1 of every column) is b[pp *
// ldb + j], and kp counts pairs. C is f32, or bf16 (rounded results).
template <typename C>
using PairTileOf = void (*)(int64_t rows, int64_t w, int64_t kp, const Pair* a, int64_t ars,
                            int64_t aps, const Pair* b, int64_t ldb, C* c, int64_t ldc);
using PairTileFn = PairTileOf<float>;
using PairTileBf16Fn = PairTileOf<BF16>;

// xt[d, tp] = x[t, d]^T for 32-bit elements (floats, or pairs of bf16),
// x's rows ldx apart; zero in columns [t, tp), tp a multiple of 16.
using TransposeFn = void (*)(const void* x, int64_t ldx, int64_t t, int64_t d, int64_t tp,
                             void* xt);

// x[0..len) = Exp(scale * x - mx) in place, x[len..n) = 0, n a multiple of
// 16 (a row of P before its scaling).
using ExpRowFn = void (*)(float* x, int64_t len, int64_t n, float scale, float mx);

struct Isa {
  TileFn tile;
  int (*rows_per_tile)(int64_t vectors);
  TransposeFn transpose;
  ExpRowFn exp_row;
  PairTileFn pair_tile = nullptr;  // null: bf16 runs the f32 form
  PairTileBf16Fn pair_tile_bf16 = nullptr;
  int64_t row_chunk = kRowChunk;
  // The AMX form's pair tiles: band edges on whole steps of this many
  // reduction elements (op(A) is zero there, as outside the band); op(A)
  // only with its pairs along rows (aps 1), so the transposed products take
  // A transposed first; and the tile configuration, loaded by each kernel
  // thread before its products and released after them.
  int64_t band_step = 1;
  bool a_rows_only = false;
  void (*begin_tiles)() = nullptr;
  void (*end_tiles)() = nullptr;
};

// ---- AVX-512 ----

// Rows per tile for NV vectors per row: NV * MR accumulators in at most 28
// of the 32 zmm registers.
constexpr int Avx512RowsFor(int64_t nv) { return nv == 1 ? 14 : nv == 2 ? 12 : nv == 3 ? 8 : 6; }

// Every loop over the MR x NV accumulators is fully unrolled: a loop left
// rolled makes GCC keep the array in memory and store it every step.

// Stores the accumulators to C's rows, the last vector of each under
// `last`. A masked store does not forward its data to a later load, which
// then waits for the store to retire: the softmax rows read the scores back
// whole vectors at a time right after, so a full mask stores whole vectors.
template <int MR, int NV>
TPX_AVX512F_TARGET inline void StoreTile(const __m512 (&acc)[MR][NV], float* c, int64_t ldc,
                                         __mmask16 last) {
  const bool whole = last == 0xffff;
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* dst = c + r * ldc + kLanes * v;
      if (v < NV - 1 || whole) {
        _mm512_storeu_ps(dst, acc[r][v]);
      } else {
        _mm512_mask_storeu_ps(dst, last, acc[r][v]);
      }
    }
  }
}

// As StoreTile, rounding to bf16 on the way as FloatToBF16Array does (the
// pair form's results go straight into the bf16 tensor): same bits as
// rounding the f32 tile.
template <int MR, int NV>
TPX_PAIR_TARGET inline void StoreTile(const __m512 (&acc)[MR][NV], BF16* c, int64_t ldc,
                                      __mmask16 last) {
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      StoreBF16Lanes(c + r * ldc + kLanes * v, acc[r][v],
                     v < NV - 1 ? static_cast<__mmask16>(0xffff) : last);
    }
  }
}

// kWhole: the last of the NV vectors is whole (last == 0xffff), so B's rows
// load without a mask (the mask stayed in memory, reloaded every step).
// A's rows are addressed from one pointer per four rows plus offsets of 0,
// 1, 2 and 3 rows: one pointer and one offset per row made GCC spill the
// offsets of a 12-row tile to the stack.
template <int MR, int NV, bool kWhole>
TPX_AVX512F_TARGET inline void Avx512Tile(int64_t k, const float* a, int64_t ars, int64_t aps,
                                          const float* b, int64_t ldb, float* c, int64_t ldc,
                                          __mmask16 last) {
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  constexpr int kQuads = (MR + 3) / 4;
  const float* aq[kQuads];
#pragma GCC unroll 4
  for (int q = 0; q < kQuads; ++q) aq[q] = a + 4 * q * ars;
  for (int64_t p = 0; p < k; ++p) {
    __m512 bv[NV];
    const float* bp = b + p * ldb;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      bv[v] = v == NV - 1 && !kWhole ? _mm512_maskz_loadu_ps(last, bp + kLanes * v)
                                     : _mm512_loadu_ps(bp + kLanes * v);
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(aq[r / 4][r % 4 * ars]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
#pragma GCC unroll 4
    for (int q = 0; q < kQuads; ++q) aq[q] += aps;
  }
  StoreTile<MR, NV>(acc, c, ldc, kWhole ? static_cast<__mmask16>(0xffff) : last);
}

// Picks the tile for `rows` (1 .. R) rows at compile time.
template <int NV, int R, bool kWhole>
TPX_AVX512F_TARGET void Avx512Rows(int64_t rows, int64_t k, const float* a, int64_t ars,
                                   int64_t aps, const float* b, int64_t ldb, float* c, int64_t ldc,
                                   __mmask16 last) {
  if constexpr (R >= 1) {
    if (rows == R) {
      Avx512Tile<R, NV, kWhole>(k, a, ars, aps, b, ldb, c, ldc, last);
    } else {
      Avx512Rows<NV, R - 1, kWhole>(rows, k, a, ars, aps, b, ldb, c, ldc, last);
    }
  }
}

template <int NV>
TPX_AVX512F_TARGET void Avx512RowsOf(int64_t rows, int64_t k, const float* a, int64_t ars,
                                     int64_t aps, const float* b, int64_t ldb, float* c,
                                     int64_t ldc, __mmask16 last) {
  if (last == 0xffff) {
    Avx512Rows<NV, Avx512RowsFor(NV), true>(rows, k, a, ars, aps, b, ldb, c, ldc, last);
  } else {
    Avx512Rows<NV, Avx512RowsFor(NV), false>(rows, k, a, ars, aps, b, ldb, c, ldc, last);
  }
}

TPX_AVX512F_TARGET void Avx512TileAny(int64_t rows, int64_t w, int64_t k, const float* a,
                                      int64_t ars, int64_t aps, const float* b, int64_t ldb,
                                      float* c, int64_t ldc) {
  const int64_t nv = (w + kLanes - 1) / kLanes;
  const __mmask16 last = FirstLanes(w - (nv - 1) * kLanes);
  switch (nv) {
    case 1: return Avx512RowsOf<1>(rows, k, a, ars, aps, b, ldb, c, ldc, last);
    case 2: return Avx512RowsOf<2>(rows, k, a, ars, aps, b, ldb, c, ldc, last);
    case 3: return Avx512RowsOf<3>(rows, k, a, ars, aps, b, ldb, c, ldc, last);
    default: return Avx512RowsOf<4>(rows, k, a, ars, aps, b, ldb, c, ldc, last);
  }
}

int Avx512RowsPerTile(int64_t nv) { return Avx512RowsFor(nv); }

// TransposeFn in 16 x 16 blocks: a block's 16 row loads go out together
// (the scalar loop had a few rows' loads in flight behind its scattered
// stores), and the rows past t load as zeros, which are the padding.
TPX_AVX512F_TARGET void Avx512Transpose(const void* xv, int64_t ldx, int64_t t, int64_t d,
                                        int64_t tp, void* xtv) {
  const float* x = static_cast<const float*>(xv);
  float* xt = static_cast<float*>(xtv);
  for (int64_t i0 = 0; i0 < tp; i0 += kLanes) {
    const int64_t rows = std::min(kLanes, t - i0);
    // Rows far apart (in place in qkv) are each on a page of their own:
    // the next group's rows are asked for while this one is transposed.
    if (ldx >= kFarStride) {
      for (int64_t i = i0 + kLanes; i < std::min(t, i0 + 2 * kLanes); ++i) {
        for (int64_t j = 0; j < d; j += kLanes) PrefetchLine(x + i * ldx + j);
      }
    }
    for (int64_t j0 = 0; j0 < d; j0 += kLanes) {
      const int64_t cols = std::min(kLanes, d - j0);
      const __mmask16 mask = FirstLanes(cols);
      __m512 r[16];
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k) {
        r[k] = k < rows ? _mm512_maskz_loadu_ps(mask, x + (i0 + k) * ldx + j0)
                        : _mm512_setzero_ps();
      }
      Transpose16x16(r);
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k) {
        if (k < cols) _mm512_storeu_ps(xt + (j0 + k) * tp + i0, r[k]);
      }
    }
  }
}

// ExpRowFn in AVX-512 intrinsics: Exp16 (core/cpu/vec_math_avx512.h) is
// Exp bit for bit at about two thirds of the instructions of the
// compiler's vectorisation, and the products' rows are whole vectors.
TPX_AVX512F_TARGET void Avx512ExpRow(float* x, int64_t len, int64_t n, float scale, float mx) {
  const __m512 s = _mm512_set1_ps(scale), m = _mm512_set1_ps(mx);
  for (int64_t j = 0; j < n; j += kLanes) {
    const __mmask16 lanes = FirstLanes(len - j);
    const __m512 e = Exp16(_mm512_fmsub_ps(s, _mm512_loadu_ps(x + j), m));
    _mm512_storeu_ps(x + j, _mm512_maskz_mov_ps(lanes, e));
  }
}

// ---- AVX-512 BF16: the same tile on pairs, one vdpbf16ps per pair of
// reduction steps (two products per f32 lane, f32 accumulation). Same
// register budget as the f32 tile, so the same rows per tile.

// As the f32 tile: A from one pointer per four rows, B unmasked when whole.
template <int MR, int NV, bool kWhole, typename C>
TPX_PAIR_TARGET inline void Avx512Bf16Tile(
    int64_t kp, const Pair* a, int64_t ars, int64_t aps, const Pair* b, int64_t ldb, C* c,
    int64_t ldc, __mmask16 last) {
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  constexpr int kQuads = (MR + 3) / 4;
  const Pair* aq[kQuads];
#pragma GCC unroll 4
  for (int q = 0; q < kQuads; ++q) aq[q] = a + 4 * q * ars;
  for (int64_t p = 0; p < kp; ++p) {
    __m512bh bv[NV];
    const Pair* bp = b + p * ldb;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      bv[v] = (__m512bh)(v == NV - 1 && !kWhole ? _mm512_maskz_loadu_epi32(last, bp + kLanes * v)
                                                : _mm512_loadu_si512(bp + kLanes * v));
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(aq[r / 4][r % 4 * ars]));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
#pragma GCC unroll 4
    for (int q = 0; q < kQuads; ++q) aq[q] += aps;
  }
  StoreTile<MR, NV>(acc, c, ldc, kWhole ? static_cast<__mmask16>(0xffff) : last);
}

template <int NV, int R, bool kWhole, typename C>
TPX_PAIR_TARGET void Avx512Bf16Rows(
    int64_t rows, int64_t kp, const Pair* a, int64_t ars, int64_t aps, const Pair* b,
    int64_t ldb, C* c, int64_t ldc, __mmask16 last) {
  if constexpr (R >= 1) {
    if (rows == R) {
      Avx512Bf16Tile<R, NV, kWhole>(kp, a, ars, aps, b, ldb, c, ldc, last);
    } else {
      Avx512Bf16Rows<NV, R - 1, kWhole>(rows, kp, a, ars, aps, b, ldb, c, ldc, last);
    }
  }
}

template <int NV, typename C>
TPX_PAIR_TARGET void Avx512Bf16RowsOf(
    int64_t rows, int64_t kp, const Pair* a, int64_t ars, int64_t aps, const Pair* b,
    int64_t ldb, C* c, int64_t ldc, __mmask16 last) {
  if (last == 0xffff) {
    Avx512Bf16Rows<NV, Avx512RowsFor(NV), true>(rows, kp, a, ars, aps, b, ldb, c, ldc, last);
  } else {
    Avx512Bf16Rows<NV, Avx512RowsFor(NV), false>(rows, kp, a, ars, aps, b, ldb, c, ldc, last);
  }
}

template <typename C>
TPX_PAIR_TARGET void Avx512Bf16TileAny(
    int64_t rows, int64_t w, int64_t kp, const Pair* a, int64_t ars, int64_t aps, const Pair* b,
    int64_t ldb, C* c, int64_t ldc) {
  const int64_t nv = (w + kLanes - 1) / kLanes;
  const __mmask16 last = FirstLanes(w - (nv - 1) * kLanes);
  switch (nv) {
    case 1: return Avx512Bf16RowsOf<1>(rows, kp, a, ars, aps, b, ldb, c, ldc, last);
    case 2: return Avx512Bf16RowsOf<2>(rows, kp, a, ars, aps, b, ldb, c, ldc, last);
    case 3: return Avx512Bf16RowsOf<3>(rows, kp, a, ars, aps, b, ldb, c, ldc, last);
    default: return Avx512Bf16RowsOf<4>(rows, kp, a, ars, aps, b, ldb, c, ldc, last);
  }
}

// ---- AMX (Intel Xeon from Sapphire Rapids on): the pair products on
// tiles, one tdpbf16ps multiplying a 16 x 16-pair block of A by a 16-pair x
// 16 block of B into a 16 x 16 f32 block of C. Every tile has the same
// shape, 16 rows of 64 bytes: tiles 0-3 hold up to four 16-column blocks of
// C, tile 4 A's block, tiles 5-7 B's. The form needs whole tiles: 16 rows,
// columns in 16s, the reduction in steps of 16 pairs (32 elements), and A
// with its pairs along rows; the callers take it only for t and head_dim
// multiples of 32 (PairIsa), where every product is whole tiles.

#define TPX_AMX_TARGET \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))

constexpr int64_t kAmxRows = 16;   // rows of every tile
constexpr int64_t kAmxPairs = 16;  // pairs per row of A's tile (rows of B's)
constexpr int64_t kAmxBandStep = 2 * kAmxPairs;

// The configuration is per thread and oneDNN's AMX GEMMs load their own:
// each kernel thread loads this one before its products and releases the
// tiles after them (so that context switches do not keep saving them).
TPX_AMX_TARGET void AmxBeginTiles() {
  static const AmxTileConfig config = FullAmxTiles(8);
  _tile_loadconfig(&config);
}

TPX_AMX_TARGET void AmxEndTiles() { _tile_release(); }

// C[16, 16 NV] = A[16, kp] B[kp, 16 NV] on pairs (kp a multiple of 16):
// A's rows ars words apart, B's pair rows ldb apart, C's rows ldc apart (f32,
// or bf16 rounded as FloatToBF16Array rounds).
template <int NV, typename C>
TPX_AMX_TARGET void AmxBlock(int64_t kp, const Pair* a, int64_t ars, const Pair* b, int64_t ldb,
                             C* c, int64_t ldc) {
  // The tile loads are asm statements that do not tell the compiler what
  // they read: stores to the operands must be done before them.
  asm volatile("" ::: "memory");
  const int64_t sa = ars * static_cast<int64_t>(sizeof(Pair));
  const int64_t sb = ldb * static_cast<int64_t>(sizeof(Pair));
  _tile_zero(0);
  if constexpr (NV > 1) _tile_zero(1);
  if constexpr (NV > 2) _tile_zero(2);
  if constexpr (NV > 3) _tile_zero(3);
  for (int64_t p = 0; p < kp; p += kAmxPairs) {
    const Pair* bp = b + p * ldb;
    _tile_loadd(4, a + p, sa);
    _tile_loadd(5, bp, sb);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (NV > 1) {
      _tile_loadd(6, bp + kLanes, sb);
      _tile_dpbf16ps(1, 4, 6);
    }
    if constexpr (NV > 2) {
      _tile_loadd(7, bp + 2 * kLanes, sb);
      _tile_dpbf16ps(2, 4, 7);
    }
    if constexpr (NV > 3) {
      _tile_loadd(5, bp + 3 * kLanes, sb);
      _tile_dpbf16ps(3, 4, 5);
    }
  }
  // Tile numbers are immediates: the stores are spelled out per tile.
  float* out;
  int64_t ldo;
  alignas(64) float rounded[kAmxRows * kMaxCols];
  if constexpr (std::is_same_v<C, float>) {
    out = c;
    ldo = ldc;
  } else {
    out = rounded;
    ldo = kMaxCols;
  }
  const int64_t so = ldo * static_cast<int64_t>(sizeof(float));
  _tile_stored(0, out, so);
  if constexpr (NV > 1) _tile_stored(1, out + kLanes, so);
  if constexpr (NV > 2) _tile_stored(2, out + 2 * kLanes, so);
  if constexpr (NV > 3) _tile_stored(3, out + 3 * kLanes, so);
  if constexpr (!std::is_same_v<C, float>) {
    for (int64_t r = 0; r < kAmxRows; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        StoreBF16Lanes(c + r * ldc + v * kLanes,
                       _mm512_load_ps(rounded + r * kMaxCols + v * kLanes),
                       static_cast<__mmask16>(0xffff));
      }
    }
  }
}

// PairTileOf on tiles: rows 16, w a multiple of 16, kp of 16, aps 1.
template <typename C>
TPX_AMX_TARGET void AmxTileAny(int64_t, int64_t w, int64_t kp, const Pair* a, int64_t ars, int64_t,
                               const Pair* b, int64_t ldb, C* c, int64_t ldc) {
  switch (w / kLanes) {
    case 1:
      return AmxBlock<1>(kp, a, ars, b, ldb, c, ldc);
    case 2:
      return AmxBlock<2>(kp, a, ars, b, ldb, c, ldc);
    case 3:
      return AmxBlock<3>(kp, a, ars, b, ldb, c, ldc);
    default:
      return AmxBlock<4>(kp, a, ars, b, ldb, c, ldc);
  }
}

int AmxRowsPerTile(int64_t) { return kAmxRows; }

// dst[j * ldd + i] = src[i * lds + j] for i < 16 and j < n (a multiple of
// 16): 16 rows of words into 16 columns of a wider block.
TPX_AVX512F_TARGET void TransposeSixteenRows(const Pair* src, int64_t lds, int64_t n, Pair* dst,
                                             int64_t ldd) {
  for (int64_t j = 0; j < n; j += kLanes) {
    __m512 r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      r[i] = _mm512_castsi512_ps(_mm512_loadu_si512(src + i * lds + j));
    }
    Transpose16x16(r);
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      _mm512_storeu_si512(dst + (j + i) * ldd, _mm512_castps_si512(r[i]));
    }
  }
}

// ---- Portable (the build's baseline ISA; auto-vectorised) ----

void PortableTile(int64_t rows, int64_t w, int64_t k, const float* a, int64_t ars, int64_t aps,
                  const float* b, int64_t ldb, float* c, int64_t ldc) {
  for (int64_t r = 0; r < rows; ++r) {
    float acc[kMaxCols] = {};
    for (int64_t p = 0; p < k; ++p) {
      const float av = a[r * ars + p * aps];
      const float* bp = b + p * ldb;
      for (int64_t j = 0; j < w; ++j) acc[j] += av * bp[j];
    }
    std::copy_n(acc, w, c + r * ldc);
  }
}

int PortableRowsPerTile(int64_t) { return 8; }

// ExpRowFn, auto-vectorised (the portable form).
TPX_VECTOR_CLONES void ExpRow(float* x, int64_t len, int64_t n, float scale, float mx) {
  // A masked key is 0, as Exp(-inf - mx) is. 32-bit indices: the key
  // mask is then one compare per vector (n < 2^31: a row of P).
  const int32_t n32 = static_cast<int32_t>(n), len32 = static_cast<int32_t>(len);
  for (int32_t j = 0; j < n32; ++j) x[j] = j < len32 ? Exp(scale * x[j] - mx) : 0.0f;
}

// TransposeFn one element at a time. The scattered stores leave room for
// few rows' loads in flight: rows far apart (kFarStride) are asked for
// kAheadRows on.
template <typename E>
void Transpose(const E* x, int64_t ldx, int64_t t, int64_t d, int64_t tp, E* xt) {
  constexpr int64_t kLine = 64 / sizeof(E);
  const int64_t ahead = ldx * static_cast<int64_t>(sizeof(E)) >= kFarStride * 4 ? kAheadRows : 0;
  for (int64_t i = 0; i < t; ++i) {
    if (ahead != 0 && i + ahead < t) {
      for (int64_t j = 0; j < d; j += kLine) PrefetchLine(x + (i + ahead) * ldx + j);
    }
    for (int64_t j = 0; j < d; ++j) xt[j * tp + i] = x[i * ldx + j];
  }
  for (int64_t j = 0; j < d; ++j) std::fill(xt + j * tp + t, xt + (j + 1) * tp, E{0});
}

// Only floats reach the portable form (the pair form needs AVX-512 BF16).
void PortableTranspose(const void* x, int64_t ldx, int64_t t, int64_t d, int64_t tp, void* xt) {
  Transpose(static_cast<const float*>(x), ldx, t, d, tp, static_cast<float*>(xt));
}

// TPX_ATTENTION_ISA: the form asked for, to test or compare the forms on
// one machine: "amx" (the AMX form where the CPU has it and the shape fits,
// else the f32 form), "avx512_bf16" (the pair tile wherever the CPU has
// AVX-512 BF16), "avx512" (bf16 widened to f32) or "baseline" (the portable
// tile for everything); empty: the CPU's best.
std::string_view ForcedForm() {
  const char* env = std::getenv("TPX_ATTENTION_ISA");
  return env != nullptr ? env : "";
}

// AVX-512, and the bf16 pair tile where the CPU has AVX-512 BF16 but no
// AMX: CPUs with AMX (Intel Xeon from Sapphire Rapids on) run vdpbf16ps at
// half the f32 FMA rate, and bench:attention's bf16 step at 1 thread ran
// 1.3-1.7x faster there in the f32 form (head_dim 32, t 128). Those CPUs
// run bf16 in the AMX form where the shape fits (AmxIsa).
const Isa& ActiveIsa() {
  static const Isa isa = [] {
    const std::string_view forced = ForcedForm();
    if (forced != "baseline" && CpuHasAvx512F()) {
      const bool pairs = forced == "avx512_bf16" || (forced.empty() && !CpuHasAmxBf16());
      if (pairs && CpuHasAvx512Bf16()) {
        return Isa{&Avx512TileAny, &Avx512RowsPerTile, &Avx512Transpose, &Avx512ExpRow,
                   &Avx512Bf16TileAny<float>, &Avx512Bf16TileAny<BF16>};
      }
      return Isa{&Avx512TileAny, &Avx512RowsPerTile, &Avx512Transpose, &Avx512ExpRow};
    }
    return Isa{&PortableTile, &PortableRowsPerTile, &PortableTranspose, &ExpRow};
  }();
  return isa;
}

// The AMX form of the pair products where the CPU has AMX-BF16 (and the
// form is not forced to another), else null. Its softmax steps, transposes
// and f32 products are AVX-512's.
const Isa* AmxIsa() {
  static const Isa* isa = []() -> const Isa* {
    const std::string_view forced = ForcedForm();
    if (!(forced.empty() || forced == "amx") || !CpuHasAmxBf16() || !CpuHasAvx512Bf16()) {
      return nullptr;
    }
    // No f32 tile: the rows per tile are the tiles'.
    static const Isa amx{/*tile=*/nullptr, &AmxRowsPerTile,    &Avx512Transpose,
                         &Avx512ExpRow,    &AmxTileAny<float>, &AmxTileAny<BF16>,
                         kAmxRowChunk,     kAmxBandStep,       /*a_rows_only=*/true,
                         &AmxBeginTiles,   &AmxEndTiles};
    return &amx;
  }();
  return isa;
}

// C[m, n] = op(A)[m, k] B[k, n] restricted to the band. With
// `causal_cols`, row block [r0, r0 + rows) computes only the columns below
// r0 + rows rounded up to 16 (the rest of its C rows is left as is; B must
// have those columns: n a multiple of 16 there). W is float, or Pair: then
// k counts bf16 elements (even), strides count pairs, and a band edge is
// widened to whole pairs (op(A) must hold zeros there, as it does outside
// the band). C is f32, or bf16 for the pair form's results.
template <typename W, typename C = float>
struct ProductOf {
  int64_t m, n, k;
  const W* a;
  int64_t ars, aps;
  const W* b;
  int64_t ldb;
  C* c;
  int64_t ldc;
  Band band = Band::kAll;
  bool causal_cols = false;
  // The m rows are rows [row0, row0 + m) of a larger banded product (a and
  // c point at row row0; p indexes B as in the larger product).
  int64_t row0 = 0;
};
using Product = ProductOf<float>;
using PairProduct = ProductOf<Pair>;
// A pair product whose results are rounded into a bf16 tensor.
using PairToBf16Product = ProductOf<Pair, BF16>;

template <typename W, typename C, typename Tile>
void RunBandedProduct(Tile tile, const Isa& isa, const ProductOf<W, C>& p) {
  constexpr int64_t kPer = std::is_same_v<W, Pair> ? 2 : 1;  // elements per word
  const int64_t step = std::max(kPer, isa.band_step);        // of band edges
  const int64_t groups = std::min<int64_t>((p.n + kLanes - 1) / kLanes, kMaxCols / kLanes);
  const int64_t mr = isa.rows_per_tile(std::max<int64_t>(groups, 1));
  for (int64_t r0 = 0; r0 < p.m; r0 += mr) {
    const int64_t rows = std::min(mr, p.m - r0), end = p.row0 + r0 + rows;
    int64_t p0 = 0, p1 = p.k;
    if (p.band == Band::kUpTo) p1 = std::min(p.k, RoundUp(end, step));
    if (p.band == Band::kFrom) p0 = std::min(p.k, (p.row0 + r0) / step * step);
    const int64_t cols = p.causal_cols ? std::min(p.n, RoundUp(end, kLanes)) : p.n;
    // The next row block's far rows of op(A) (when its rows are contiguous)
    // and of C, so that its first reduction steps and its stores do not
    // wait on them.
    for (int64_t r = r0 + mr; r < std::min(p.m, r0 + 2 * mr); ++r) {
      if (p.aps == 1 && p.ars >= kFarStride) {
        const W* ar = p.a + r * p.ars;
        for (int64_t q = p0 / kPer; q < p1 / kPer; q += kLanes) PrefetchLine(ar + q);
      }
      if (p.ldc >= kFarStride) {
        const C* cr = p.c + r * p.ldc;
        for (int64_t j = 0; j < p.n; j += kLanes) PrefetchLine(cr + j);
      }
    }
    for (int64_t c0 = 0; c0 < cols; c0 += kMaxCols) {
      tile(rows, std::min(kMaxCols, cols - c0), (p1 - p0) / kPer,
           p.a + r0 * p.ars + p0 / kPer * p.aps, p.ars, p.aps, p.b + p0 / kPer * p.ldb + c0,
           p.ldb, p.c + r0 * p.ldc + c0, p.ldc);
    }
  }
}

void RunProduct(const Isa& isa, const Product& p) { RunBandedProduct(isa.tile, isa, p); }
void RunProduct(const Isa& isa, const PairProduct& p) { RunBandedProduct(isa.pair_tile, isa, p); }
void RunProduct(const Isa& isa, const PairToBf16Product& p) {
  RunBandedProduct(isa.pair_tile_bf16, isa, p);
}

// The unnormalised half of a softmax row, in two steps (RowMax, then the
// Isa's exp_row) so that a chunk's rows run each step one after another
// (SoftmaxChunk): each step is a short chain of dependent operations per
// row (a reduction tree, a polynomial), and with a row's exponentials
// waiting on its own maximum, rows of a few vectors left the core idle
// between chains. Together:
// x[0..len) = exp(scale * x - max(scale * x)) in place and x[len..n) = 0
// (the keys after the diagonal), 1 <= len <= n, n a multiple of 16. Whole
// vectors, the keys from len on masked here (whatever they hold): with the
// division by the row's sum, ScaledSoftmax's causal row bit for bit.
// (Storing -inf over them first made the next whole-vector load wait on the
// narrow stores.) As there, a NaN score makes the row NaN (through the
// sum), and so does a row of -inf scores (0 / 0). One pointer, so the loops
// vectorise without an overlap check.

// The maximum of scale * x[0..len), read in whole vectors up to n
// (ScaledRowMax): NaN when a score is NaN, 0 when all are -inf (avoiding
// inf - inf).
TPX_VECTOR_CLONES float RowMax(const float* x, int64_t len, int64_t n, float scale) {
  const float mx = ScaledRowMax(x, len, n, scale);
  return std::isinf(mx) && mx < 0 ? 0.0f : mx;
}

// sum(x) over [0, n).
TPX_VECTOR_CLONES float RowSum(const float* x, int64_t n) {
  return Sum8(n, [x](int64_t j) { return x[j]; });
}

// x[0..n) *= s.
TPX_VECTOR_CLONES void ScaleRow(float* x, int64_t n, float s) {
  for (int64_t j = 0; j < n; ++j) x[j] *= s;
}

// sum(p * dp) over [0, n).
TPX_VECTOR_CLONES float RowDot(const float* p, const float* dp, int64_t n) {
  return Sum8(n, [p, dp](int64_t j) { return p[j] * dp[j]; });
}

// ds[0..n) = scale * p * (dp - dot), in place over dp.
TPX_VECTOR_CLONES void SoftmaxBackwardRow(const float* p, float* dp, int64_t n, float dot,
                                          float scale) {
  for (int64_t j = 0; j < n; ++j) dp[j] = scale * (p[j] * (dp[j] - dot));
}

// The pair form's rows of P and dS go straight to bf16 (the products read
// nothing else of them): out[0..n) = x[0..n) * s rounded as ScaleRow then
// FloatToBF16Array would (the same multiply, the same rounding), then
// zeros up to end; n <= end.
TPX_PAIR_TARGET void ScaleRowToBf16(const float* x, int64_t n, float s, int64_t end, BF16* out) {
  const __m512 sv = _mm512_set1_ps(s);
  for (int64_t j = 0; j < n; j += kLanes) {
    const __mmask16 lanes = FirstLanes(n - j);
    StoreBF16Lanes(out + j, _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, x + j), sv), lanes);
  }
  std::fill(out + n, out + end, BF16{});
}

// The softmax statistics of a row kept for the backward: the maximum of
// its scaled scores and the reciprocal of its sum of exponentials, from
// which the backward recomputes P exactly as the forward computed it
// (RecomputeChunk) instead of keeping P itself, t^2 floats per head that
// went to memory and came back.
constexpr int64_t kStatsPerRow = kAttentionStatsPerRow;
static_assert(kStatsPerRow == 2);

// The columns of row i of dS (and P) that the backward computes: whole
// vectors where the row has them (P is 0 after the diagonal).
int64_t CausalLen(int64_t i, int64_t t) { return std::min(RoundUp(i + 1, kLanes), t); }

// The columns of P row i (P's rows [c0, c0 + rows) in a [rows, tp] block)
// that the products read: whole vectors to past the diagonal, and for the
// pair form up to the chunk's end (rounded up to a pair); zero after the
// diagonal. Returns the end of the columns to zero from RoundUp(i + 1, 16).
int64_t ZeroEnd(int64_t i, int64_t c0, int64_t rows, int64_t tp) {
  return std::min(tp, std::max(RoundUp(i + 1, kLanes) + kLanes, RoundUp(c0 + rows, 2)));
}

// P in place over the scores of rows [c0, c0 + rows) (s: [rows, tp]):
// each row's softmax runs over whole vectors, the keys after the diagonal
// masked, and the columns after it that the products read are zeroed
// (ZeroEnd). Unless stats is null, row i's statistics go to stats[2i],
// stats[2i + 1]. With `pairs` (the pair form), P goes rounded to bf16 into
// pairs instead (chunk row r at pairs + r tp / 2), over the columns P v
// reads, and s is left unscaled.
void SoftmaxChunk(const Isa& isa, float* s, int64_t c0, int64_t rows, int64_t t, float scale,
                  float* stats, Pair* pairs = nullptr) {
  const int64_t tp = RoundUp(t, kLanes);
  // Each step for all the rows before the next: a row's sum is one chain of
  // dependent additions, and with nothing in between, the chains of
  // consecutive rows overlap.
  float mx[kMaxRowChunk], sum[kMaxRowChunk];
  for (int64_t i = c0; i < c0 + rows; ++i) {
    mx[i - c0] = RowMax(s + (i - c0) * tp, i + 1, RoundUp(i + 1, kLanes), scale);
  }
  for (int64_t i = c0; i < c0 + rows; ++i) {
    isa.exp_row(s + (i - c0) * tp, i + 1, RoundUp(i + 1, kLanes), scale, mx[i - c0]);
  }
  for (int64_t i = c0; i < c0 + rows; ++i) {
    sum[i - c0] = RowSum(s + (i - c0) * tp, RoundUp(i + 1, kLanes));
  }
  for (int64_t i = c0; i < c0 + rows; ++i) {
    float* row = s + (i - c0) * tp;
    const int64_t n = RoundUp(i + 1, kLanes);
    const float inv = 1.0f / sum[i - c0];
    if (pairs != nullptr) {
      ScaleRowToBf16(row, n, inv, std::min(tp, std::max(n, RoundUp(c0 + rows, 2))),
                     reinterpret_cast<BF16*>(pairs + (i - c0) * tp / 2));
    } else {
      ScaleRow(row, n, inv);
      std::fill(row + n, row + std::max(n, ZeroEnd(i, c0, rows, tp)), 0.0f);
    }
    if (stats != nullptr) {
      stats[kStatsPerRow * i] = mx[i - c0];
      stats[kStatsPerRow * i + 1] = inv;
    }
  }
}

// The forward's P, bit for bit, in place over the same scores of rows [c0,
// c0 + rows) (s: [rows, tp], as the forward's product computed them), from
// the statistics SoftmaxChunk kept: the same exponentials, scaled by the
// same reciprocal.
void RecomputeChunk(const Isa& isa, float* s, int64_t c0, int64_t rows, int64_t t, float scale,
                    const float* stats) {
  const int64_t tp = RoundUp(t, kLanes);
  for (int64_t i = c0; i < c0 + rows; ++i) {
    float* row = s + (i - c0) * tp;
    const int64_t n = RoundUp(i + 1, kLanes);
    isa.exp_row(row, i + 1, n, scale, stats[kStatsPerRow * i]);
    ScaleRow(row, n, stats[kStatsPerRow * i + 1]);
    std::fill(row + n, row + std::max(n, ZeroEnd(i, c0, rows, tp)), 0.0f);
  }
}

// dot[i - c0] = rowsum(P dP) of rows [c0, c0 + rows) over their causal
// columns. Every row's sum first: each is one chain of dependent additions,
// and with nothing in between, the chains of consecutive rows overlap.
void CausalRowDots(const float* ds, int64_t c0, int64_t rows, int64_t t, const float* p,
                   float* dot) {
  const int64_t tp = RoundUp(t, kLanes);
  for (int64_t i = c0; i < c0 + rows; ++i) {
    dot[i - c0] = RowDot(p + (i - c0) * tp, ds + (i - c0) * tp, CausalLen(i, t));
  }
}

// dS = scale * P (dP - rowsum(P dP)) in place over dP's rows [c0, c0 +
// rows) (ds: [rows, tp]; p: P's rows, [rows, tp], as RecomputeChunk left
// them). dS is zero after the diagonal as far as the products read
// (ZeroEnd); further columns are left as they are.
void SoftmaxBackwardChunk(float* ds, int64_t c0, int64_t rows, int64_t t, const float* p,
                          float scale) {
  const int64_t tp = RoundUp(t, kLanes);
  float dot[kMaxRowChunk];
  CausalRowDots(ds, c0, rows, t, p, dot);
  for (int64_t i = c0; i < c0 + rows; ++i) {
    float* row = ds + (i - c0) * tp;
    const int64_t len = CausalLen(i, t);
    SoftmaxBackwardRow(p + (i - c0) * tp, row, len, dot[i - c0], scale);
    std::fill(row + len, row + std::max(len, ZeroEnd(i, c0, rows, tp)), 0.0f);
  }
}

// The pair form of SoftmaxBackwardChunk: dS, rounded to bf16, into dsr
// (chunk row r at dsr + r tp / 2: pairs along its row, for dq = dS k) and
// into dsi (chunk rows 2s and 2s + 1 as pairs across them at dsi + s tp,
// for dk = dS^T q), and P's rows rounded likewise into pi (for dv = P^T
// dO); all over the columns before the chunk's end rounded up to a pair,
// dS zero after the diagonal. One pass over two rows at a time: their
// rounded halves are pairs across them after one permute. ds is left as
// dP. Same bits as SoftmaxBackwardRow then FloatToBF16Array.
TPX_PAIR_TARGET void SoftmaxBackwardChunkPairs(const float* ds, int64_t c0, int64_t rows, int64_t t,
                                               const float* p, float scale, Pair* dsr, Pair* dsi,
                                               Pair* pi) {
  const int64_t tp = RoundUp(t, kLanes);
  float dot[kMaxRowChunk];
  CausalRowDots(ds, c0, rows, t, p, dot);
  const int64_t end = std::min(tp, RoundUp(c0 + rows, 2));
  // Pair k takes lane k of the first row's rounded half and of the second's.
  alignas(64) static constexpr uint16_t kAcross[32] = {
      0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i across = _mm512_load_si512(kAcross);
  const __m512 sv = _mm512_set1_ps(scale);
  for (int64_t r = 0; r < rows; r += 2) {
    // A chunk of odd rows (the last, for an odd t) pairs its last row with zeros.
    const bool second = r + 1 < rows;
    const float* p0 = p + r * tp;
    const float* d0 = ds + r * tp;
    const int64_t n0 = std::min(CausalLen(c0 + r, t), end);
    const int64_t n1 = second ? std::min(CausalLen(c0 + r + 1, t), end) : 0;
    const __m512 dot0 = _mm512_set1_ps(dot[r]), dot1 = _mm512_set1_ps(second ? dot[r + 1] : 0);
    BF16* along = reinterpret_cast<BF16*>(dsr + r * tp / 2);
    Pair* ds_across = dsi + r / 2 * tp;
    Pair* p_across = pi + r / 2 * tp;
    for (int64_t j = 0; j < end; j += kLanes) {
      const __mmask16 cols = FirstLanes(end - j), m0 = FirstLanes(n0 - j), m1 = FirstLanes(n1 - j);
      const __m512 pv0 = _mm512_maskz_loadu_ps(cols, p0 + j);
      const __m512 pv1 = second ? _mm512_maskz_loadu_ps(cols, p0 + tp + j) : _mm512_setzero_ps();
      const __m512 g0 = _mm512_sub_ps(_mm512_maskz_loadu_ps(m0, d0 + j), dot0);
      const __m512 g1 = _mm512_sub_ps(_mm512_maskz_loadu_ps(m1, d0 + tp + j), dot1);
      const __m512i dsv = RoundBF16Pair(_mm512_maskz_mul_ps(m0, sv, _mm512_mul_ps(pv0, g0)),
                                        _mm512_maskz_mul_ps(m1, sv, _mm512_mul_ps(pv1, g1)));
      _mm256_mask_storeu_epi16(along + j, cols, _mm512_maskz_extracti64x4_epi64(0xf, dsv, 0));
      if (second) {
        _mm256_mask_storeu_epi16(along + tp + j, cols,
                                 _mm512_maskz_extracti64x4_epi64(0xf, dsv, 1));
      }
      _mm512_mask_storeu_epi32(ds_across + j, cols, _mm512_permutexvar_epi16(across, dsv));
      _mm512_mask_storeu_epi32(p_across + j, cols,
                               _mm512_permutexvar_epi16(across, RoundBF16Pair(pv0, pv1)));
    }
  }
}

// The shape of one call and how it is split into tasks: a task is one batch
// row and a group of consecutive heads (all heads when there are enough
// batch rows for the threads).
struct Layout {
  int64_t t, b, heads, d;
  int64_t group;  // heads per task
  Layout(int64_t t_, int64_t b_, int64_t heads_, int64_t d_)
      : t(t_), b(b_), heads(heads_), d(d_) {
    const int64_t threads = KernelThreads();
    const int64_t groups = b >= threads ? 1 : std::min(heads, (threads + b - 1) / b);
    group = (heads + groups - 1) / groups;
  }
  int64_t groups() const { return (heads + group - 1) / group; }
  int64_t tasks() const { return b * groups(); }
  // Task i's batch row, first head and head count.
  struct Task {
    int64_t bi, h0, hn;
  };
  Task task(int64_t i) const {
    const int64_t h0 = i % groups() * group;
    return {i / groups(), h0, std::min(group, heads - h0)};
  }
};

// A kernel thread's scratch, reused by the calls on that thread (with a
// fresh buffer per call, the packed blocks, 0.5 MiB per task at the GPT
// sizes, came as new pages from the OS on every call, and zeroed). Pieces
// are 4-byte elements: floats, or bf16 pairs. Holds up to kKeep elements
// between calls; a call needing more gets its own buffer. Take gives a piece
// as it was left (every element written before it is read); TakeZeroed
// clears it first, for the pair buffers whose padding is read but never
// written.
class Scratch {
 public:
  // Room for pieces of the given sizes (elements).
  explicit Scratch(std::initializer_list<int64_t> sizes) {
    int64_t total = 0;
    for (int64_t n : sizes) total += RoundUp(n, kLanes);
    thread_local std::vector<std::byte> kept;
    std::vector<std::byte>& buf = total <= kKeep ? kept : own_;
    const size_t bytes = static_cast<size_t>(total) * kElementBytes;
    if (buf.size() < bytes) buf.resize(bytes);
    next_ = buf.data();
  }
  // The next piece of n elements, in the order of the sizes.
  template <typename E = float>
  E* Take(int64_t n) {
    static_assert(sizeof(E) == kElementBytes);
    E* p = reinterpret_cast<E*>(next_);
    next_ += RoundUp(n, kLanes) * kElementBytes;
    return p;
  }
  template <typename E>
  E* TakeZeroed(int64_t n) {
    E* p = Take<E>(n);
    std::memset(p, 0, static_cast<size_t>(n) * sizeof(E));
    return p;
  }

 private:
  static constexpr size_t kElementBytes = 4;
  static constexpr int64_t kKeep = int64_t{4} << 20;  // 16 MiB
  std::vector<std::byte> own_;
  std::byte* next_;
};

// Asks for the task's runs of time step i + kAheadRows of x (its heads'
// columns of every part), if there is one. Time steps are a whole row of x
// apart, each on its own page, where the hardware prefetchers stop: the
// sequential passes over a task's rows (Pack and PackPairs reading, Unpack
// writing) ask a few steps ahead. In Pack (bf16 widened to f32, on AMX
// CPUs) that made bench:attention's bf16 step with the caches flushed
// between forward and backward 1.05-1.11x as fast on an Emerald Rapids core
// (1 and 2 threads, 61 alternating rounds each), and even with warm caches.
template <typename T>
void PrefetchRunsAhead(const T* x, int64_t parts, const Layout& L, int64_t bi, int64_t h0,
                       int64_t hn, int64_t i) {
  if (i + kAheadRows >= L.t) return;
  const int64_t width = parts * L.heads * L.d;
  const int64_t run_bytes = hn * L.d * static_cast<int64_t>(sizeof(T));
  const T* ahead = x + ((i + kAheadRows) * L.b + bi) * width;
  for (int64_t part = 0; part < parts; ++part) {
    const char* run = reinterpret_cast<const char*>(ahead + (part * L.heads + h0) * L.d);
    for (int64_t off = 0; off < run_bytes; off += 64) PrefetchLine(run + off);
  }
}

// Copies a task's columns between the strided [t, b, parts * heads * d]
// layout and a packed f32 [parts][heads in group][t][d] block: every time
// step's columns of the group are one contiguous run of the big tensor, so
// it is read (or written) in one sequential pass instead of one strided
// pass per head and operand.
template <typename T>
void Pack(const T* x, int64_t parts, const Layout& L, int64_t bi, int64_t h0, int64_t hn,
          float* packed) {
  const int64_t width = parts * L.heads * L.d, td = L.t * L.d;
  for (int64_t i = 0; i < L.t; ++i) {
    const T* row = x + (i * L.b + bi) * width;
    PrefetchRunsAhead<T>(x, parts, L, bi, h0, hn, i);
    for (int64_t part = 0; part < parts; ++part) {
      for (int64_t h = 0; h < hn; ++h) {
        const T* src = row + (part * L.heads + h0 + h) * L.d;
        float* dst = packed + (part * hn + h) * td + i * L.d;
        for (int64_t j = 0; j < L.d; ++j) dst[j] = Load(src[j]);
      }
    }
  }
}

template <typename T>
void Unpack(const float* packed, int64_t parts, const Layout& L, int64_t bi, int64_t h0,
            int64_t hn, T* x) {
  const int64_t width = parts * L.heads * L.d, td = L.t * L.d;
  for (int64_t i = 0; i < L.t; ++i) {
    T* row = x + (i * L.b + bi) * width;
    PrefetchRunsAhead<T>(x, parts, L, bi, h0, hn, i);
    for (int64_t part = 0; part < parts; ++part) {
      for (int64_t h = 0; h < hn; ++h) {
        const float* src = packed + (part * hn + h) * td + i * L.d;
        T* dst = row + (part * L.heads + h0 + h) * L.d;
        if constexpr (std::is_same_v<T, BF16>) {
          FloatToBF16Array(src, dst, L.d);
        } else {
          for (int64_t j = 0; j < L.d; ++j) dst[j] = StoreAs<T>(src[j]);
        }
      }
    }
  }
}


// A task's per-head [t, d] blocks of a [t, b, parts * heads * d] tensor:
// head h's block of part `part` (q, k or v of qkv; the only part of ctx)
// starts at at(part, h), its rows ld apart. The products read and write
// them through these strides, so they may be the big tensor itself or a
// packed copy.
template <typename E>
struct Blocks {
  E* base;
  int64_t ld, part_stride, head_stride;
  E* at(int64_t part, int64_t h) const { return base + part * part_stride + h * head_stride; }
};

// f32 tensors are read and written in place (a head's row is one
// contiguous run of d floats, and the tile takes any row stride); other
// types are widened into a packed f32 copy (Pack) and rounded back
// (Unpack). Either way the products see the same values in the same order.
template <typename T>
constexpr bool kInPlace = std::is_same_v<std::remove_cv_t<T>, float>;

// Floats of packed copy that `parts` parts of a task need (0 in place).
template <typename T>
int64_t PackedSize(int64_t parts, const Layout& L) {
  return kInPlace<T> ? 0 : parts * L.group * L.t * L.d;
}

// A task's blocks as they lie in x itself (strides in elements of x).
template <typename E>
Blocks<E> InPlaceBlocks(E* x, int64_t parts, const Layout& L, int64_t bi, int64_t h0) {
  const int64_t width = parts * L.heads * L.d;
  return {x + bi * width + h0 * L.d, L.b * width, L.heads * L.d, L.d};
}

template <typename T, typename E>
Blocks<E> TaskBlocks(T* x, E* packed, int64_t parts, const Layout& L, int64_t bi, int64_t h0,
                     int64_t hn) {
  if constexpr (kInPlace<T>) {
    return InPlaceBlocks(x, parts, L, bi, h0);
  } else {
    return {packed, L.d, hn * L.t * L.d, L.t * L.d};
  }
}

// The blocks of x the products read (packing them first unless in place).
template <typename T>
Blocks<const float> ReadBlocks(const T* x, int64_t parts, const Layout& L, int64_t bi,
                               int64_t h0, int64_t hn, float* packed) {
  if constexpr (!kInPlace<T>) Pack(x, parts, L, bi, h0, hn, packed);
  return TaskBlocks<const T, const float>(x, packed, parts, L, bi, h0, hn);
}

// The blocks the products write x's results to; WriteResults then stores
// them into x unless they are x already.
template <typename T>
Blocks<float> ResultBlocks(T* x, int64_t parts, const Layout& L, int64_t bi, int64_t h0,
                           int64_t hn, float* packed) {
  return TaskBlocks<T, float>(x, packed, parts, L, bi, h0, hn);
}

template <typename T>
void WriteResults(const float* packed, int64_t parts, const Layout& L, int64_t bi, int64_t h0,
                  int64_t hn, T* x) {
  if constexpr (!kInPlace<T>) Unpack(packed, parts, L, bi, h0, hn, x);
}

// ---- bf16 pairs ----

// As Pack, into pairs along each row: per part and head a [tp, dw] block
// of words (dw = ceil(d / 2)). The padding (rows [t, tp), an odd d's last
// half) is never written: the caller zeroes the buffer once.
void PackPairs(const BF16* x, int64_t parts, const Layout& L, int64_t bi, int64_t h0, int64_t hn,
               int64_t block, Pair* packed) {
  const int64_t width = parts * L.heads * L.d, dw = (L.d + 1) / 2;
  for (int64_t i = 0; i < L.t; ++i) {
    const BF16* row = x + (i * L.b + bi) * width;
    PrefetchRunsAhead(x, parts, L, bi, h0, hn, i);
    for (int64_t part = 0; part < parts; ++part) {
      for (int64_t h = 0; h < hn; ++h) {
        const BF16* src = row + (part * L.heads + h0 + h) * L.d;
        Pair* dst = packed + (part * hn + h) * block + i * dw;
        // Two consecutive bf16 values are one little-endian pair already.
        std::memcpy(dst, src, L.d * sizeof(BF16));
      }
    }
  }
}

// Words of packed pair blocks that `parts` parts of a task need: none when
// d is even, as the blocks are then read in place (PairBlocks).
int64_t PackedPairsSize(int64_t parts, const Layout& L, int64_t block) {
  return L.d % 2 == 0 ? 0 : parts * L.group * block;
}

// A task's per-head blocks of a bf16 [t, b, parts * heads * d] tensor as
// pairs along each row. With d even a head's row is d / 2 whole pairs of
// the tensor itself, read in place through the strides (no copy of the
// operands); an odd d's rows are packed into `packed` ([tp, dw] blocks,
// PackPairs) with their last half zero. Either way the blocks have t rows
// of dw words, ld apart.
Blocks<const Pair> PairBlocks(const BF16* x, int64_t parts, const Layout& L, int64_t bi,
                              int64_t h0, int64_t hn, int64_t block, Pair* packed) {
  if (L.d % 2 == 0) {
    // The offset and strides are even: whole pairs of an allocation that
    // is at least 4-byte aligned.
    const Blocks<const BF16> e = InPlaceBlocks(x, parts, L, bi, h0);
    return {reinterpret_cast<const Pair*>(e.base), e.ld / 2, e.part_stride / 2,
            e.head_stride / 2};
  }
  PackPairs(x, parts, L, bi, h0, hn, block, packed);
  return {packed, (L.d + 1) / 2, hn * block, block};
}

// out[j] = lo[j] | hi[j] << 16 for j < n: two bf16 rows (hi null: zeros)
// as pairs across them, 32 values of each row per two vpermt2w.
TPX_PAIR_TARGET void InterleaveHalves(const uint16_t* lo, const uint16_t* hi, int64_t n,
                                      Pair* out) {
  // Words j and j + 16 of a 32-value step take halves (j, 32 + j) and
  // (16 + j, 48 + j) of the two rows' vectors side by side.
  alignas(64) static constexpr uint16_t kFirst[32] = {
      0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
      8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr uint16_t kSecond[32] = {
      16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
      24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i first = _mm512_load_si512(kFirst), second = _mm512_load_si512(kSecond);
  for (int64_t j = 0; j < n; j += 32) {
    const int64_t left = n - j;
    const __mmask32 halves = left >= 32 ? ~__mmask32{0} : (__mmask32{1} << left) - 1;
    const __m512i l = _mm512_maskz_loadu_epi16(halves, lo + j);
    const __m512i h =
        hi == nullptr ? _mm512_setzero_si512() : _mm512_maskz_loadu_epi16(halves, hi + j);
    _mm512_mask_storeu_epi32(out + j, FirstLanes(left), _mm512_permutex2var_epi16(l, first, h));
    _mm512_mask_storeu_epi32(out + j + kLanes, FirstLanes(left - kLanes),
                             _mm512_permutex2var_epi16(l, second, h));
  }
}

// Pairs along a row to pairs across rows: out[i][j] = (x[2i][j], x[2i +
// 1][j]) for i < ceil(rows / 2), j < d, from x as PairBlocks gives it
// (rows of dw = ceil(d / 2) words, ldx apart); a missing last row is 0.
constexpr int64_t kInterleaveAhead = 8;
TPX_PAIR_TARGET void InterleavePairRows(const Pair* x, int64_t ldx, int64_t rows, int64_t d,
                                        Pair* out) {
  const int64_t dw = (d + 1) / 2;
  for (int64_t i = 0; 2 * i < rows; ++i) {
    const Pair* lo = x + 2 * i * ldx;
    // Rows far apart are on pages of their own: the rows a few pairs on
    // are asked for now (as PackPairs does).
    if (ldx >= kFarStride && 2 * (i + kInterleaveAhead) + 1 < rows) {
      const Pair* ahead = lo + 2 * kInterleaveAhead * ldx;
      for (int64_t j = 0; j < dw; j += kLanes) {
        PrefetchLine(ahead + j);
        PrefetchLine(ahead + ldx + j);
      }
    }
    // A row's d values are its first d halves (little-endian pairs).
    const Pair* hi = 2 * i + 1 < rows ? lo + ldx : nullptr;
    InterleaveHalves(reinterpret_cast<const uint16_t*>(lo),
                     reinterpret_cast<const uint16_t*>(hi), d, out + i * d);
  }
}

// Head h of batch row bi's softmax statistics ([t, kStatsPerRow] of the
// [b * heads, t, kStatsPerRow] tensor); null when none are kept.
template <typename F>
F* HeadStats(F* stats, const Layout& L, int64_t bi, int64_t h) {
  return stats == nullptr ? nullptr : stats + (bi * L.heads + h) * L.t * kStatsPerRow;
}

// The scores S = q k^T of rows [c0, c0 + rows) into s ([rows, tp]), the
// causal column blocks only: q's rows ldq words apart, kt the transposed
// keys ([k words, tp], floats or pairs), k the head's dimension in
// elements. The forward and the backward's recomputation both come here,
// so the backward's scores are the forward's bit for bit.
template <typename W>
void ScoresChunk(const Isa& isa, const W* q, int64_t ldq, const W* kt, int64_t k, int64_t c0,
                 int64_t rows, int64_t t, float* s) {
  const int64_t tp = RoundUp(t, kLanes);
  RunProduct(isa, ProductOf<W>{.m = rows, .n = tp, .k = k, .a = q + c0 * ldq, .ars = ldq,
                               .aps = 1, .b = kt, .ldb = tp, .c = s, .ldc = tp,
                               .causal_cols = true, .row0 = c0});
}

template <typename T>
void AttentionForward(const Layout& L, const T* qkv, T* ctx, float* stats, float scale) {
  const Isa& isa = ActiveIsa();
  const int64_t t = L.t, d = L.d, tp = RoundUp(t, kLanes);
  ParallelFor(L.tasks(), L.group * t * (t + 4 * d), [&](int64_t first, int64_t last) {
    Scratch scratch({PackedSize<T>(3, L), PackedSize<T>(1, L), d * tp, kRowChunk * tp});
    float* const in = scratch.Take(PackedSize<T>(3, L));
    float* const out = scratch.Take(PackedSize<T>(1, L));
    float* const kt = scratch.Take(d * tp);
    float* const s = scratch.Take(kRowChunk * tp);
    for (int64_t task = first; task < last; ++task) {
      const auto [bi, h0, hn] = L.task(task);
      const Blocks<const float> x = ReadBlocks(qkv, 3, L, bi, h0, hn, in);
      const Blocks<float> y = ResultBlocks(ctx, 1, L, bi, h0, hn, out);
      for (int64_t h = 0; h < hn; ++h) {
        const float* q = x.at(0, h);
        const float* v = x.at(2, h);
        float* o = y.at(0, h);
        float* st = HeadStats(stats, L, bi, h0 + h);
        isa.transpose(x.at(1, h), x.ld, t, d, tp, kt);
        // Scores, probabilities and output a chunk of rows at a time, so the
        // chunk's scores stay in L1 between the three steps.
        for (int64_t c0 = 0; c0 < t; c0 += kRowChunk) {
          const int64_t rows = std::min(kRowChunk, t - c0);
          ScoresChunk(isa, q, x.ld, kt, d, c0, rows, t, s);
          SoftmaxChunk(isa, s, c0, rows, t, scale, st);
          // ctx = P v over the keys each row block sees.
          RunProduct(isa, {.m = rows, .n = d, .k = t, .a = s, .ars = tp, .aps = 1,
                           .b = v, .ldb = x.ld, .c = o + c0 * y.ld, .ldc = y.ld,
                           .band = Band::kUpTo, .row0 = c0});
        }
      }
      WriteResults(out, 1, L, bi, h0, hn, ctx);
    }
  });
}

template <typename T>
void AttentionBackward(const Layout& L, const T* qkv, const T* grad, const float* stats, T* dqkv,
                       float scale) {
  const Isa& isa = ActiveIsa();
  const int64_t t = L.t, d = L.d, tp = RoundUp(t, kLanes);
  ParallelFor(L.tasks(), L.group * t * (3 * t + 8 * d), [&](int64_t first, int64_t last) {
    Scratch scratch({PackedSize<T>(3, L), PackedSize<T>(1, L), PackedSize<T>(3, L), d * tp,
                     d * tp, t * tp, t * tp});
    float* const in = scratch.Take(PackedSize<T>(3, L));
    float* const gin = scratch.Take(PackedSize<T>(1, L));
    float* const out = scratch.Take(PackedSize<T>(3, L));
    float* const kt = scratch.Take(d * tp);
    float* const vt = scratch.Take(d * tp);
    float* const ds = scratch.Take(t * tp);
    float* const pc = scratch.Take(t * tp);
    for (int64_t task = first; task < last; ++task) {
      const auto [bi, h0, hn] = L.task(task);
      const Blocks<const float> x = ReadBlocks(qkv, 3, L, bi, h0, hn, in);
      const Blocks<const float> g = ReadBlocks(grad, 1, L, bi, h0, hn, gin);
      const Blocks<float> y = ResultBlocks(dqkv, 3, L, bi, h0, hn, out);
      for (int64_t h = 0; h < hn; ++h) {
        const float* q = x.at(0, h);
        const float* k = x.at(1, h);
        const float* go = g.at(0, h);
        const float* st = HeadStats(stats, L, bi, h0 + h);
        isa.transpose(x.at(1, h), x.ld, t, d, tp, kt);
        isa.transpose(x.at(2, h), x.ld, t, d, tp, vt);
        float* dq = y.at(0, h);
        float* dk = y.at(1, h);
        float* dv = y.at(2, h);
        for (int64_t c0 = 0; c0 < t; c0 += kRowChunk) {
          const int64_t rows = std::min(kRowChunk, t - c0);
          float* dsc = ds + c0 * tp;
          float* pcc = pc + c0 * tp;
          // P as the forward computed it, then dP = dO v^T on the causal
          // blocks, then dS = scale * P (dP - rowsum(P dP)) in place, zero
          // after the diagonal.
          ScoresChunk(isa, q, x.ld, kt, d, c0, rows, t, pcc);
          RecomputeChunk(isa, pcc, c0, rows, t, scale, st);
          RunProduct(isa, {.m = rows, .n = tp, .k = d, .a = go + c0 * g.ld, .ars = g.ld,
                           .aps = 1, .b = vt, .ldb = tp, .c = dsc, .ldc = tp,
                           .causal_cols = true, .row0 = c0});
          SoftmaxBackwardChunk(dsc, c0, rows, t, pcc, scale);
          // dq = dS k.
          RunProduct(isa, {.m = rows, .n = d, .k = t, .a = dsc, .ars = tp, .aps = 1, .b = k,
                           .ldb = x.ld, .c = dq + c0 * y.ld, .ldc = y.ld, .band = Band::kUpTo,
                           .row0 = c0});
        }
        // dk = dS^T q, dv = P^T dO.
        RunProduct(isa, {.m = t, .n = d, .k = t, .a = ds, .ars = 1, .aps = tp, .b = q,
                         .ldb = x.ld, .c = dk, .ldc = y.ld, .band = Band::kFrom});
        RunProduct(isa, {.m = t, .n = d, .k = t, .a = pc, .ars = 1, .aps = tp, .b = go,
                         .ldb = g.ld, .c = dv, .ldc = y.ld, .band = Band::kFrom});
      }
      WriteResults(out, 3, L, bi, h0, hn, dqkv);
    }
  });
}

// A kernel thread's stretch of pair products: the tiles configured for it
// where the form has tiles.
class TileScope {
 public:
  explicit TileScope(const Isa& isa) : isa_(isa) {
    if (isa_.begin_tiles != nullptr) isa_.begin_tiles();
  }
  ~TileScope() {
    if (isa_.end_tiles != nullptr) isa_.end_tiles();
  }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;

 private:
  const Isa& isa_;
};

// The bf16 pair form of AttentionForward, with the pair tile of `isa`.
void AttentionForwardPairs(const Isa& isa, const Layout& L, const BF16* qkv, BF16* ctx,
                           float* stats, float scale) {
  const int64_t t = L.t, d = L.d, tp = RoundUp(t, kLanes), dw = (d + 1) / 2;
  const int64_t block = tp * dw, chunk = isa.row_chunk;
  ParallelFor(L.tasks(), L.group * t * (t + 4 * d), [&](int64_t first, int64_t last) {
    // Zeroed once per call as fresh vectors were: padding that the packing
    // and rounding never write stays zero for every task.
    Scratch scratch(
        {PackedPairsSize(3, L, block), dw * tp, tp / 2 * d, chunk * tp / 2, chunk * tp});
    Pair* const in = scratch.TakeZeroed<Pair>(PackedPairsSize(3, L, block));
    Pair* const kt = scratch.TakeZeroed<Pair>(dw * tp);
    Pair* const vi = scratch.TakeZeroed<Pair>(tp / 2 * d);
    Pair* const p = scratch.TakeZeroed<Pair>(chunk * tp / 2);
    float* const s = scratch.TakeZeroed<float>(chunk * tp);
    const TileScope tiles(isa);
    for (int64_t task = first; task < last; ++task) {
      const auto [bi, h0, hn] = L.task(task);
      const Blocks<const Pair> x = PairBlocks(qkv, 3, L, bi, h0, hn, block, in);
      const Blocks<BF16> y = InPlaceBlocks(ctx, 1, L, bi, h0);
      for (int64_t h = 0; h < hn; ++h) {
        const Pair* q = x.at(0, h);
        BF16* o = y.at(0, h);
        float* st = HeadStats(stats, L, bi, h0 + h);
        isa.transpose(x.at(1, h), x.ld, t, dw, tp, kt);
        InterleavePairRows(x.at(2, h), x.ld, t, d, vi);
        for (int64_t c0 = 0; c0 < t; c0 += chunk) {
          const int64_t rows = std::min(chunk, t - c0);
          ScoresChunk(isa, q, x.ld, kt, 2 * dw, c0, rows, t, s);
          // P rounded to bf16 over the columns P v reads.
          SoftmaxChunk(isa, s, c0, rows, t, scale, st, p);
          RunProduct(isa, PairToBf16Product{.m = rows, .n = d, .k = tp, .a = p,
                                            .ars = tp / 2, .aps = 1, .b = vi, .ldb = d,
                                            .c = o + c0 * y.ld, .ldc = y.ld,
                                            .band = Band::kUpTo, .row0 = c0});
        }
      }
    }
  });
}

// The bf16 pair form of AttentionBackward, with the pair tile of `isa`. dS,
// rounded to bf16, is laid out twice over: pairs along rows for dq = dS k,
// pairs across rows for the transposed product dk = dS^T q; P, for dv =
// P^T dO, only the latter way. A tile that takes A only with pairs along
// its rows (AMX) gets dS^T and P^T as such: each chunk's pairs across rows
// (a chunk-sized dsi and pi) are transposed into dst and pt ([tp, tp / 2]:
// row j holds key j's pairs of queries).
void AttentionBackwardPairs(const Isa& isa, const Layout& L, const BF16* qkv, const BF16* grad,
                            const float* stats, BF16* dqkv, float scale) {
  const int64_t t = L.t, d = L.d, tp = RoundUp(t, kLanes), dw = (d + 1) / 2;
  const int64_t block = tp * dw, chunk = isa.row_chunk;
  const bool transposed = isa.a_rows_only;
  const int64_t across = transposed ? chunk / 2 * tp : tp / 2 * tp;  // dsi, pi
  const int64_t rows_of_t = transposed ? tp * tp / 2 : 0;            // dst, pt
  ParallelFor(L.tasks(), L.group * t * (3 * t + 8 * d), [&](int64_t first, int64_t last) {
    Scratch scratch({PackedPairsSize(3, L, block), PackedPairsSize(1, L, block), dw * tp, dw * tp,
                     tp / 2 * d, tp / 2 * d, tp / 2 * d, chunk * tp / 2, across, across, rows_of_t,
                     rows_of_t, chunk * tp, chunk * tp});
    Pair* const in = scratch.TakeZeroed<Pair>(PackedPairsSize(3, L, block));
    Pair* const gin = scratch.TakeZeroed<Pair>(PackedPairsSize(1, L, block));
    Pair* const kt = scratch.TakeZeroed<Pair>(dw * tp);
    Pair* const vt = scratch.TakeZeroed<Pair>(dw * tp);
    Pair* const qi = scratch.TakeZeroed<Pair>(tp / 2 * d);
    Pair* const ki = scratch.TakeZeroed<Pair>(tp / 2 * d);
    Pair* const gi = scratch.TakeZeroed<Pair>(tp / 2 * d);
    Pair* const dsr = scratch.TakeZeroed<Pair>(chunk * tp / 2);
    Pair* const dsi = scratch.TakeZeroed<Pair>(across);
    Pair* const pi = scratch.TakeZeroed<Pair>(across);
    Pair* const dst = scratch.TakeZeroed<Pair>(rows_of_t);
    Pair* const pt = scratch.TakeZeroed<Pair>(rows_of_t);
    float* const ds = scratch.TakeZeroed<float>(chunk * tp);
    float* const pc = scratch.TakeZeroed<float>(chunk * tp);
    const TileScope tiles(isa);
    for (int64_t task = first; task < last; ++task) {
      const auto [bi, h0, hn] = L.task(task);
      const Blocks<const Pair> x = PairBlocks(qkv, 3, L, bi, h0, hn, block, in);
      const Blocks<const Pair> g = PairBlocks(grad, 1, L, bi, h0, hn, block, gin);
      const Blocks<BF16> y = InPlaceBlocks(dqkv, 3, L, bi, h0);
      for (int64_t h = 0; h < hn; ++h) {
        const Pair* go = g.at(0, h);
        const float* st = HeadStats(stats, L, bi, h0 + h);
        isa.transpose(x.at(1, h), x.ld, t, dw, tp, kt);
        InterleavePairRows(x.at(0, h), x.ld, t, d, qi);
        InterleavePairRows(x.at(1, h), x.ld, t, d, ki);
        InterleavePairRows(go, g.ld, t, d, gi);
        isa.transpose(x.at(2, h), x.ld, t, dw, tp, vt);
        BF16* dq = y.at(0, h);
        BF16* dk = y.at(1, h);
        BF16* dv = y.at(2, h);
        for (int64_t c0 = 0; c0 < t; c0 += chunk) {
          const int64_t rows = std::min(chunk, t - c0);
          // P as the forward computed it, then dP = dO v^T and dS (rounded
          // into dsr).
          ScoresChunk(isa, x.at(0, h), x.ld, kt, 2 * dw, c0, rows, t, pc);
          RecomputeChunk(isa, pc, c0, rows, t, scale, st);
          RunProduct(isa, PairProduct{.m = rows, .n = tp, .k = 2 * dw, .a = go + c0 * g.ld,
                                      .ars = g.ld, .aps = 1, .b = vt, .ldb = tp,
                                      .c = ds, .ldc = tp, .causal_cols = true,
                                      .row0 = c0});
          // The chunk's rows are zero from column c0 + rows on: only the
          // columns before it are rounded (the rest of dsi and pi, or of dst
          // and pt, is never written, so stays zero). Chunks are even: a
          // chunk holds whole row pairs.
          if (transposed) {
            // AMX chunks: 16 row pairs, keys up to c0 + rows in whole 16s.
            SoftmaxBackwardChunkPairs(ds, c0, rows, t, pc, scale, dsr, dsi, pi);
            TransposeSixteenRows(dsi, tp, c0 + rows, dst + c0 / 2, tp / 2);
            TransposeSixteenRows(pi, tp, c0 + rows, pt + c0 / 2, tp / 2);
          } else {
            SoftmaxBackwardChunkPairs(ds, c0, rows, t, pc, scale, dsr, dsi + c0 / 2 * tp,
                                      pi + c0 / 2 * tp);
          }
          RunProduct(isa, PairToBf16Product{.m = rows, .n = d, .k = tp, .a = dsr,
                                            .ars = tp / 2, .aps = 1, .b = ki, .ldb = d,
                                            .c = dq + c0 * y.ld, .ldc = y.ld,
                                            .band = Band::kUpTo, .row0 = c0});
        }
        // dk = dS^T q, dv = P^T dO. op(A)'s pair (r, pp) is at across[pp tp + r]
        // (dsi, pi), or rows[r tp / 2 + pp] (dst, pt) for the AMX tiles.
        auto transposed_product = [&](const Pair* across, const Pair* rows, const Pair* b,
                                      BF16* c) {
          RunProduct(isa, PairToBf16Product{.m = t,
                                            .n = d,
                                            .k = tp,
                                            .a = transposed ? rows : across,
                                            .ars = transposed ? tp / 2 : 1,
                                            .aps = transposed ? 1 : tp,
                                            .b = b,
                                            .ldb = d,
                                            .c = c,
                                            .ldc = y.ld,
                                            .band = Band::kFrom});
        };
        transposed_product(dsi, dst, qi, dk);
        transposed_product(pi, pt, gi, dv);
      }
    }
  });
}

// The form bf16 runs in for this shape, with its pair tile; null: the f32
// form. The AMX form needs whole tiles everywhere: t and head_dim multiples
// of 32 (keys and queries in whole row chunks and reduction steps, the head
// dimension in whole 16-column blocks and steps).
const Isa* PairIsa(const Layout& L) {
  const Isa* amx = AmxIsa();
  if (amx != nullptr && L.t % kAmxRowChunk == 0 && L.d % kAmxBandStep == 0) return amx;
  const Isa& isa = ActiveIsa();
  return isa.pair_tile != nullptr ? &isa : nullptr;
}

}  // namespace

absl::Status CpuDeviceKernels::CausalSelfAttention(const Tensor& ctx, const Tensor& stats,
                                                   const Tensor& qkv, int64_t t, int64_t b,
                                                   int64_t heads, int64_t head_dim,
                                                   double scale) {
  const Layout layout(t, b, heads, head_dim);
  float* st = stats.defined() ? stats.data<float>() : nullptr;
  if (const Isa* pairs = PairIsa(layout); qkv.dtype() == DType::kBF16 && pairs != nullptr) {
    AttentionForwardPairs(*pairs, layout, qkv.data<BF16>(), ctx.data<BF16>(), st,
                          static_cast<float>(scale));
    return absl::OkStatus();
  }
  DispatchFloat(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    AttentionForward<T>(layout, qkv.data<T>(), ctx.data<T>(), st, static_cast<float>(scale));
  });
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::CausalSelfAttentionBackward(const Tensor& dqkv,
                                                           const Tensor& grad_ctx,
                                                           const Tensor& qkv, const Tensor& stats,
                                                           int64_t t, int64_t b, int64_t heads,
                                                           int64_t head_dim, double scale) {
  const Layout layout(t, b, heads, head_dim);
  if (const Isa* pairs = PairIsa(layout); qkv.dtype() == DType::kBF16 && pairs != nullptr) {
    AttentionBackwardPairs(*pairs, layout, qkv.data<BF16>(), grad_ctx.data<BF16>(),
                           stats.data<float>(), dqkv.data<BF16>(), static_cast<float>(scale));
    return absl::OkStatus();
  }
  DispatchFloat(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    AttentionBackward<T>(layout, qkv.data<T>(), grad_ctx.data<T>(), stats.data<float>(),
                         dqkv.data<T>(), static_cast<float>(scale));
  });
  return absl::OkStatus();
}

}  // namespace tpx::cpu
