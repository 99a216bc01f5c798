// core/cpu/vec_math.h's e^x, erf, GeLU and GeLU's derivative sixteen lanes
// at a time in AVX-512 intrinsics, for loops that are mostly these
// functions (attention's softmax rows, the MLP's bias + GeLU). The
// compiler's vectorisation of the scalar Exp scales by 2^n with nine
// integer and float instructions where AVX-512 has one (vscalefps), and its
// vectorisation of the GeLU rows ran two vectors an iteration with their
// constants spilled to the stack. Same operations, limits and bits as the
// scalar functions (core/cpu/vec_math_avx512_test.cc checks every input on
// a fine grid and the limits: should a compiler contract their multiplies
// and adds differently, it fails). Callers run them only on CPUs with
// AVX-512F, from functions carrying TPX_AVX512F_TARGET. Internal to the CPU
// kernels.
#ifndef TPX_CORE_CPU_VEC_MATH_AVX512_H_
#define TPX_CORE_CPU_VEC_MATH_AVX512_H_

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <cstdint>

#include "core/cpu/vec_math.h"
#include "core/cpu_features.h"

#define TPX_HAVE_AVX512_EXP 1

namespace tpx::cpu {

// e^x: clamp, Cody-Waite reduction and the degree-6 polynomial of Exp, then
// p * 2^n in one vscalefps (Exp's p * 2^n1 * 2^n2 is exact while normal and
// rounded once where the result is subnormal, as vscalefps rounds it).
// e^-inf = 0, e^+inf = +inf, NaN in gives NaN out.
TPX_AVX512F_TARGET inline __m512 Exp16(__m512 x) {
  // NaN goes to the bound here (maxps returns its second operand) and is
  // put back at the end. The zero-masking forms with every lane: the plain
  // ones start from _mm512_undefined_ps(), which GCC 12 reports as used
  // uninitialized.
  using namespace exp_constants;
  constexpr __mmask16 kAll = 0xffff;
  __m512 xc = _mm512_maskz_max_ps(kAll, x, _mm512_set1_ps(kMin));
  xc = _mm512_maskz_min_ps(kAll, xc, _mm512_set1_ps(kMax));
  const __m512 round = _mm512_set1_ps(kRound);
  const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(kLog2e), round), round);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kP[0]);
#pragma GCC unroll 5
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP[i]));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  const __m512 result = _mm512_maskz_scalef_ps(kAll, p, n);
  return _mm512_mask_mov_ps(result, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

// erf(x) as Erf: the clamp, the rational function and NaN kept.
TPX_AVX512F_TARGET inline __m512 Erf16(__m512 x) {
  using namespace erf_constants;
  constexpr __mmask16 kAll = 0xffff;
  // NaN goes to the bound (maxps returns its second operand) and is put
  // back at the end, as in Exp16.
  __m512 xc = _mm512_maskz_max_ps(kAll, x, _mm512_set1_ps(-kClamp));
  xc = _mm512_maskz_min_ps(kAll, xc, _mm512_set1_ps(kClamp));
  const __m512 x2 = _mm512_mul_ps(xc, xc);
  __m512 p = _mm512_set1_ps(kP[0]);
#pragma GCC unroll 6
  for (int i = 1; i < 7; ++i) p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(kP[i]));
  p = _mm512_mul_ps(p, xc);
  __m512 q = _mm512_set1_ps(kQ[0]);
#pragma GCC unroll 4
  for (int i = 1; i < 5; ++i) q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(kQ[i]));
  const __m512 r = _mm512_div_ps(p, q);
  return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

// Gelu: 0.5 x (1 + erf(x / sqrt(2))), in Gelu's order.
TPX_AVX512F_TARGET inline __m512 Gelu16(__m512 x) {
  const __m512 erf = Erf16(_mm512_mul_ps(x, _mm512_set1_ps(erf_constants::kSqrtHalf)));
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x),
                       _mm512_add_ps(_mm512_set1_ps(1.0f), erf));
}

// GeluGrad: Phi(x) + x phi(x) from one exponential, in GeluGrad's order.
TPX_AVX512F_TARGET inline __m512 GeluGrad16(__m512 x) {
  using namespace erf_constants;
  const __m512 z = _mm512_mul_ps(x, _mm512_set1_ps(kSqrtHalf));
  const __mmask16 negative = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ);
  // |z| by its sign bit: GeluGrad's -z for z < 0 (for -0 and NaN the
  // scalar keeps z, which gives t the same value).
  const __m512i zi = _mm512_castps_si512(z);
  const __m512 az = _mm512_castsi512_ps(_mm512_and_si512(zi, _mm512_set1_epi32(0x7fffffff)));
  const __m512 minus_z = _mm512_castsi512_ps(_mm512_xor_si512(zi, _mm512_set1_epi32(INT32_MIN)));
  const __m512 e = Exp16(_mm512_mul_ps(minus_z, z));
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(kT), az, one));
  __m512 p = _mm512_set1_ps(kAs[0]);
#pragma GCC unroll 4
  for (int i = 1; i < 5; ++i) p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(kAs[i]));
  const __m512 half_erfc =
      _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), _mm512_mul_ps(p, t)), e);
  const __m512 cdf = _mm512_mask_mov_ps(_mm512_sub_ps(one, half_erfc), negative, half_erfc);
  return _mm512_fmadd_ps(x, _mm512_mul_ps(_mm512_set1_ps(kInvSqrt2Pi), e), cdf);
}

}  // namespace tpx::cpu

#endif  // defined(__x86_64__) && defined(__GNUC__)
#endif  // TPX_CORE_CPU_VEC_MATH_AVX512_H_
