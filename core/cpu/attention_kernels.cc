// CPU DeviceKernels: causal self-attention forward and backward
// (core/attention.h), one task per (batch row, head) over the kernel
// threads.
//
// Each task reads its q, k and v columns straight from the [t, b, 3 * h * d]
// projection (strided rows, no layout copies) and writes its ctx columns of
// [t, b, h * d] (and its dq, dk, dv columns of the gradient) in place. Only
// the causal part of every product is computed: score row block [i0, i0 + r)
// needs keys below i0 + r (rounded up to 16 columns), P v and dS k reduce
// over those keys only, and P^T dO and dS^T q over the queries from the
// block's first row on. Arithmetic is f32 throughout (bf16/f16 operands are
// widened into per-task scratch first), probabilities are kept in f32.
//
// The products run on one register-blocked tile (AVX-512, chosen at run
// time, as core/small_gemm.cc does for whole products) or a portable loop.
// The blocking depends only on t and head_dim, so results do not depend on
// the thread count or on how many heads a rank holds.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/cpu/cpu_kernels.h"
#include "core/cpu/loops.h"
#include "core/cpu/parallel.h"
#include "core/cpu/vec_math.h"

namespace tpx::cpu {
namespace {

constexpr int64_t kLanes = 16;    // floats per AVX-512 vector
constexpr int64_t kMaxCols = 64;  // columns per tile (four vectors)

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Which reduction indices p row block [r0, r0 + rows) of a product uses,
// given that op(A) is zero outside them (causal P and dS).
enum class Band {
  kAll,
  kUpTo,  // p < r0 + rows: A's row r is zero beyond column r
  kFrom,  // p >= r0: A's row r is zero before column r
};

// C[rows, w] = op(A)[rows, k] B[k, w], f32 row-major, for rows <= the
// ISA's RowsPerTile(ceil(w / 16)) and w <= kMaxCols. op(A)'s element (r, p)
// is a[r * ars + p * aps]; B's rows are ldb apart.
using TileFn = void (*)(int64_t rows, int64_t w, int64_t k, const float* a, int64_t ars,
                        int64_t aps, const float* b, int64_t ldb, float* c, int64_t ldc);

struct Isa {
  TileFn tile;
  int (*rows_per_tile)(int64_t vectors);
};

// ---- AVX-512 ----

// Rows per tile for NV vectors per row: NV * MR accumulators in at most 28
// of the 32 zmm registers.
constexpr int Avx512RowsFor(int64_t nv) { return nv == 1 ? 14 : nv == 2 ? 12 : nv == 3 ? 8 : 6; }

template <int MR, int NV>
__attribute__((target("avx512f"))) inline void Avx512Tile(int64_t k, const float* a, int64_t ars,
                                                          int64_t aps, const float* b,
                                                          int64_t ldb, float* c, int64_t ldc,
                                                          __mmask16 last) {
  __m512 acc[MR][NV];
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < k; ++p) {
    __m512 bv[NV];
    const float* bp = b + p * ldb;
    for (int v = 0; v + 1 < NV; ++v) bv[v] = _mm512_loadu_ps(bp + kLanes * v);
    bv[NV - 1] = _mm512_maskz_loadu_ps(last, bp + kLanes * (NV - 1));
    const float* ap = a + p * aps;
#pragma GCC unroll 14
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r * ars]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v + 1 < NV; ++v) _mm512_storeu_ps(c + r * ldc + kLanes * v, acc[r][v]);
    _mm512_mask_storeu_ps(c + r * ldc + kLanes * (NV - 1), last, acc[r][NV - 1]);
  }
}

// Picks the tile for `rows` (1 .. R) rows at compile time.
template <int NV, int R>
__attribute__((target("avx512f"))) void Avx512Rows(int64_t rows, int64_t k, const float* a,
                                                   int64_t ars, int64_t aps, const float* b,
                                                   int64_t ldb, float* c, int64_t ldc,
                                                   __mmask16 last) {
  if constexpr (R >= 1) {
    if (rows == R) {
      Avx512Tile<R, NV>(k, a, ars, aps, b, ldb, c, ldc, last);
    } else {
      Avx512Rows<NV, R - 1>(rows, k, a, ars, aps, b, ldb, c, ldc, last);
    }
  }
}

