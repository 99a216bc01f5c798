// Bulk f32 -> bf16 conversion for the CPU kernels, bit for bit the scalar
// FloatToBF16 of core/dtype.h (round to nearest even, NaN kept quiet with
// its sign, subnormals rounded, not flushed).
//
//   float block[256];  // a row piece computed in f32
//   FloatToBF16Array(block, out, n);
//
// On CPUs with AVX512-BF16 (chosen when the program first converts) one
// instruction rounds 32 floats, against about ten vector instructions per
// 16 for the integer formula; vectors holding a subnormal, which that
// instruction flushes to zero, take a few more (OffsetSubnormals). Elsewhere
// the formula runs, vectorised for the widest ISA present (TPX_VECTOR_CLONES).
// Row kernels use it through StoreRow (core/cpu/loops.h).
#ifndef TPX_CORE_CPU_BF16_CONVERT_H_
#define TPX_CORE_CPU_BF16_CONVERT_H_

#include <cstdint>
#include <string_view>

#include "core/cpu_features.h"
#include "core/dtype.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TPX_HAVE_AVX512BF16_PATH 1
#endif

namespace tpx::cpu {

// out[i] = BF16::FromFloat(in[i]) for i in [0, n). in and out must not overlap.
void FloatToBF16Array(const float* in, BF16* out, int64_t n);

// The implementation FloatToBF16Array uses on this CPU: "avx512bf16" or "portable".
std::string_view FloatToBF16ArrayIsa();

#if defined(TPX_HAVE_AVX512BF16_PATH)
// The AVX512-BF16 conversions treat subnormal inputs as zero. bf16 has f32's
// exponent range, so a subnormal x rounds to a bf16 subnormal, a multiple of
// 2^-133. x + copysign(2^-126, x) is exact and normal with the smallest
// exponent, whose bf16 spacing is 2^-133 as well, and 2^-126 is an even
// multiple of it: its rounding is copysign(2^-126, x) plus x's, even ties
// alike. Taking one from the result's exponent field (bits 0x0080 of the
// bf16 word) then gives x's rounding, also where it carried up to 2^-126.
// With the MXCSR's denormals-are-zero mode on (programs built with
// -ffast-math start that way) vfpclassps found no subnormals on a Zen 5
// core, so they come out as zero, as that program's own arithmetic treats
// them; the portable formula still rounds them.
//
// v with copysign(2^-126, v) added in the lanes of `subnormal`: for a
// subnormal, one more in the exponent field of its bits.
TPX_AVX512BF16_TARGET inline __m512 OffsetSubnormals(__m512 v, __mmask16 subnormal) {
  const __m512i bits = _mm512_castps_si512(v);
  return _mm512_castsi512_ps(
      _mm512_mask_add_epi32(bits, subnormal, bits, _mm512_set1_epi32(0x00800000)));
}

// The 16 lanes of v rounded as FloatToBF16Array rounds (a lane outside
// `mask` holding a subnormal may come out as zero): one vcvtneps2bf16, and
// where a lane under the mask is subnormal, OffsetSubnormals before it and
// the offset's exponent taken back after.
TPX_AVX512BF16_TARGET inline __m256i RoundBF16Lanes(__m512 v, __mmask16 mask = 0xffff) {
  const __mmask16 subnormal = _mm512_mask_fpclass_ps_mask(mask, v, 0x20);  // 0x20: subnormal
  if (subnormal == 0) return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
  const __m256i r = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(OffsetSubnormals(v, subnormal)));
  return _mm256_mask_sub_epi16(r, subnormal, r, _mm256_set1_epi16(0x0080));
}

// The lanes of v under `mask` rounded as FloatToBF16Array rounds, into
// out[j] for those lanes (the others are not written).
TPX_AVX512BF16_TARGET inline void StoreBF16Lanes(BF16* out, __m512 v, __mmask16 mask) {
  _mm256_mask_storeu_epi16(out, mask, RoundBF16Lanes(v, mask));
}

// 32 values, lo then hi, rounded as FloatToBF16Array rounds: one
// vcvtne2ps2bf16, with subnormals as in RoundBF16Lanes.
TPX_AVX512BF16_TARGET inline __m512i RoundBF16Pair(__m512 lo, __m512 hi) {
  const __mmask16 sub_lo = _mm512_fpclass_ps_mask(lo, 0x20),
                  sub_hi = _mm512_fpclass_ps_mask(hi, 0x20);
  if ((sub_lo | sub_hi) == 0) return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
  const __m512i r = reinterpret_cast<__m512i>(
      _mm512_cvtne2ps_pbh(OffsetSubnormals(hi, sub_hi), OffsetSubnormals(lo, sub_lo)));
  return _mm512_mask_sub_epi16(r, _mm512_kunpackw(sub_hi, sub_lo), r, _mm512_set1_epi16(0x0080));
}

// RoundBF16Pair(lo, hi) into out[0..32) with one 64-byte store.
TPX_AVX512BF16_TARGET inline void StoreBF16Pair(BF16* out, __m512 lo, __m512 hi) {
  _mm512_storeu_si512(out, RoundBF16Pair(lo, hi));
}
#endif

namespace bf16_convert_internal {
// The two implementations, for tests. Avx512Bf16 returns false (converting
// nothing) where the CPU or the build lacks AVX512-BF16.
void Portable(const float* in, BF16* out, int64_t n);
bool Avx512Bf16(const float* in, BF16* out, int64_t n);
}  // namespace bf16_convert_internal

}  // namespace tpx::cpu

#endif  // TPX_CORE_CPU_BF16_CONVERT_H_
