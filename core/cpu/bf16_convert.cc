#include "core/cpu/bf16_convert.h"

#include "core/cpu/vec_math.h"
#include "core/lane_mask.h"

namespace tpx::cpu {
namespace bf16_convert_internal {
namespace {

#if defined(TPX_HAVE_AVX512BF16_PATH)
#define TPX_BF16_TARGET TPX_AVX512BF16_TARGET

TPX_BF16_TARGET void ConvertAvx512Bf16(const float* in, BF16* out, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    StoreBF16Pair(out + i, _mm512_loadu_ps(in + i), _mm512_loadu_ps(in + i + 16));
  }
  for (; i < n; i += 16) {
    const __mmask16 m = FirstLanes(n - i);
    StoreBF16Lanes(out + i, _mm512_maskz_loadu_ps(m, in + i), m);
  }
}
#endif

}  // namespace

TPX_VECTOR_CLONES void Portable(const float* __restrict in, BF16* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i].bits = FloatToBF16(in[i]);
}

bool Avx512Bf16(const float* in, BF16* out, int64_t n) {
#if defined(TPX_HAVE_AVX512BF16_PATH)
  if (!CpuHasAvx512Bf16()) return false;
  ConvertAvx512Bf16(in, out, n);
  return true;
#else
  return false;
#endif
}

}  // namespace bf16_convert_internal

namespace {

using ConvertFn = void (*)(const float*, BF16*, int64_t);

struct Choice {
  ConvertFn fn;
  std::string_view isa;
};

Choice Choose() {
#if defined(TPX_HAVE_AVX512BF16_PATH)
  if (CpuHasAvx512Bf16()) {
    return {bf16_convert_internal::ConvertAvx512Bf16, "avx512bf16"};
  }
#endif
  return {bf16_convert_internal::Portable, "portable"};
}

const Choice& Chosen() {
  static const Choice choice = Choose();
  return choice;
}

}  // namespace

void FloatToBF16Array(const float* in, BF16* out, int64_t n) { Chosen().fn(in, out, n); }

std::string_view FloatToBF16ArrayIsa() { return Chosen().isa; }

}  // namespace tpx::cpu