__attribute__((target("avx512f"))) void Avx512TileAny(int64_t rows, int64_t w, int64_t k,
                                                      const float* a, int64_t ars, int64_t aps,
                                                      const float* b, int64_t ldb, float* c,
                                                      int64_t ldc) {
  const int64_t nv = (w + kLanes - 1) / kLanes;
  const int64_t tail = w - (nv - 1) * kLanes;
  const __mmask16 last = static_cast<__mmask16>((1u << tail) - 1u);
  switch (nv) {
    case 1: return Avx512Rows<1, Avx512RowsFor(1)>(rows, k, a, ars, aps, b, ldb, c, ldc, last);
    case 2: return Avx512Rows<2, Avx512RowsFor(2)>(rows, k, a, ars, aps, b, ldb, c, ldc, last);
    case 3: return Avx512Rows<3, Avx512RowsFor(3)>(rows, k, a, ars, aps, b, ldb, c, ldc, last);
    default: return Avx512Rows<4, Avx512RowsFor(4)>(rows, k, a, ars, aps, b, ldb, c, ldc, last);
  }
}

int Avx512RowsPerTile(int64_t nv) { return Avx512RowsFor(nv); }

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

const Isa& ActiveIsa() {
  static const Isa isa = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return Isa{&Avx512TileAny, &Avx512RowsPerTile};
    return Isa{&PortableTile, &PortableRowsPerTile};
  }();
  return isa;
}

// C[m, n] = op(A)[m, k] B[k, n] restricted to the band. With
// `causal_cols`, row block [r0, r0 + rows) computes only the columns below
// r0 + rows rounded up to 16 (the rest of its C rows is left as is; B must
// have those columns: n a multiple of 16 there).
struct Product {
  int64_t m, n, k;
  const float* a;
  int64_t ars, aps;
  const float* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  Band band = Band::kAll;
  bool causal_cols = false;
};

void RunProduct(const Isa& isa, const Product& p) {
  const int64_t groups = std::min<int64_t>((p.n + kLanes - 1) / kLanes, kMaxCols / kLanes);
  const int64_t mr = isa.rows_per_tile(std::max<int64_t>(groups, 1));
  for (int64_t r0 = 0; r0 < p.m; r0 += mr) {
    const int64_t rows = std::min(mr, p.m - r0);
    int64_t p0 = 0, p1 = p.k;
    if (p.band == Band::kUpTo) p1 = std::min(p.k, r0 + rows);
    if (p.band == Band::kFrom) p0 = std::min(p.k, r0);
    const int64_t cols = p.causal_cols ? std::min(p.n, RoundUp(r0 + rows, kLanes)) : p.n;
    for (int64_t c0 = 0; c0 < cols; c0 += kMaxCols) {
      isa.tile(rows, std::min(kMaxCols, cols - c0), p1 - p0, p.a + r0 * p.ars + p0 * p.aps, p.ars,
               p.aps, p.b + p0 * p.ldb + c0, p.ldb, p.c + r0 * p.ldc + c0, p.ldc);
    }
  }
}

// Sum of f(j) over j in [0, n) with eight partial sums, so the loop
// vectorises without reassociation flags (as core/cpu/nn_kernels.cc).
template <typename F>
TPX_VEC_INLINE float Sum8(int64_t n, F f) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += f(i + j);
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += f(i);
  return s;
}

// p[0..n) = softmax(scale * s[0..n)) for n >= 1, as ScaledSoftmax's row:
// a NaN score makes the row NaN, a row of -inf gives 0s.
TPX_VECTOR_CLONES void SoftmaxRow(const float* s, float* p, int64_t n, float scale) {
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  float m[8] = {kLowest, kLowest, kLowest, kLowest, kLowest, kLowest, kLowest, kLowest};
  bool nan = false;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const float v = scale * s[i + j];
      nan |= v != v;
      m[j] = v > m[j] ? v : m[j];
    }
  }
  for (; i < n; ++i) {
    const float v = scale * s[i];
    nan |= v != v;
    m[0] = v > m[0] ? v : m[0];
  }
  float mx = m[0];
  for (int j = 1; j < 8; ++j) mx = m[j] > mx ? m[j] : mx;
  if (nan) mx = std::numeric_limits<float>::quiet_NaN();
  if (std::isinf(mx) && mx < 0) mx = 0.0f;  // all -inf: avoid inf - inf
  for (int64_t j = 0; j < n; ++j) p[j] = Exp(scale * s[j] - mx);
  const float inv = 1.0f / Sum8(n, [p](int64_t j) { return p[j]; });
  for (int64_t j = 0; j < n; ++j) p[j] *= inv;
}

// ds[0..n) = scale * p * (dp - sum(p * dp)), in place over dp.
TPX_VECTOR_CLONES void SoftmaxBackwardRow(const float* p, float* dp, int64_t n, float scale) {
  const float dot = Sum8(n, [p, dp](int64_t j) { return p[j] * dp[j]; });
  for (int64_t j = 0; j < n; ++j) dp[j] = scale * (p[j] * (dp[j] - dot));
}

