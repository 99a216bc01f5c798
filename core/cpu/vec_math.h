// Branch-free float math that the compiler can vectorise in plain loops
// (libm's expf is a scalar call per element), and a sum that vectorises
// without reassociation flags (Sum8; Sum8Rows for several short rows at
// once, bit for bit the same). Internal to the CPU kernels.
#ifndef TPX_CORE_CPU_VEC_MATH_H_
#define TPX_CORE_CPU_VEC_MATH_H_

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

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

// erf(x) with absolute error below 4e-7 (a few ulp near 0, where it
// matters for GeLU): an odd rational function of x on [-4, 4] (numerator
// degree 13, denominator degree 8 in x); |erf| rounds to 1 in float beyond.
// NaN in gives NaN out.
TPX_VEC_INLINE float Erf(float x) {
  float xc = x < -4.0f ? -4.0f : x;
  xc = xc > 4.0f ? 4.0f : xc;
  const float x2 = xc * xc;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  p = p * xc;
  float q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  const float r = p / q;
  return x == x ? r : x;
}

// Exact GeLU, x * Phi(x), and its derivative Phi(x) + x * phi(x).
TPX_VEC_INLINE float Gelu(float x) { return 0.5f * x * (1.0f + Erf(x * 0.70710678118654752440f)); }
// The derivative takes Phi from erfc(|z|) = t * P(t) * e^(-z^2), t = 1 /
// (1 + p |z|), z = x / sqrt(2) (Abramowitz & Stegun 7.1.26, absolute error
// below 1.5e-7), so Phi and phi share one exponential and the per-element
// cost is about a fifth below Erf's rational function plus Exp. Absolute
// error stays below 3e-7 (vec_math_test.cc).
TPX_VEC_INLINE float GeluGrad(float x) {
  const float z = x * 0.70710678118654752440f;
  const float az = z < 0.0f ? -z : z;
  const float e = Exp(-z * z);
  const float t = 1.0f / (1.0f + 0.3275911f * az);
  float p = 1.061405429f;
  p = p * t + -1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t + -0.284496736f;
  p = p * t + 0.254829592f;
  const float half_erfc = 0.5f * (p * t) * e;  // Phi(-|x|)
  const float cdf = z < 0.0f ? half_erfc : 1.0f - half_erfc;
  return cdf + x * (0.39894228040143267794f * e);
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
