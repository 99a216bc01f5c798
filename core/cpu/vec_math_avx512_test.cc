#include "core/cpu/vec_math_avx512.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <vector>

#include "core/cpu/vec_math.h"
#include "gtest/gtest.h"

#if defined(TPX_HAVE_AVX512_EXP)
namespace tpx::cpu {
namespace {

// fn16 over `in` (a multiple of 16 long), sixteen at a time.
template <typename Fn16>
TPX_AVX512F_TARGET std::vector<float> Apply16(Fn16 fn16, const std::vector<float>& in) {
  std::vector<float> out(in.size());
  for (size_t i = 0; i < in.size(); i += 16) {
    _mm512_storeu_ps(out.data() + i, fn16(_mm512_loadu_ps(in.data() + i)));
  }
  return out;
}

// Checks got[i] against scalar(in[i]) bit for bit (any NaN for a NaN).
template <typename Scalar>
void ExpectBitForBit(Scalar scalar, const std::vector<float>& in, const std::vector<float>& got) {
  for (size_t i = 0; i < in.size(); ++i) {
    const float want = scalar(in[i]);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got[i])) << in[i];
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want))
        << in[i] << ": " << got[i] << " vs " << want;
  }
}

bool HasAvx512F() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

// The limits and special values every function is checked at.
void AddSpecials(std::vector<float>& in) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  constexpr float kSpecials[] = {0.0f,        -0.0f,    1e-30f, -1e-40f, 88.72f, 88.73f, 1e10f,
                                 -1e10f,      -103.97f, -87.4f, -100.3f, 4.0f,   -4.0f,  3.9999998f,
                                 -4.0000005f, 1.4e-45f, kInf,   -kInf,   kNaN,   -kNaN};
  in.insert(in.end(), std::begin(kSpecials), std::end(kSpecials));
  while (in.size() % 16 != 0) in.push_back(1.0f);
}

// Bit for bit the scalar Exp over its whole range: the same operations,
// the scaling by 2^n exact in both while normal and rounded once where the
// result is subnormal; the same limits, zeros, subnormals and NaNs.
TEST(VecMathAvx512Test, Exp16IsScalarExpBitForBit) {
  if (!HasAvx512F()) GTEST_SKIP() << "no AVX-512F on this CPU";
  std::vector<float> in;
  for (int i = -120000; i <= 100000; ++i) in.push_back(static_cast<float>(i) / 1000.0f);
  AddSpecials(in);
  const std::vector<float> got = Apply16([](__m512 x) TPX_AVX512F_TARGET { return Exp16(x); }, in);
  ExpectBitForBit([](float x) { return Exp(x); }, in, got);
}

// Erf, GeLU and GeLU's derivative bit for bit over [-12, 12] every 1e-4
// (both sides of Erf's clamp and of A&S's sign switch, and where the
// exponential underflows) and the limits.
std::vector<float> GeluGrid() {
  std::vector<float> in;
  for (int i = -120000; i <= 120000; ++i) in.push_back(static_cast<float>(i) / 10000.0f);
  AddSpecials(in);
  return in;
}

TEST(VecMathAvx512Test, Erf16IsScalarErfBitForBit) {
  if (!HasAvx512F()) GTEST_SKIP() << "no AVX-512F on this CPU";
  const std::vector<float> in = GeluGrid();
  const std::vector<float> got = Apply16([](__m512 x) TPX_AVX512F_TARGET { return Erf16(x); }, in);
  ExpectBitForBit([](float x) { return Erf(x); }, in, got);
}

TEST(VecMathAvx512Test, Gelu16IsScalarGeluBitForBit) {
  if (!HasAvx512F()) GTEST_SKIP() << "no AVX-512F on this CPU";
  const std::vector<float> in = GeluGrid();
  const std::vector<float> got = Apply16([](__m512 x) TPX_AVX512F_TARGET { return Gelu16(x); }, in);
  ExpectBitForBit([](float x) { return Gelu(x); }, in, got);
}

TEST(VecMathAvx512Test, GeluGrad16IsScalarGeluGradBitForBit) {
  if (!HasAvx512F()) GTEST_SKIP() << "no AVX-512F on this CPU";
  const std::vector<float> in = GeluGrid();
  const std::vector<float> got =
      Apply16([](__m512 x) TPX_AVX512F_TARGET { return GeluGrad16(x); }, in);
  ExpectBitForBit([](float x) { return GeluGrad(x); }, in, got);
}

// fnN over `in` N vectors at a time (in place on an array of N), the
// last group padded with ones.
template <int N, typename FnN>
TPX_AVX512F_TARGET std::vector<float> ApplyN(FnN fn, std::vector<float> in) {
  const size_t n = in.size();
  while (in.size() % (16 * N) != 0) in.push_back(1.0f);
  std::vector<float> out(in.size());
  for (size_t i = 0; i < in.size(); i += 16 * N) {
    __m512 v[N];
    for (int k = 0; k < N; ++k) v[k] = _mm512_loadu_ps(in.data() + i + 16 * k);
    fn(v);
    for (int k = 0; k < N; ++k) _mm512_storeu_ps(out.data() + i + 16 * k, v[k]);
  }
  out.resize(n);
  return out;
}

// The forms on several vectors at once are the scalar functions bit for bit
// as well (each vector's steps are the single vector's).
template <int N>
void ExpectNVectorFormsBitForBit() {
  std::vector<float> exp_in;
  for (int i = -120000; i <= 100000; i += 7) exp_in.push_back(static_cast<float>(i) / 1000.0f);
  AddSpecials(exp_in);
  ExpectBitForBit([](float x) { return Exp(x); }, exp_in,
                  ApplyN<N>([](__m512(&v)[N]) TPX_AVX512F_TARGET { Exp16N(v); }, exp_in));
  std::vector<float> in = GeluGrid();
  ExpectBitForBit([](float x) { return Erf(x); }, in,
                  ApplyN<N>([](__m512(&v)[N]) TPX_AVX512F_TARGET { Erf16N(v); }, in));
  ExpectBitForBit([](float x) { return Gelu(x); }, in,
                  ApplyN<N>([](__m512(&v)[N]) TPX_AVX512F_TARGET { Gelu16N(v); }, in));
  ExpectBitForBit([](float x) { return GeluGrad(x); }, in,
                  ApplyN<N>([](__m512(&v)[N]) TPX_AVX512F_TARGET { GeluGrad16N(v); }, in));
}

TEST(VecMathAvx512Test, NVectorFormsAreTheScalarFunctionsBitForBit) {
  if (!HasAvx512F()) GTEST_SKIP() << "no AVX-512F on this CPU";
  ExpectNVectorFormsBitForBit<2>();
  ExpectNVectorFormsBitForBit<4>();
  ExpectNVectorFormsBitForBit<8>();
}

}  // namespace
}  // namespace tpx::cpu
#endif