// Where one (batch row, head) task finds its operands.
struct Layout {
  int64_t t, b, heads, d;
  int64_t qkv_ld() const { return b * 3 * heads * d; }  // between time steps in qkv
  int64_t ctx_ld() const { return b * heads * d; }      // between time steps in ctx
  // Offsets of the task's first q, k, v and ctx elements.
  int64_t q_off(int64_t bi, int64_t h) const { return bi * 3 * heads * d + h * d; }
  int64_t k_off(int64_t bi, int64_t h) const { return q_off(bi, h) + heads * d; }
  int64_t v_off(int64_t bi, int64_t h) const { return q_off(bi, h) + 2 * heads * d; }
  int64_t ctx_off(int64_t bi, int64_t h) const { return bi * heads * d + h * d; }
};

// A [t, d] strided operand as f32 rows: the data itself for f32, else
// widened into `scratch` (t * d floats).
template <typename T>
const float* AsF32(const T* x, int64_t ld, int64_t t, int64_t d, float* scratch, int64_t* ld_out) {
  if constexpr (std::is_same_v<T, float>) {
    *ld_out = ld;
    return x;
  } else {
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t j = 0; j < d; ++j) scratch[i * d + j] = Load(x[i * ld + j]);
    }
    *ld_out = d;
    return scratch;
  }
}

// xt[d, tp] = x[t, d]^T, zero in columns [t, tp).
template <typename T>
void Transposed(const T* x, int64_t ld, int64_t t, int64_t d, int64_t tp, float* xt) {
  for (int64_t j = 0; j < d; ++j) {
    float* row = xt + j * tp;
    for (int64_t i = 0; i < t; ++i) row[i] = Load(x[i * ld + j]);
    std::fill(row + t, row + tp, 0.0f);
  }
}

// Where an f32 result of [t, d] goes: straight into out (f32), or into
// scratch and then rounded into out.
template <typename T>
struct Output {
  T* out;
  int64_t ld;
  float* scratch;
  float* c() const {
    if constexpr (std::is_same_v<T, float>) return out;
    return scratch;
  }
  int64_t ldc(int64_t d) const { return std::is_same_v<T, float> ? ld : d; }
  void Finish(int64_t t, int64_t d) const {
    if constexpr (!std::is_same_v<T, float>) {
      for (int64_t i = 0; i < t; ++i) {
        for (int64_t j = 0; j < d; ++j) out[i * ld + j] = StoreAs<T>(scratch[i * d + j]);
      }
    }
  }
};

template <typename T>
void AttentionForward(const Layout& L, const T* qkv, T* ctx, float* probs, float scale) {
  const Isa& isa = ActiveIsa();
  const int64_t t = L.t, d = L.d, tp = RoundUp(t, kLanes);
  const int64_t tasks = L.b * L.heads;
  ParallelFor(tasks, t * (t + 3 * d), [&](int64_t first, int64_t last) {
    const bool widen = !std::is_same_v<T, float>;
    std::vector<float> kt(d * tp), s(t * tp), own_probs(probs == nullptr ? t * t : 0);
    std::vector<float> qf(widen ? t * d : 0), vf(widen ? t * d : 0), of(widen ? t * d : 0);
    for (int64_t task = first; task < last; ++task) {
      const int64_t bi = task / L.heads, h = task % L.heads;
      float* pr = probs != nullptr ? probs + task * t * t : own_probs.data();
      int64_t ldq = 0, ldv = 0;
      const float* q = AsF32(qkv + L.q_off(bi, h), L.qkv_ld(), t, d, qf.data(), &ldq);
      const float* v = AsF32(qkv + L.v_off(bi, h), L.qkv_ld(), t, d, vf.data(), &ldv);
      Transposed(qkv + L.k_off(bi, h), L.qkv_ld(), t, d, tp, kt.data());
      // S = q k^T, causal column blocks only.
      RunProduct(isa, {.m = t, .n = tp, .k = d, .a = q, .ars = ldq, .aps = 1, .b = kt.data(),
                       .ldb = tp, .c = s.data(), .ldc = tp, .causal_cols = true});
      for (int64_t i = 0; i < t; ++i) {
        SoftmaxRow(s.data() + i * tp, pr + i * t, i + 1, scale);
        std::fill(pr + i * t + i + 1, pr + (i + 1) * t, 0.0f);
      }
      // ctx = P v over the keys each row block sees.
      Output<T> out{ctx + L.ctx_off(bi, h), L.ctx_ld(), of.data()};
      RunProduct(isa, {.m = t, .n = d, .k = t, .a = pr, .ars = t, .aps = 1, .b = v, .ldb = ldv,
                       .c = out.c(), .ldc = out.ldc(d), .band = Band::kUpTo});
      out.Finish(t, d);
    }
  });
}

