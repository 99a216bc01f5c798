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
#include <type_traits>
#include <utility>

#include "core/cpu/vec_math.h"
#include "core/cpu_features.h"

#define TPX_HAVE_AVX512_EXP 1

namespace tpx::cpu {

// Each function works on N vectors at once (the ...N forms, in place),
// every step for all N before the next: one vector's chain of dependent
// steps (a polynomial, then a division) is about 70 cycles long, and a loop
// over single vectors waited on it (the bias + GeLU rows at about a cycle
// per value). The single-vector forms are N = 1.
//
// ForEachVector(f) calls f(std::integral_constant<int, i>{}) for i in
// [0, N), inlined: the arrays of N vectors are then indexed by constants,
// which the compiler keeps in registers (indexed by a loop, even an
// unrolled one, they stayed on the stack, and the loads and stores cost
// more than the steps). Its lambdas carry TPX_VECTOR_STEP.
#define TPX_VECTOR_STEP TPX_AVX512F_TARGET __attribute__((always_inline))

template <int N, typename F>
TPX_VECTOR_STEP inline void ForEachVector(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) TPX_VECTOR_STEP {
    (f(std::integral_constant<int, I>{}), ...);
  }
  (std::make_integer_sequence<int, N>{});
}

// e^x: clamp, Cody-Waite reduction and the degree-6 polynomial of Exp, then
// p * 2^n in one vscalefps (Exp's p * 2^n1 * 2^n2 is exact while normal and
// rounded once where the result is subnormal, as vscalefps rounds it).
// e^-inf = 0, e^+inf = +inf, NaN in gives NaN out.
template <int N>
TPX_VECTOR_STEP inline void Exp16N(__m512 (&x)[N]) {
  // NaN goes to the bound here (maxps returns its second operand) and is
  // put back at the end. The zero-masking forms with every lane: the plain
  // ones start from _mm512_undefined_ps(), which GCC 12 reports as used
  // uninitialized.
  using namespace exp_constants;
  constexpr __mmask16 kAll = 0xffff;
  const __m512 round = _mm512_set1_ps(kRound);
  __m512 n[N], r[N], p[N];
  ForEachVector<N>([&](auto i) TPX_VECTOR_STEP {
    __m512 xc = _mm512_maskz_max_ps(kAll, x[i], _mm512_set1_ps(kMin));
    xc = _mm512_maskz_min_ps(kAll, xc, _mm512_set1_ps(kMax));
    n[i] = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(kLog2e), round), round);
    r[i] = _mm512_fnmadd_ps(n[i], _mm512_set1_ps(kLn2Hi), xc);
    r[i] = _mm512_fnmadd_ps(n[i], _mm512_set1_ps(kLn2Lo), r[i]);
    p[i] = _mm512_set1_ps(kP[0]);
  });
#pragma GCC unroll 5
  for (int k = 1; k < 6; ++k) {
    ForEachVector<N>(
        [&](auto i) TPX_VECTOR_STEP { p[i] = _mm512_fmadd_ps(p[i], r[i], _mm512_set1_ps(kP[k])); });
  }
  ForEachVector<N>([&](auto i) TPX_VECTOR_STEP {
    p[i] =
        _mm512_add_ps(_mm512_fmadd_ps(p[i], _mm512_mul_ps(r[i], r[i]), r[i]), _mm512_set1_ps(1.0f));
    const __m512 result = _mm512_maskz_scalef_ps(kAll, p[i], n[i]);
    x[i] = _mm512_mask_mov_ps(result, _mm512_cmp_ps_mask(x[i], x[i], _CMP_UNORD_Q), x[i]);
  });
}

// erf(x) as Erf: the clamp, the rational function and NaN kept.
template <int N>
TPX_VECTOR_STEP inline void Erf16N(__m512 (&x)[N]) {
  using namespace erf_constants;
  constexpr __mmask16 kAll = 0xffff;
  // NaN goes to the bound (maxps returns its second operand) and is put
  // back at the end, as in Exp16N.
  __m512 xc[N], x2[N], p[N], q[N];
  ForEachVector<N>([&](auto i) TPX_VECTOR_STEP {
    xc[i] = _mm512_maskz_max_ps(kAll, x[i], _mm512_set1_ps(-kClamp));
    xc[i] = _mm512_maskz_min_ps(kAll, xc[i], _mm512_set1_ps(kClamp));
    x2[i] = _mm512_mul_ps(xc[i], xc[i]);
    p[i] = _mm512_set1_ps(kP[0]);
    q[i] = _mm512_set1_ps(kQ[0]);
  });
#pragma GCC unroll 6
  for (int k = 1; k < 7; ++k) {
    ForEachVector<N>([&](auto i) TPX_VECTOR_STEP {
      p[i] = _mm512_fmadd_ps(p[i], x2[i], _mm512_set1_ps(kP[k]));
      if (k < 5) q[i] = _mm512_fmadd_ps(q[i], x2[i], _mm512_set1_ps(kQ[k]));
    });
  }
  ForEachVector<N>([&](auto i) TPX_VECTOR_STEP {
    const __m512 r = _mm512_div_ps(_mm512_mul_ps(p[i], xc[i]), q[i]);
    x[i] = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x[i], x[i], _CMP_UNORD_Q), x[i]);
  });
}

