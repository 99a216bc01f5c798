#include "core/dtype.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gtest/gtest.h"

namespace tpx {
namespace {

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint32_t ToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(DTypeTest, SizesNamesAndKinds) {
  EXPECT_EQ(SizeOf(DType::kF32), 4u);
  EXPECT_EQ(SizeOf(DType::kBF16), 2u);
  EXPECT_EQ(SizeOf(DType::kF16), 2u);
  EXPECT_EQ(SizeOf(DType::kI32), 4u);
  EXPECT_EQ(SizeOf(DType::kI64), 8u);
  EXPECT_EQ(SizeOf(DType::kBool), 1u);
  EXPECT_EQ(DTypeName(DType::kBF16), "bf16");
  EXPECT_EQ(DTypeName(DType::kI64), "i64");
  EXPECT_TRUE(IsFloatingPoint(DType::kF16));
  EXPECT_FALSE(IsFloatingPoint(DType::kI32));
  EXPECT_FALSE(IsFloatingPoint(DType::kBool));
  EXPECT_EQ(kDTypeOf<float>, DType::kF32);
  EXPECT_EQ(kDTypeOf<BF16>, DType::kBF16);
  EXPECT_EQ(kDTypeOf<int64_t>, DType::kI64);
}

TEST(DTypeTest, AbiNumberingIsFixed) {
  EXPECT_EQ(static_cast<int>(DType::kF32), 0);
  EXPECT_EQ(static_cast<int>(DType::kBF16), 1);
  EXPECT_EQ(static_cast<int>(DType::kF16), 2);
  EXPECT_EQ(static_cast<int>(DType::kI32), 3);
  EXPECT_EQ(static_cast<int>(DType::kI64), 4);
  EXPECT_EQ(static_cast<int>(DType::kBool), 5);
}

// ---------------- bf16 ----------------

TEST(BF16Test, ExactValues) {
  EXPECT_EQ(FloatToBF16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBF16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToBF16(1.5f), 0x3fc0);
  EXPECT_EQ(BF16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(BF16ToFloat(0xc040), -3.0f);
}

TEST(BF16Test, RoundToNearestEvenOnKnownBitPatterns) {
  // 1.0 = 0x3f800000; the bf16 ulp at 1.0 is bit 16.
  EXPECT_EQ(FloatToBF16(FromBits(0x3f807fffu)), 0x3f80);  // below half: down
  EXPECT_EQ(FloatToBF16(FromBits(0x3f808001u)), 0x3f81);  // above half: up
  EXPECT_EQ(FloatToBF16(FromBits(0x3f808000u)), 0x3f80);  // tie, even (0) stays
  EXPECT_EQ(FloatToBF16(FromBits(0x3f818000u)), 0x3f82);  // tie, odd (1) rounds up to even
  EXPECT_EQ(FloatToBF16(FromBits(0xbf818000u)), 0xbf82);  // negative tie
  // Carry into the exponent: 0x3fffffff rounds to 2.0.
  EXPECT_EQ(FloatToBF16(FromBits(0x3fffffffu)), 0x4000);
}

TEST(BF16Test, SpecialValues) {
  EXPECT_EQ(FloatToBF16(0.0f), 0x0000);
  EXPECT_EQ(FloatToBF16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBF16(kInf), 0x7f80);
  EXPECT_EQ(FloatToBF16(-kInf), 0xff80);
  EXPECT_TRUE(std::isinf(BF16ToFloat(0x7f80)));
  EXPECT_TRUE(std::signbit(BF16ToFloat(0x8000)));
  // The largest finite float rounds up to Inf (bf16 has the f32 range but fewer bits).
  EXPECT_EQ(FloatToBF16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(FloatToBF16(FromBits(0x7f7f7fffu)), 0x7f7f);  // largest that rounds down
}

TEST(BF16Test, NaNStaysNaN) {
  EXPECT_TRUE(std::isnan(BF16ToFloat(FloatToBF16(std::nanf("")))));
  // A NaN whose payload is only in the low 16 bits must not become Inf.
  uint16_t low_payload = FloatToBF16(FromBits(0x7f800001u));
  EXPECT_TRUE(std::isnan(BF16ToFloat(low_payload))) << std::hex << low_payload;
  uint16_t neg = FloatToBF16(FromBits(0xff800001u));
  EXPECT_TRUE(std::isnan(BF16ToFloat(neg)));
  EXPECT_EQ(neg & 0x8000, 0x8000);  // sign kept
  // All-ones mantissa NaN must not carry into the sign.
  EXPECT_TRUE(std::isnan(BF16ToFloat(FloatToBF16(FromBits(0x7fffffffu)))));
}

TEST(BF16Test, RoundTripEveryBF16Value) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    float f = BF16ToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(BF16ToFloat(FloatToBF16(f))));
    } else {
      ASSERT_EQ(FloatToBF16(f), bits) << std::hex << bits;
    }
  }
}

// ---------------- f16 ----------------

