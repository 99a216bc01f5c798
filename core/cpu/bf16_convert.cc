#include "core/cpu/bf16_convert.h"

#include <algorithm>

#include "core/cpu/vec_math.h"

namespace tpx::cpu {
namespace bf16_convert_internal {
namespace {

#if defined(TPX_HAVE_AVX512BF16_PATH)
#define TPX_BF16_TARGET TPX_AVX512BF16_TARGET

// Up to 16 elements under a mask.
TPX_BF16_TARGET inline void ConvertMasked16(const float* in, BF16* out, int n) {
  const __mmask16 m = static_cast<__mmask16>((1u << n) - 1u);
  StoreBF16Lanes(out, _mm512_maskz_loadu_ps(m, in), m);
}

TPX_BF16_TARGET void ConvertAvx512Bf16(const float* in, BF16* out, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_loadu_ps(in + i);
    const __m512 hi = _mm512_loadu_ps(in + i + 16);
    if ((_mm512_fpclass_ps_mask(lo, 0x20) | _mm512_fpclass_ps_mask(hi, 0x20)) != 0) {
      for (int64_t j = i; j < i + 32; ++j) out[j].bits = FloatToBF16(in[j]);
      continue;
    }
    _mm512_storeu_si512(out + i, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
  }
  for (; i < n; i += 16) {
    ConvertMasked16(in + i, out + i, static_cast<int>(std::min<int64_t>(16, n - i)));
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
