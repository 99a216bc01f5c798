// The in-register transpose of a 16 x 16 block of 32-bit elements (AVX-512
// F, chosen at run time by the callers), for the CPU kernels:
//
//   __m512 r[16];  // rows of the block
//   Transpose16x16(r);  // now its columns
#ifndef TPX_CORE_CPU_TRANSPOSE16X16_H_
#define TPX_CORE_CPU_TRANSPOSE16X16_H_

#include <immintrin.h>

#include "core/cpu_features.h"

namespace tpx::cpu {

// GCC 12's unmasked shuffle intrinsics pass an undefined vector as the
// (unused) masked-off source, which -Wmaybe-uninitialized reports.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// r[0..16) = the columns of the 16 x 16 block whose rows are r[0..16):
// 32-bit pairs, then 64-bit pairs within each 128-bit lane, then lanes.
TPX_AVX512F_TARGET inline void Transpose16x16(__m512 (&r)[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int k = 0; k < 16; k += 2) {
    t[k] = _mm512_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm512_unpackhi_ps(r[k], r[k + 1]);
  }
  // Group g (rows 4g .. 4g + 3): u[4g + c] holds, in lane L, column 4L + c.
  __m512 u[16];
#pragma GCC unroll 4
  for (int g = 0; g < 16; g += 4) {
    const __m512d a = _mm512_castps_pd(t[g]), b = _mm512_castps_pd(t[g + 1]);
    const __m512d c = _mm512_castps_pd(t[g + 2]), e = _mm512_castps_pd(t[g + 3]);
    u[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, e));
    u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, e));
  }
  // Lanes 0 and 2 (0x88), 1 and 3 (0xdd) of groups 0, 1 and of groups 2, 3,
  // then the same across the two halves: column 4L + c is lane L of every
  // group's u[4g + c].
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512 even01 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
    const __m512 odd01 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
    const __m512 even23 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 odd23 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
    r[c] = _mm512_shuffle_f32x4(even01, even23, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(even01, even23, 0xdd);
    r[4 + c] = _mm512_shuffle_f32x4(odd01, odd23, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(odd01, odd23, 0xdd);
  }
}

#pragma GCC diagnostic pop

}  // namespace tpx::cpu

#endif  // TPX_CORE_CPU_TRANSPOSE16X16_H_