TEST(F16Test, ExactValues) {
  EXPECT_EQ(FloatToF16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToF16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToF16(0.5f), 0x3800);
  EXPECT_EQ(F16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(F16ToFloat(0x3555), 0.333251953125f);
}

TEST(F16Test, RoundToNearestEvenOnKnownBitPatterns) {
  // f16 ulp at 1.0 is 2^-10; in f32 bits that is bit 13.
  EXPECT_EQ(FloatToF16(FromBits(0x3f800fffu)), 0x3c00);  // below half
  EXPECT_EQ(FloatToF16(FromBits(0x3f801001u)), 0x3c01);  // above half
  EXPECT_EQ(FloatToF16(FromBits(0x3f801000u)), 0x3c00);  // tie to even (down)
  EXPECT_EQ(FloatToF16(FromBits(0x3f803000u)), 0x3c02);  // tie to even (up)
  EXPECT_EQ(FloatToF16(1.0f + 1.0f / 2048), 0x3c00);     // same tie via arithmetic
  EXPECT_EQ(FloatToF16(1.0f + 3.0f / 2048), 0x3c02);
}

TEST(F16Test, MaxFiniteAndOverflow) {
  EXPECT_EQ(FloatToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F16ToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(FloatToF16(65519.0f), 0x7bff);                    // below the midpoint
  EXPECT_EQ(FloatToF16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(FloatToF16(65520.0f), 0x7c00);                    // tie rounds to even: Inf
  EXPECT_EQ(FloatToF16(-65520.0f), 0xfc00);
  EXPECT_EQ(FloatToF16(1e10f), 0x7c00);
  EXPECT_EQ(FloatToF16(std::numeric_limits<float>::max()), 0x7c00);
}

TEST(F16Test, SpecialValues) {
  EXPECT_EQ(FloatToF16(0.0f), 0x0000);
  EXPECT_EQ(FloatToF16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToF16(kInf), 0x7c00);
  EXPECT_EQ(FloatToF16(-kInf), 0xfc00);
  EXPECT_EQ(F16ToFloat(0x7c00), kInf);
  EXPECT_EQ(F16ToFloat(0xfc00), -kInf);
  EXPECT_TRUE(std::signbit(F16ToFloat(0x8000)));
  EXPECT_EQ(F16ToFloat(0x8000), 0.0f);
  EXPECT_TRUE(std::isnan(F16ToFloat(FloatToF16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(F16ToFloat(FloatToF16(FromBits(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(F16ToFloat(0x7c01)));
  EXPECT_TRUE(std::isnan(F16ToFloat(0xfe00)));
}

TEST(F16Test, Subnormals) {
  const float smallest = std::ldexp(1.0f, -24);                  // 0x0001
  const float largest_subnormal = 1023.0f * std::ldexp(1.0f, -24);  // 0x03ff
  const float smallest_normal = std::ldexp(1.0f, -14);           // 0x0400
  EXPECT_EQ(F16ToFloat(0x0001), smallest);
  EXPECT_EQ(F16ToFloat(0x03ff), largest_subnormal);
  EXPECT_EQ(F16ToFloat(0x8001), -smallest);
  EXPECT_EQ(F16ToFloat(0x0400), smallest_normal);
  EXPECT_EQ(FloatToF16(smallest), 0x0001);
  EXPECT_EQ(FloatToF16(-smallest), 0x8001);
  EXPECT_EQ(FloatToF16(largest_subnormal), 0x03ff);
  EXPECT_EQ(FloatToF16(smallest_normal), 0x0400);
  // Half the smallest subnormal is a tie between 0 and 0x0001: rounds to even (0).
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(FloatToF16(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(FloatToF16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  // 1.5 * 2^-24 ties between 0x0001 and 0x0002: to even (0x0002).
  EXPECT_EQ(FloatToF16(1.5f * smallest), 0x0002);
  // 2.5 * 2^-24 ties between 0x0002 and 0x0003: to even (0x0002).
  EXPECT_EQ(FloatToF16(2.5f * smallest), 0x0002);
  // Between the largest subnormal and the smallest normal: tie to even (0x0400).
  EXPECT_EQ(FloatToF16(1023.5f * smallest), 0x0400);
  EXPECT_EQ(FloatToF16(1e-10f), 0x0000);
}

TEST(F16Test, RoundTripEveryF16Value) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    float f = F16ToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToFloat(FloatToF16(f)))) << std::hex << bits;
    } else {
      ASSERT_EQ(FloatToF16(f), bits) << std::hex << bits;
    }
  }
}

// Every f32 value between consecutive f16 values rounds to the nearer one,
// ties to the even one: checked against a double-precision reference on a
// dense sample of f32 bit patterns up to the overflow threshold.
TEST(F16Test, MatchesReferenceRounding) {
  for (uint32_t u = 0x30000000u; u < 0x477ff000u; u += 0x1003u) {  // up to 65520
    float f = FromBits(u);
    uint16_t h = FloatToF16(f);
    double got = F16ToFloat(h);
    double below = F16ToFloat(static_cast<uint16_t>(h - (h > 0 ? 1 : 0)));
    double above = (h & 0x7fff) < 0x7c00 ? F16ToFloat(static_cast<uint16_t>(h + 1)) : got;
    double err = std::fabs(got - f);
    ASSERT_LE(err, std::fabs(below - f)) << std::hex << u;
    if ((h & 0x7fff) < 0x7bff) {
      ASSERT_LE(err, std::fabs(above - f)) << std::hex << u;
    }
  }
}

TEST(BF16Test, StructHelpers) {
  EXPECT_EQ(BF16::FromFloat(3.0f).ToFloat(), 3.0f);
  EXPECT_EQ(F16::FromFloat(-0.25f).ToFloat(), -0.25f);
  EXPECT_EQ(ToBits(BF16::FromFloat(1.0f).ToFloat()), 0x3f800000u);
}

}  // namespace
}  // namespace tpx