template <typename T>
void AttentionBackward(const Layout& L, const T* qkv, const T* grad, const float* probs, T* dqkv,
                       float scale) {
  const Isa& isa = ActiveIsa();
  const int64_t t = L.t, d = L.d, tp = RoundUp(t, kLanes);
  const int64_t tasks = L.b * L.heads;
  ParallelFor(tasks, t * (2 * t + 6 * d), [&](int64_t first, int64_t last) {
    const bool widen = !std::is_same_v<T, float>;
    std::vector<float> vt(d * tp), ds(t * tp);
    std::vector<float> qf(widen ? t * d : 0), kf(widen ? t * d : 0), gf(widen ? t * d : 0),
        of(widen ? t * d : 0);
    for (int64_t task = first; task < last; ++task) {
      const int64_t bi = task / L.heads, h = task % L.heads;
      const float* pr = probs + task * t * t;
      int64_t ldq = 0, ldk = 0, ldg = 0;
      const float* q = AsF32(qkv + L.q_off(bi, h), L.qkv_ld(), t, d, qf.data(), &ldq);
      const float* k = AsF32(qkv + L.k_off(bi, h), L.qkv_ld(), t, d, kf.data(), &ldk);
      const float* g = AsF32(grad + L.ctx_off(bi, h), L.ctx_ld(), t, d, gf.data(), &ldg);
      Transposed(qkv + L.v_off(bi, h), L.qkv_ld(), t, d, tp, vt.data());
      // dP = dO v^T on the causal blocks, then dS = scale * P (dP - rowsum(P dP))
      // in place, zero above the diagonal.
      RunProduct(isa, {.m = t, .n = tp, .k = d, .a = g, .ars = ldg, .aps = 1, .b = vt.data(),
                       .ldb = tp, .c = ds.data(), .ldc = tp, .causal_cols = true});
      for (int64_t i = 0; i < t; ++i) {
        float* row = ds.data() + i * tp;
        SoftmaxBackwardRow(pr + i * t, row, i + 1, scale);
        std::fill(row + i + 1, row + t, 0.0f);
      }
      const int64_t ld = L.qkv_ld();
      // dq = dS k.
      Output<T> dq{dqkv + L.q_off(bi, h), ld, of.data()};
      RunProduct(isa, {.m = t, .n = d, .k = t, .a = ds.data(), .ars = tp, .aps = 1, .b = k,
                       .ldb = ldk, .c = dq.c(), .ldc = dq.ldc(d), .band = Band::kUpTo});
      dq.Finish(t, d);
      // dk = dS^T q.
      Output<T> dk{dqkv + L.k_off(bi, h), ld, of.data()};
      RunProduct(isa, {.m = t, .n = d, .k = t, .a = ds.data(), .ars = 1, .aps = tp, .b = q,
                       .ldb = ldq, .c = dk.c(), .ldc = dk.ldc(d), .band = Band::kFrom});
      dk.Finish(t, d);
      // dv = P^T dO.
      Output<T> dv{dqkv + L.v_off(bi, h), ld, of.data()};
      RunProduct(isa, {.m = t, .n = d, .k = t, .a = pr, .ars = 1, .aps = t, .b = g, .ldb = ldg,
                       .c = dv.c(), .ldc = dv.ldc(d), .band = Band::kFrom});
      dv.Finish(t, d);
    }
  });
}

}  // namespace

absl::Status CpuDeviceKernels::CausalSelfAttention(const Tensor& ctx, const Tensor& probs,
                                                   const Tensor& qkv, int64_t t, int64_t b,
                                                   int64_t heads, int64_t head_dim,
                                                   double scale) {
  const Layout layout{t, b, heads, head_dim};
  float* pr = probs.defined() ? probs.data<float>() : nullptr;
  DispatchFloat(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    AttentionForward<T>(layout, qkv.data<T>(), ctx.data<T>(), pr, static_cast<float>(scale));
  });
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::CausalSelfAttentionBackward(const Tensor& dqkv,
                                                           const Tensor& grad_ctx,
                                                           const Tensor& qkv, const Tensor& probs,
                                                           int64_t t, int64_t b, int64_t heads,
                                                           int64_t head_dim, double scale) {
  const Layout layout{t, b, heads, head_dim};
  DispatchFloat(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    AttentionBackward<T>(layout, qkv.data<T>(), grad_ctx.data<T>(), probs.data<float>(),
                         dqkv.data<T>(), static_cast<float>(scale));
  });
  return absl::OkStatus();
}

}  // namespace tpx::cpu
