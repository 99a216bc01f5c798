// Branch-free float math that the compiler can vectorise in plain loops
// (libm's expf, logf and tanhf are scalar calls per element), a row maximum
// on vectors (ScaledRowMax), and a sum that vectorises without reassociation
// flags (Sum8; Sum8Rows for several short rows at once, bit for bit the
// same). Internal to the CPU kernels.
#ifndef TPX_CORE_CPU_VEC_MATH_H_
#define TPX_CORE_CPU_VEC_MATH_H_

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>

// Compiles a (non-inline; templates too) function twice, for AVX-512
// (x86-64-v4) and for the build's baseline, and picks one when the program
// loads (an ifunc), so hot loops use the widest vectors the CPU has
// without building for one fixed -march.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define TPX_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define TPX_VECTOR_CLONES
#endif

// The math below is called per element inside vectorised loops; a call the
// compiler chose not to inline (it did for bf16 loops) stops the whole loop
// from vectorising.
#if defined(__GNUC__)
#define TPX_VEC_INLINE inline __attribute__((always_inline))
#else
#define TPX_VEC_INLINE inline
#endif

// A lambda that a TPX_VECTOR_CLONES function calls per element: GCC inlines
// a function compiled for the baseline arch into an arch=x86-64-v4 clone
// only when it is always_inline, and a call per element keeps the loop
// scalar (Log and Tanh ran at 6-7 ns an element so).
#if defined(__GNUC__)
#define TPX_ELEMENT_FN __attribute__((always_inline))
#else
#define TPX_ELEMENT_FN
#endif

