#include "core/cpu/bf16_convert.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "gtest/gtest.h"

namespace tpx::cpu {
namespace {

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Bit patterns where rounding is delicate: zeros, subnormals (the AVX512-BF16
// instruction flushes them), ties to even both ways, carries into the
// exponent, the largest finite values (round to inf), infinities, quiet and
// signalling NaNs with payloads only in the dropped bits.
std::vector<uint32_t> EdgeBits() {
  std::vector<uint32_t> v = {
      0x00000000u, 0x80000000u,                            // +-0
      0x00000001u, 0x80000001u, 0x00008000u, 0x00018000u,  // subnormals, ties among them
      0x007fffffu, 0x807fffffu, 0x007f8000u, 0x00400000u,  // largest subnormals
      0x00800000u, 0x80800000u,                            // smallest normals
      0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f808001u,  // 1, ties to even (down, up)
      0x3f807fffu, 0x3fff8000u, 0x3fffffffu,               // just below a tie, carries
      0x7f7f8000u, 0x7f7fffffu, 0xff7fffffu, 0x7f7f7fffu,  // round to +-inf or stay finite
      0x7f800000u, 0xff800000u,                            // +-inf
      0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,  // NaNs (quiet, signalling)
      0x7fbfffffu, 0x7f80ffffu, 0x7fffffffu, 0xffffffffu,
  };
  return v;
}

std::vector<uint32_t> SweepBits() {
  // Every exponent, many mantissas and both signs, low bits varied so ties
  // and near-ties occur (a prime stride over the 32-bit patterns).
  std::vector<uint32_t> v;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 65521) {
    v.push_back(static_cast<uint32_t>(u));
    v.push_back(static_cast<uint32_t>(u) ^ 0x8000u);  // flip the tie bit
  }
  return v;
}

// Converts `bits` with fn at every offset 0..40 of a buffer of each length
// 0..70 and of the whole list, against FloatToBF16 element by element.
template <typename Fn>
void ExpectMatchesScalar(const std::vector<uint32_t>& bits, Fn fn) {
  std::vector<float> in(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) in[i] = FromBits(bits[i]);
  std::vector<BF16> out(in.size() + 1, BF16{0xabcd});
  fn(in.data(), out.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(out[i].bits, FloatToBF16(in[i])) << std::hex << "input bits 0x" << bits[i];
  }
  EXPECT_EQ(out[in.size()].bits, 0xabcd) << "wrote past the end";
  // Short and unaligned pieces (the vector loop, the masked tails, and
  // vectors with one subnormal lane among normal ones).
  for (int64_t n = 0; n <= 70 && n <= static_cast<int64_t>(in.size()); ++n) {
    for (int64_t offset : {0, 1, 7, 31}) {
      if (offset + n > static_cast<int64_t>(in.size())) continue;
      std::vector<BF16> piece(n + 1, BF16{0xabcd});
      fn(in.data() + offset, piece.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(piece[i].bits, FloatToBF16(in[offset + i]))
            << std::hex << "input bits 0x" << bits[offset + i] << std::dec << " n=" << n
            << " offset=" << offset;
      }
      EXPECT_EQ(piece[n].bits, 0xabcd) << "n=" << n << " offset=" << offset;
    }
  }
}

TEST(Bf16ConvertTest, ScalarReferenceOnKnownValues) {
  EXPECT_EQ(FloatToBF16(FromBits(0x3f808000u)), 0x3f80);  // tie, even below: down
  EXPECT_EQ(FloatToBF16(FromBits(0x3f818000u)), 0x3f82);  // tie, odd below: up
  EXPECT_EQ(FloatToBF16(FromBits(0x00018000u)), 0x0002);  // subnormal tie: up, not flushed
  EXPECT_EQ(FloatToBF16(FromBits(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to inf
  EXPECT_EQ(FloatToBF16(FromBits(0x7f800001u)), 0x7fc0);  // signalling NaN comes out quiet
  EXPECT_EQ(FloatToBF16(FromBits(0xffffffffu)), 0xffff);  // NaN sign and payload kept
}

TEST(Bf16ConvertTest, PortableMatchesScalarOnEdgeCases) {
  ExpectMatchesScalar(EdgeBits(), bf16_convert_internal::Portable);
}

TEST(Bf16ConvertTest, PortableMatchesScalarOnSweep) {
  ExpectMatchesScalar(SweepBits(), bf16_convert_internal::Portable);
}

TEST(Bf16ConvertTest, Avx512Bf16MatchesScalar) {
  float probe = 1.0f;
  BF16 probe_out;
  if (!bf16_convert_internal::Avx512Bf16(&probe, &probe_out, 1)) {
    GTEST_SKIP() << "no AVX512-BF16 on this CPU or build";
  }
  auto fn = [](const float* in, BF16* out, int64_t n) {
    ASSERT_TRUE(bf16_convert_internal::Avx512Bf16(in, out, n));
  };
  ExpectMatchesScalar(EdgeBits(), fn);
  ExpectMatchesScalar(SweepBits(), fn);
  // A subnormal in every lane position of a 32-wide vector, among normals.
  std::vector<uint32_t> mixed(64, 0x3f808000u);
  for (int lane = 0; lane < 64; ++lane) {
    std::vector<uint32_t> bits = mixed;
    bits[lane] = 0x00018000u;
    ExpectMatchesScalar(bits, fn);
  }
}

// Every subnormal of both signs, with the smallest normals and zeros among
// them, 32 at a time (the instruction's flushing is what the vector path
// works around).
TEST(Bf16ConvertTest, Avx512Bf16RoundsEverySubnormal) {
  float probe = 1.0f;
  BF16 probe_out;
  if (!bf16_convert_internal::Avx512Bf16(&probe, &probe_out, 1)) {
    GTEST_SKIP() << "no AVX512-BF16 on this CPU or build";
  }
  constexpr uint32_t kBlock = 1 << 16;
  std::vector<float> in(kBlock);
  std::vector<BF16> out(kBlock);
  for (uint32_t sign : {0u, 0x80000000u}) {
    for (uint32_t first = 0; first < 0x00810000u; first += kBlock) {
      for (uint32_t i = 0; i < kBlock; ++i) in[i] = FromBits(sign | (first + i));
      ASSERT_TRUE(bf16_convert_internal::Avx512Bf16(in.data(), out.data(), kBlock));
      for (uint32_t i = 0; i < kBlock; ++i) {
        ASSERT_EQ(out[i].bits, FloatToBF16(in[i]))
            << std::hex << "input bits 0x" << (sign | (first + i));
      }
    }
  }
}

#if defined(TPX_HAVE_AVX512BF16_PATH)
// The kernels' per-vector rounding: every lane of every 16-value piece of
// the edge cases and the sweep (a subnormal among normals, NaNs, ties),
// under a full mask and under masks that leave lanes unwritten.
TPX_AVX512BF16_TARGET void StoreLanes(const float* in, BF16* out, __mmask16 mask) {
  StoreBF16Lanes(out, _mm512_maskz_loadu_ps(mask, in), mask);
}

TEST(Bf16ConvertTest, StoreBF16LanesMatchesScalar) {
  if (!CpuHasAvx512Bf16()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  std::vector<uint32_t> bits = EdgeBits();
  const std::vector<uint32_t> sweep = SweepBits();
  bits.insert(bits.end(), sweep.begin(), sweep.end());
  while (bits.size() % 16 != 0) bits.push_back(0x00000001u);
  // NaNs and infinities in a vector with a subnormal (the integer path).
  for (uint32_t x : {0x00018000u, 0x7f800001u, 0xff800001u, 0x7fc00000u, 0xffffffffu, 0x7fbfffffu,
                     0x7f80ffffu, 0x7f800000u, 0xff800000u, 0x7f7fffffu, 0x3f808000u, 0x3f818000u,
                     0x80000001u, 0x007fffffu, 0x00000000u, 0x80000000u}) {
    bits.push_back(x);
  }
  std::vector<float> in(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) in[i] = FromBits(bits[i]);
  for (const __mmask16 mask :
       {__mmask16{0xffff}, __mmask16{0x00ff}, __mmask16{0x8001}, __mmask16{0x7ffe}}) {
    for (size_t i0 = 0; i0 < in.size(); i0 += 16) {
      BF16 out[16];
      for (BF16& o : out) o.bits = 0xabcd;
      StoreLanes(in.data() + i0, out, mask);
      for (int j = 0; j < 16; ++j) {
        const uint16_t want = (mask >> j) & 1 ? FloatToBF16(in[i0 + j]) : 0xabcd;
        ASSERT_EQ(out[j].bits, want)
            << std::hex << "input bits 0x" << bits[i0 + j] << " mask 0x" << mask;
      }
    }
  }
}

// RoundBF16Pair on the same values, 32 at a time (each half from any of
// the 16-value pieces, so a subnormal in either half, both or neither):
// lo's rounding in the first 16 values, hi's in the last.
TPX_AVX512BF16_TARGET void RoundPair(const float* lo, const float* hi, BF16* out) {
  _mm512_storeu_si512(out, RoundBF16Pair(_mm512_loadu_ps(lo), _mm512_loadu_ps(hi)));
}

TEST(Bf16ConvertTest, RoundBF16PairMatchesScalar) {
  if (!CpuHasAvx512Bf16()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  std::vector<uint32_t> bits = EdgeBits();
  while (bits.size() % 16 != 0) bits.push_back(0x3f808000u);
  // A piece of normals only, and one whose single subnormal is its last lane.
  bits.insert(bits.end(), 16, 0x3f818000u);
  bits.insert(bits.end(), 15, 0xbf808000u);
  bits.push_back(0x80018000u);
  std::vector<float> in(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) in[i] = FromBits(bits[i]);
  for (size_t lo = 0; lo < in.size(); lo += 16) {
    for (size_t hi = 0; hi < in.size(); hi += 16) {
      BF16 out[32];
      RoundPair(in.data() + lo, in.data() + hi, out);
      for (int j = 0; j < 32; ++j) {
        const size_t i = j < 16 ? lo + j : hi + j - 16;
        ASSERT_EQ(out[j].bits, FloatToBF16(in[i]))
            << std::hex << "input bits 0x" << bits[i] << std::dec << " lane " << j;
      }
    }
  }
}
#endif

TEST(Bf16ConvertTest, DispatchedMatchesScalar) {
  const std::string_view isa = FloatToBF16ArrayIsa();
  EXPECT_TRUE(isa == "avx512bf16" || isa == "portable") << isa;
  ExpectMatchesScalar(EdgeBits(), FloatToBF16Array);
  ExpectMatchesScalar(SweepBits(), FloatToBF16Array);
}

}  // namespace
}  // namespace tpx::cpu
