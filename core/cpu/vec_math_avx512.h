// core/cpu/vec_math.h's e^x sixteen lanes at a time in AVX-512 intrinsics,
// for loops that are mostly exponentials (attention's softmax rows). The
// compiler's vectorisation of the scalar Exp scales by 2^n with nine
// integer and float instructions where AVX-512 has one (vscalefps). Same
// range reduction, polynomial and limits, and the same bits
// (core/cpu/vec_math_avx512_test.cc checks every input on a fine grid and
// the limits: should a compiler contract Exp's multiplies and adds
// differently, it fails). Callers run it only on CPUs with AVX-512F, from
// functions carrying TPX_AVX512F_TARGET. Internal to the CPU kernels.
#ifndef TPX_CORE_CPU_VEC_MATH_AVX512_H_
#define TPX_CORE_CPU_VEC_MATH_AVX512_H_

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

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

}  // namespace tpx::cpu

#endif  // defined(__x86_64__) && defined(__GNUC__)
#endif  // TPX_CORE_CPU_VEC_MATH_AVX512_H_