// Gelu: 0.5 x (1 + erf(x / sqrt(2))), in Gelu's order.
template <int N>
TPX_VECTOR_STEP inline void Gelu16N(__m512 (&x)[N]) {
  __m512 erf[N];
  ForEachVector<N>([&](auto i) TPX_VECTOR_STEP {
    erf[i] = _mm512_mul_ps(x[i], _mm512_set1_ps(erf_constants::kSqrtHalf));
  });
  Erf16N(erf);
  ForEachVector<N>([&](auto i) TPX_VECTOR_STEP {
    x[i] = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x[i]),
                         _mm512_add_ps(_mm512_set1_ps(1.0f), erf[i]));
  });
}

// GeluGrad: Phi(x) + x phi(x) from one exponential, in GeluGrad's order.
template <int N>
TPX_VECTOR_STEP inline void GeluGrad16N(__m512 (&x)[N]) {
  using namespace erf_constants;
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 e[N], t[N], p[N];
  __mmask16 negative[N];
  ForEachVector<N>([&](auto i) TPX_VECTOR_STEP {
    const __m512 z = _mm512_mul_ps(x[i], _mm512_set1_ps(kSqrtHalf));
    negative[i] = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ);
    // |z| by its sign bit: GeluGrad's -z for z < 0 (for -0 and NaN the
    // scalar keeps z, which gives t the same value).
    const __m512i zi = _mm512_castps_si512(z);
    const __m512 az = _mm512_castsi512_ps(_mm512_and_si512(zi, _mm512_set1_epi32(0x7fffffff)));
    const __m512 minus_z = _mm512_castsi512_ps(_mm512_xor_si512(zi, _mm512_set1_epi32(INT32_MIN)));
    e[i] = _mm512_mul_ps(minus_z, z);
    t[i] = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(kT), az, one));
    p[i] = _mm512_set1_ps(kAs[0]);
  });
  Exp16N(e);
#pragma GCC unroll 4
  for (int k = 1; k < 5; ++k) {
    ForEachVector<N>([&](auto i) TPX_VECTOR_STEP {
      p[i] = _mm512_fmadd_ps(p[i], t[i], _mm512_set1_ps(kAs[k]));
    });
  }
  ForEachVector<N>([&](auto i) TPX_VECTOR_STEP {
    const __m512 half_erfc =
        _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), _mm512_mul_ps(p[i], t[i])), e[i]);
    const __m512 cdf = _mm512_mask_mov_ps(_mm512_sub_ps(one, half_erfc), negative[i], half_erfc);
    x[i] = _mm512_fmadd_ps(x[i], _mm512_mul_ps(_mm512_set1_ps(kInvSqrt2Pi), e[i]), cdf);
  });
}

#undef TPX_VECTOR_STEP

// The single-vector forms.
TPX_AVX512F_TARGET inline __m512 Exp16(__m512 x) {
  __m512 v[1] = {x};
  Exp16N(v);
  return v[0];
}
TPX_AVX512F_TARGET inline __m512 Erf16(__m512 x) {
  __m512 v[1] = {x};
  Erf16N(v);
  return v[0];
}
TPX_AVX512F_TARGET inline __m512 Gelu16(__m512 x) {
  __m512 v[1] = {x};
  Gelu16N(v);
  return v[0];
}
TPX_AVX512F_TARGET inline __m512 GeluGrad16(__m512 x) {
  __m512 v[1] = {x};
  GeluGrad16N(v);
  return v[0];
}

}  // namespace tpx::cpu

#endif  // defined(__x86_64__) && defined(__GNUC__)
#endif  // TPX_CORE_CPU_VEC_MATH_AVX512_H_
