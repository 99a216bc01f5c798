#include "core/cpu/vec_math_avx512.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/cpu/vec_math.h"
#include "gtest/gtest.h"

#if defined(TPX_HAVE_AVX512_EXP)
namespace tpx::cpu {
namespace {

TPX_AVX512F_TARGET std::vector<float> Exp16All(const std::vector<float>& in) {
  std::vector<float> out(in.size());
  for (size_t i = 0; i < in.size(); i += 16) {
    _mm512_storeu_ps(out.data() + i, Exp16(_mm512_loadu_ps(in.data() + i)));
  }
  return out;
}

// Bit for bit the scalar Exp over its whole range: the same operations,
// the scaling by 2^n exact in both while normal and rounded once where the
// result is subnormal; the same limits, zeros, subnormals and NaNs.
TEST(VecMathAvx512Test, Exp16IsScalarExpBitForBit) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "no AVX-512F on this CPU";
  std::vector<float> in;
  for (int i = -120000; i <= 100000; ++i) in.push_back(static_cast<float>(i) / 1000.0f);
  for (float s : {0.0f, -0.0f, 1e-30f, -1e-40f, 88.72f, 88.73f, 1e10f, -1e10f, -103.97f,
                  -87.4f, -100.3f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(),
                  -std::numeric_limits<float>::quiet_NaN()}) {
    in.push_back(s);
  }
  while (in.size() % 16 != 0) in.push_back(1.0f);
  const std::vector<float> got = Exp16All(in);
  for (size_t i = 0; i < in.size(); ++i) {
    const float want = Exp(in[i]);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got[i])) << in[i];
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want))
        << in[i] << ": " << got[i] << " vs " << want;
  }
}

}  // namespace
}  // namespace tpx::cpu
#endif