namespace tpx::cpu {

// Exp's constants, shared with core/cpu/vec_math_avx512.h's Exp16 (which
// must give the same bits).
namespace exp_constants {
// The clamp: 2^n then stays within two normal-exponent factors.
inline constexpr float kMin = -104.0f, kMax = 89.0f;
inline constexpr float kLog2e = 1.44269504088896341f;
// 1.5 * 2^23: adding and subtracting it rounds to an integer.
inline constexpr float kRound = 12582912.0f;
// ln 2 in two parts (Cody-Waite).
inline constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
// The polynomial's coefficients, highest degree first.
inline constexpr float kP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
}  // namespace exp_constants

// e^x with at most ~2 ulp error over the float range (Cody-Waite range
// reduction, degree-6 minimax polynomial on [-ln2/2, ln2/2]). Correct
// limits: e^-inf = 0, e^+inf = +inf, overflow to +inf above ~88.72,
// gradual underflow to subnormals and 0, NaN in gives NaN out.
TPX_VEC_INLINE float Exp(float x) {
  // Clamp so 2^n below stays within two normal-exponent factors. Written as
  // max/min with NaN going to the bound (one vmaxps/vminps each; the NaN is
  // put back at the end), which also keeps the integer conversion below
  // defined. Keeping NaN through the clamp instead made GCC compute the
  // polynomial twice and blend the results.
  using namespace exp_constants;
  float xc = x > kMin ? x : kMin;
  xc = xc < kMax ? xc : kMax;
  // n = round(x / ln2) via the 1.5 * 2^23 trick (exact for |n| < 2^22).
  // The multiply-adds are explicit fused ones, so the result does not
  // depend on whether the compiler contracts them (it does when optimising,
  // not at -O0), and core/cpu/vec_math_avx512.h's Exp16 gives the same bits.
  const float n = std::fma(xc, kLog2e, kRound) - kRound;
  // r = x - n ln2 in two steps for accuracy.
  float r = std::fma(-n, kLn2Hi, xc);
  r = std::fma(-n, kLn2Lo, r);
  float p = kP[0];
#pragma GCC unroll 5
  for (int i = 1; i < 6; ++i) p = std::fma(p, r, kP[i]);
  p = std::fma(p, r * r, r) + 1.0f;
  // Multiply by 2^n as 2^n1 * 2^n2 so n in [-150, 129] never leaves the
  // normal exponent range of either factor.
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t n1 = ni >> 1;  // floor(ni / 2): a shift, no division
  const int32_t n2 = ni - n1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
  const float result = p * s1 * s2;
  return x == x ? result : x;  // NaN in, NaN out
}

// ln x with at most ~2 ulp error (Cephes' logf: x = m 2^e with m in
// [sqrt(1/2), sqrt(2)), ln m = u - u^2 / 2 + u^3 P(u) for u = m - 1 with P
// of degree 8, e ln 2 added in two parts). Branch-free, so loops of it
// vectorise (libm's logf is a scalar call per element). ln 0 = -inf, ln of
// a negative number or NaN is NaN, ln +inf = +inf; subnormals are read
// exactly.
TPX_VEC_INLINE float Log(float x) {
  constexpr float kSqrtHalf = 0.70710678118654752440f;
  // Subnormals scaled into the normal range first (2^23), their exponent
  // corrected below.
  const bool tiny = x < 1.17549435e-38f;
  const float xs = tiny ? x * 8388608.0f : x;
  const uint32_t bits = std::bit_cast<uint32_t>(xs);
  float e = static_cast<float>(static_cast<int32_t>((bits >> 23) & 0xffu) - 126) -
            (tiny ? 23.0f : 0.0f);
  float m = std::bit_cast<float>((bits & 0x007fffffu) | 0x3f000000u);  // [0.5, 1)
  const bool low = m < kSqrtHalf;
  e = low ? e - 1.0f : e;
  m = low ? m + m - 1.0f : m - 1.0f;
  const float z = m * m;
  float p = 7.0376836292e-2f;
  p = std::fma(p, m, -1.1514610310e-1f);
  p = std::fma(p, m, 1.1676998740e-1f);
  p = std::fma(p, m, -1.2420140846e-1f);
  p = std::fma(p, m, 1.4249322787e-1f);
  p = std::fma(p, m, -1.6668057665e-1f);
  p = std::fma(p, m, 2.0000714765e-1f);
  p = std::fma(p, m, -2.4999993993e-1f);
  p = std::fma(p, m, 3.3333331174e-1f);
  float y = p * m * z;
  y = std::fma(e, -2.12194440e-4f, y);
  y = std::fma(z, -0.5f, y);
  float r = std::fma(e, 0.693359375f, m + y);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  r = x == kInf ? kInf : r;
  r = x == 0.0f ? -kInf : r;
  return x < 0.0f || x != x ? std::numeric_limits<float>::quiet_NaN() : r;
}

// tanh x with at most ~3 ulp error (Cephes' tanhf): an odd polynomial below
// |x| = 0.625, 1 - 2 / (e^(2|x|) + 1) with x's sign above (both computed,
// one kept, so loops vectorise). tanh(+-inf) = +-1, tanh(-0) = -0, NaN in
// gives NaN out.
TPX_VEC_INLINE float Tanh(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float big = 1.0f - 2.0f / (Exp(ax + ax) + 1.0f);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = std::fma(p, z, 2.06390887954e-2f);
  p = std::fma(p, z, -5.37397155531e-2f);
  p = std::fma(p, z, 1.33314422036e-1f);
  p = std::fma(p, z, -3.33332819422e-1f);
  // x itself at +-0, whose sign the sum x * (p z) + x would lose.
  const float small = x == 0.0f ? x : std::fma(p * z, x, x);
  return ax >= 0.625f ? (x < 0.0f ? -big : big) : small;
}

// Erf's and GeluGrad's constants, shared with core/cpu/vec_math_avx512.h's
// Erf16 and GeluGrad16 (which must give the same bits).
namespace erf_constants {
// Erf's argument clamp: |erf| rounds to 1 in float beyond.
inline constexpr float kClamp = 4.0f;
// Numerator (odd, applied as x P(x^2)) and denominator Q(x^2), highest
// degree first.
inline constexpr float kP[7] = {
    -2.72614225801306e-10f, 2.77068142495902e-08f,  -2.10102402082508e-06f, -5.69250639462346e-05f,
    -7.34990630326855e-04f, -2.95459980854025e-03f, -1.60960333262415e-02f};
inline constexpr float kQ[5] = {-1.45660718464996e-05f, -2.13374055278905e-04f,
                                -1.68282697438203e-03f, -7.37332916720468e-03f,
                                -1.42647390514189e-02f};
inline constexpr float kSqrtHalf = 0.70710678118654752440f;
inline constexpr float kInvSqrt2Pi = 0.39894228040143267794f;  // phi(0)
// Abramowitz & Stegun 7.1.26: t = 1 / (1 + kT |z|), erfc(|z|) = t P(t) e^(-z^2).
inline constexpr float kT = 0.3275911f;
inline constexpr float kAs[5] = {1.061405429f, -1.453152027f, 1.421413741f, -0.284496736f,
                                 0.254829592f};
}  // namespace erf_constants

// erf(x) with absolute error below 4e-7 (a few ulp near 0, where it
// matters for GeLU): an odd rational function of x on [-4, 4] (numerator
// degree 13, denominator degree 8 in x); |erf| rounds to 1 in float beyond.
// NaN in gives NaN out. The multiply-adds are explicit fused ones, as in
// Exp, so Erf16 gives the same bits at any optimisation level.
TPX_VEC_INLINE float Erf(float x) {
  using namespace erf_constants;
  float xc = x < -kClamp ? -kClamp : x;
  xc = xc > kClamp ? kClamp : xc;
  const float x2 = xc * xc;
  float p = kP[0];
#pragma GCC unroll 6
  for (int i = 1; i < 7; ++i) p = std::fma(p, x2, kP[i]);
  p = p * xc;
  float q = kQ[0];
#pragma GCC unroll 4
  for (int i = 1; i < 5; ++i) q = std::fma(q, x2, kQ[i]);
  const float r = p / q;
  return x == x ? r : x;
}

// Exact GeLU, x * Phi(x), and its derivative Phi(x) + x * phi(x).
TPX_VEC_INLINE float Gelu(float x) { return 0.5f * x * (1.0f + Erf(x * erf_constants::kSqrtHalf)); }
// The derivative takes Phi from erfc(|z|) = t * P(t) * e^(-z^2), t = 1 /
// (1 + p |z|), z = x / sqrt(2) (Abramowitz & Stegun 7.1.26, absolute error
// below 1.5e-7), so Phi and phi share one exponential and the per-element
// cost is about a fifth below Erf's rational function plus Exp. Absolute
// error stays below 3e-7 (vec_math_test.cc).
TPX_VEC_INLINE float GeluGrad(float x) {
  using namespace erf_constants;
  const float z = x * kSqrtHalf;
  const float az = z < 0.0f ? -z : z;
  const float e = Exp(-z * z);
  const float t = 1.0f / std::fma(kT, az, 1.0f);
  float p = kAs[0];
#pragma GCC unroll 4
  for (int i = 1; i < 5; ++i) p = std::fma(p, t, kAs[i]);
  const float half_erfc = 0.5f * (p * t) * e;  // Phi(-|x|)
  const float cdf = z < 0.0f ? half_erfc : 1.0f - half_erfc;
  return std::fma(x, kInvSqrt2Pi * e, cdf);
}

// The maximum of scale * x[0..valid) for 0 <= valid <= n, reading x[0..n)
// a vector at a time: NaN when one of them is NaN, -inf when there are none
// (or all are -inf). Sixteen running maxima in one vector, lanes from
// `valid` on masked, NaN flagged beside them (it never enters the maxima):
// a scalar loop testing each element for NaN stayed unvectorised.
TPX_VEC_INLINE float ScaledRowMax(const float* x, int64_t valid, int64_t n, float scale) {
  using Floats = float __attribute__((vector_size(64)));
  using Ints = int32_t __attribute__((vector_size(64)));
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  const Ints lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  Floats m = Floats{} + kLowest;
  Ints nan = Ints{};
  for (int64_t i = 0; i < valid; i += 16) {
    Floats v = Floats{} + kLowest;
    if (i + 16 <= n) {
      std::memcpy(&v, x + i, sizeof(v));
    } else {
      for (int64_t k = 0; k < n - i; ++k) v[k] = x[i + k];
    }
    v = lane < static_cast<int32_t>(valid - i) ? v * scale : kLowest;
    nan |= v != v;
    m = v > m ? v : m;
  }
  // The lanes in a tree of four steps (a chain of 15 scalar steps was a
  // tenth of a short row's time). NaN never enters m, so the order only
  // picks between +0 and -0, which no caller tells apart.
  for (const Ints perm : {Ints{8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7},
                          Ints{4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11},
                          Ints{2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13},
                          Ints{1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14}}) {
    const Floats o = __builtin_shuffle(m, perm);
    m = o > m ? o : m;
    nan |= __builtin_shuffle(nan, perm);
  }
  return nan[0] != 0 ? std::numeric_limits<float>::quiet_NaN() : m[0];
}

// Sum of f(j) over j in [0, n) with eight independent partial sums
// (vectorises without reassociation flags), combined pairwise as
// core/cpu/reduce_kernels.cc does.
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

// Eight floats as one GCC vector: arithmetic on it is lane by lane, the
// same IEEE operations as on the floats one at a time.
using Float8 = float __attribute__((vector_size(32)));

TPX_VEC_INLINE Float8 LoadFloat8(const float* p) {
  Float8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// R Sum8s at once, bit for bit: sums[r] = Sum8(n, [&](int64_t j) { return
// f1(r, j); }) where f8(r, i) is the Float8 of f1(r, i) .. f1(r, i + 7).
// One Sum8 over a short row (a layer-norm row of 128) waits on its chain of
// additions; R independent chains in one loop overlap. (The vectoriser
// keeps one Sum8's eight partial sums in a register, but spills R of them.)
template <int R, typename F8, typename F1>
TPX_VEC_INLINE void Sum8Rows(int64_t n, F8 f8, F1 f1, float* sums) {
  Float8 acc[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r] = Float8{};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r] += f8(r, i);
  }
  for (int r = 0; r < R; ++r) {
    const Float8 a = acc[r];
    float s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    for (int64_t k = i; k < n; ++k) s += f1(r, k);
    sums[r] = s;
  }
}

}  // namespace tpx::cpu

#endif  // TPX_CORE_CPU_VEC_MATH_H_
