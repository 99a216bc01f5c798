#include "rng/philox.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace tpx::rng {
namespace {

// Known-answer vectors of Philox4x32-10 (Random123 kat_vectors).
struct Kat {
  Philox4x32 ctr;
  uint32_t k0, k1;
  Philox4x32 expected;
};

TEST(Philox, KnownAnswerVectors) {
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Kat& k : kats) {
    const Philox4x32 got = Philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(got.v[i], k.expected.v[i]) << std::hex << "ctr0=" << k.ctr.v[0] << " lane " << i;
    }
  }
}

TEST(Philox, IsConstexpr) {
  constexpr Philox4x32 r = Philox4x32_10(Philox4x32{{0, 0, 0, 0}}, 0, 0);
  static_assert(r.v[0] == 0x6627e8d5u);
  EXPECT_EQ(r.v[3], 0x9b00dbd8u);
}

TEST(Philox, CounterLayoutIsBlockThenStreamKeyIsSeed) {
  const uint64_t seed = 0x0123456789abcdefull, stream = 0xfedcba9876543210ull, block = 77;
  const Philox4x32 a = PhiloxBlock(seed, stream, block);
  const Philox4x32 b = Philox4x32_10(Philox4x32{{77, 0, 0x76543210u, 0xfedcba98u}},
                                     0x89abcdefu, 0x01234567u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a.v[i], b.v[i]);
}

TEST(Philox, FillsMatchPerElementFunctionsAtAnyStart) {
  const uint64_t seed = 42, stream = 3;
  for (uint64_t first : {0ull, 1ull, 2ull, 3ull, 5ull, 1000001ull}) {
    for (int64_t n : {0, 1, 3, 7, 64}) {
      std::vector<float> u(n), z(n);
      FillUniform(u.data(), n, seed, stream, first);
      FillNormal(z.data(), n, seed, stream, first);
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_EQ(u[j], UniformAt(seed, stream, first + j));
        EXPECT_EQ(z[j], NormalAt(seed, stream, first + j));
      }
    }
  }
}

TEST(Philox, UniformRangeAndMoments) {
  const int64_t n = 1 << 18;
  std::vector<float> u(n), z(n);
  FillUniform(u.data(), n, 7, 0, 0);
  FillNormal(z.data(), n, 7, 0, 0);
  double su = 0, sz = 0, szz = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_GE(u[i], 0.f);
    ASSERT_LT(u[i], 1.f);
    ASSERT_TRUE(std::isfinite(z[i]));
    su += u[i];
    sz += z[i];
    szz += double(z[i]) * z[i];
  }
  EXPECT_NEAR(su / n, 0.5, 0.005);
  EXPECT_NEAR(sz / n, 0.0, 0.01);
  EXPECT_NEAR(szz / n, 1.0, 0.01);
}

TEST(Philox, StreamsAndSeedsDiffer) {
  EXPECT_NE(WordAt(1, 0, 0), WordAt(2, 0, 0));
  EXPECT_NE(WordAt(1, 0, 0), WordAt(1, 1, 0));
  EXPECT_NE(WordAt(1, 0, 0), WordAt(1, 0, 4));
  EXPECT_NE(WordAt(1ull << 32, 0, 0), WordAt(0, 0, 0));  // high seed bits matter
}

}  // namespace
}  // namespace tpx::rng
