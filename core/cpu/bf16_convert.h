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
// instruction flushes to zero, take the formula instead. Elsewhere the
// formula runs, vectorised for the widest ISA present (TPX_VECTOR_CLONES).
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
// The 16 lanes of v rounded as FloatToBF16Array rounds: one vcvtneps2bf16,
// or the integer formula in vector form when a lane under `mask` holds a
// subnormal, which that instruction flushes to zero (so a subnormal in a
// lane outside the mask may come out as zero).
TPX_AVX512BF16_TARGET inline __m256i RoundBF16Lanes(__m512 v, __mmask16 mask = 0xffff) {
  if (_mm512_mask_fpclass_ps_mask(mask, v, 0x20) != 0) {  // 0x20: subnormal
    // FloatToBF16's integer formula on all lanes at once (rows of softmax
    // probabilities hold subnormals often enough that a lane-by-lane loop
    // here cost more than the rest of their rounding). Written out in
    // intrinsics: a loop of FloatToBF16 over the 16 lanes vectorises in
    // 256-bit halves, and the fused attention's rounding then took 4.4-4.8%
    // of a bf16 GPT step's samples against 3.7% for this.
    // The zero-masking forms with every lane: GCC 12 reports the plain
    // ones' undefined pass-through vector as used uninitialized.
    constexpr __mmask16 kAll = 0xffff;
    const __m512i u = _mm512_castps_si512(v);
    const __m512i high = _mm512_maskz_srli_epi32(kAll, u, 16);
    const __m512i rounded =
        _mm512_maskz_srli_epi32(kAll,
                                _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),
                                                 _mm512_and_si512(high, _mm512_set1_epi32(1))),
                                16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    const __m512i bits =
        _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(high, _mm512_set1_epi32(0x40)));
    return _mm512_maskz_cvtepi32_epi16(kAll, bits);
  }
  return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
}

// The lanes of v under `mask` rounded as FloatToBF16Array rounds, into
// out[j] for those lanes (the others are not written).
TPX_AVX512BF16_TARGET inline void StoreBF16Lanes(BF16* out, __m512 v, __mmask16 mask) {
  _mm256_mask_storeu_epi16(out, mask, RoundBF16Lanes(v, mask));
}

// 32 values, lo then hi, rounded as FloatToBF16Array rounds: one
// vcvtne2ps2bf16, or RoundBF16Lanes for each half when either holds a
// subnormal.
TPX_AVX512BF16_TARGET inline __m512i RoundBF16Pair(__m512 lo, __m512 hi) {
  if ((_mm512_fpclass_ps_mask(lo, 0x20) | _mm512_fpclass_ps_mask(hi, 0x20)) != 0) {
    // The zero-masking inserts: GCC 12's plain ones (and zext) start from
    // an undefined vector it reports as used uninitialized.
    const __m512i low =
        _mm512_maskz_inserti64x4(0xff, _mm512_setzero_si512(), RoundBF16Lanes(lo), 0);
    return _mm512_maskz_inserti64x4(0xff, low, RoundBF16Lanes(hi), 1);
  }
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
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
