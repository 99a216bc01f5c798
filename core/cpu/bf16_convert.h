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

#include "core/dtype.h"

namespace tpx::cpu {

// out[i] = BF16::FromFloat(in[i]) for i in [0, n). in and out must not overlap.
void FloatToBF16Array(const float* in, BF16* out, int64_t n);

// The implementation FloatToBF16Array uses on this CPU: "avx512bf16" or "portable".
std::string_view FloatToBF16ArrayIsa();

namespace bf16_convert_internal {
// The two implementations, for tests. Avx512Bf16 returns false (converting
// nothing) where the CPU or the build lacks AVX512-BF16.
void Portable(const float* in, BF16* out, int64_t n);
bool Avx512Bf16(const float* in, BF16* out, int64_t n);
}  // namespace bf16_convert_internal

}  // namespace tpx::cpu

#endif  // TPX_CORE_CPU_BF16_CONVERT_H_
