#include "core/cpu/vec_math.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace tpx::cpu {
namespace {

// Distance in units in the last place between two finite floats of the same sign.
int64_t UlpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::abs(static_cast<int64_t>(ia) - static_cast<int64_t>(ib));
}

// The largest distance(x) over x = first, first + step, ... below last, and
// the x where it is.
struct Worst {
  int64_t distance = 0;
  float x = 0;
};
template <typename F>
Worst WorstOver(float first, float last, float step, F distance) {
  Worst w;
  for (float x = first; x < last; x += step) {
    const int64_t d = distance(x);
    if (d > w.distance) w = {d, x};
  }
  return w;
}

TEST(VecMathTest, ExpMatchesLibmWithinTwoUlp) {
  const Worst worst = WorstOver(-103.0f, 88.7f, 0.0137f, [](float x) -> int64_t {
    const float got = Exp(x);
    const float want = static_cast<float>(std::exp(static_cast<double>(x)));
    if (want < std::numeric_limits<float>::min()) {
      // Subnormal results: absolute error within one subnormal step.
      EXPECT_NEAR(got, want, 2 * std::numeric_limits<float>::denorm_min()) << x;
      return 0;
    }
    return UlpDistance(got, want);
  });
  EXPECT_LE(worst.distance, 2) << "at x=" << worst.x;
}

TEST(VecMathTest, ExpSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Exp(0.0f), 1.0f);
  EXPECT_EQ(Exp(-inf), 0.0f);
  EXPECT_EQ(Exp(inf), inf);
  EXPECT_EQ(Exp(88.8f), inf);
  EXPECT_EQ(Exp(1000.0f), inf);
  EXPECT_EQ(Exp(-200.0f), 0.0f);
  EXPECT_TRUE(std::isnan(Exp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_GT(Exp(-100.0f), 0.0f);  // subnormal, not flushed
  EXPECT_FLOAT_EQ(Exp(1.0f), 2.7182817f);
  EXPECT_FLOAT_EQ(Exp(88.0f), 1.6516363e38f);
}

// Every float of [2^-149, 2^128) at a stride of 4099 bit patterns (about a
// million values: subnormals, each binade, both sides of sqrt(1/2)).
TEST(VecMathTest, LogMatchesLibmWithinTwoUlp) {
  int64_t worst = 0;
  float worst_x = 0;
  for (uint32_t bits = 1; bits < 0x7f800000u; bits += 4099) {
    const float x = std::bit_cast<float>(bits);
    const float want = static_cast<float>(std::log(static_cast<double>(x)));
    const int64_t d = want == 0.0f ? (Log(x) == 0.0f ? 0 : 99) : UlpDistance(Log(x), want);
    if (d > worst) {
      worst = d;
      worst_x = x;
    }
  }
  EXPECT_LE(worst, 2) << "at x=" << worst_x;
}

TEST(VecMathTest, LogSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Log(1.0f), 0.0f);
  EXPECT_EQ(Log(0.0f), -inf);
  EXPECT_EQ(Log(-0.0f), -inf);
  EXPECT_EQ(Log(inf), inf);
  EXPECT_TRUE(std::isnan(Log(-1.0f)));
  EXPECT_TRUE(std::isnan(Log(-inf)));
  EXPECT_TRUE(std::isnan(Log(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_FLOAT_EQ(Log(std::numeric_limits<float>::denorm_min()), -103.27893f);
  EXPECT_FLOAT_EQ(Log(std::numeric_limits<float>::max()), 88.72284f);
}

TEST(VecMathTest, TanhMatchesLibmWithinThreeUlp) {
  const Worst worst = WorstOver(-12.0f, 12.0f, 0.000731f, [](float x) -> int64_t {
    const float want = static_cast<float>(std::tanh(static_cast<double>(x)));
    const float got = Tanh(x);
    return (got < 0) != (want < 0) ? 99 : UlpDistance(got, want);
  });
  EXPECT_LE(worst.distance, 3) << "at x=" << worst.x;
  // Tiny arguments (tanh x = x there), through the subnormals.
  for (float x = 1e-3f; x > 0; x *= 0.5f) {
    EXPECT_LE(UlpDistance(Tanh(x), static_cast<float>(std::tanh(static_cast<double>(x)))), 1)
        << x;
  }
}

TEST(VecMathTest, TanhSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Tanh(inf), 1.0f);
  EXPECT_EQ(Tanh(-inf), -1.0f);
  EXPECT_EQ(Tanh(100.0f), 1.0f);
  EXPECT_EQ(Tanh(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(Tanh(-0.0f)));
  EXPECT_TRUE(std::isnan(Tanh(std::numeric_limits<float>::quiet_NaN())));
}

TEST(VecMathTest, ErfMatchesLibm) {
  double worst = 0;
  float worst_x = 0;
  for (float x = -8.0f; x < 8.0f; x += 0.00731f) {
    const double err = std::abs(static_cast<double>(Erf(x)) - std::erf(static_cast<double>(x)));
    if (err > worst) {
      worst = err;
      worst_x = x;
    }
  }
  EXPECT_LE(worst, 4e-7) << "at x=" << worst_x;
  // Relative accuracy near 0, where GeLU's x * erf(x) needs it.
  for (float x = 1e-6f; x < 0.5f; x *= 1.37f) {
    EXPECT_NEAR(Erf(x), std::erf(x), 4e-7 * std::erf(x)) << x;
    EXPECT_EQ(Erf(-x), -Erf(x)) << x;
  }
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Erf(0.0f), 0.0f);
  EXPECT_FLOAT_EQ(Erf(inf), 1.0f);
  EXPECT_FLOAT_EQ(Erf(-inf), -1.0f);
  EXPECT_TRUE(std::isnan(Erf(std::numeric_limits<float>::quiet_NaN())));
}

TEST(VecMathTest, GeluAndGradientMatchDoubleReference) {
  for (float x = -10.0f; x < 10.0f; x += 0.0173f) {
    const double xd = x;
    const double cdf = 0.5 * (1.0 + std::erf(xd / std::sqrt(2.0)));
    const double pdf = std::exp(-0.5 * xd * xd) / std::sqrt(2.0 * M_PI);
    EXPECT_NEAR(Gelu(x), xd * cdf, 2e-6 * std::abs(xd * cdf) + 1e-6) << x;
    EXPECT_NEAR(GeluGrad(x), cdf + xd * pdf, 2e-6 + 1e-6) << x;
  }
}

TEST(VecMathTest, GeluGradientAbsoluteErrorAndLimits) {
  // A fine sweep over the whole range, where Phi comes from the shared
  // exponential: absolute error within the bound vec_math.h states.
  double worst = 0.0;
  float worst_x = 0.0f;
  for (float x = -30.0f; x < 30.0f; x += 1.3e-4f) {
    const double xd = x;
    const double want = 0.5 * std::erfc(-xd / std::sqrt(2.0)) +
                        xd * std::exp(-0.5 * xd * xd) / std::sqrt(2.0 * M_PI);
    const double err = std::abs(GeluGrad(x) - want);
    if (err > worst) {
      worst = err;
      worst_x = x;
    }
  }
  EXPECT_LE(worst, 3e-7) << "at x=" << worst_x;
  EXPECT_FLOAT_EQ(GeluGrad(0.0f), 0.5f);
  EXPECT_EQ(GeluGrad(-40.0f), 0.0f);
  EXPECT_EQ(GeluGrad(40.0f), 1.0f);
  EXPECT_TRUE(std::isnan(GeluGrad(std::numeric_limits<float>::quiet_NaN())));
}

// Sum8Rows must give each row's Sum8 bit for bit (layer norm's results
// depend on it), for plain sums and for products the compiler may fuse into
// the accumulation, at lengths with and without a tail.
TEST(VecMathTest, Sum8RowsMatchesSum8BitForBit) {
  constexpr int kRows = 4;
  for (int64_t n : {0, 1, 7, 8, 9, 128, 131, 1000}) {
    std::vector<float> x(kRows * n), w(n);
    uint32_t state = 12345u + static_cast<uint32_t>(n);
    auto next = [&state] {
      state = state * 1664525u + 1013904223u;
      return static_cast<float>(state >> 8) / 16777216.0f * 6.0f - 3.0f;
    };
    for (float& v : x) v = next();
    for (float& v : w) v = next();
    const float shift[kRows] = {0.25f, -1.5f, 3.0f, 0.0f};
    float plain[kRows], fused[kRows];
    Sum8Rows<kRows>(
        n, [&](int r, int64_t i) { return LoadFloat8(&x[r * n + i]); },
        [&](int r, int64_t j) { return x[r * n + j]; }, plain);
    Sum8Rows<kRows>(
        n,
        [&](int r, int64_t i) {
          const Float8 c = LoadFloat8(&x[r * n + i]) - shift[r];
          return c * c * LoadFloat8(&w[i]);
        },
        [&](int r, int64_t j) {
          const float c = x[r * n + j] - shift[r];
          return c * c * w[j];
        },
        fused);
    for (int r = 0; r < kRows; ++r) {
      const float* xr = x.data() + r * n;
      const float want_plain = Sum8(n, [xr](int64_t j) { return xr[j]; });
      const float want_fused = Sum8(n, [&](int64_t j) {
        const float c = xr[j] - shift[r];
        return c * c * w[j];
      });
      EXPECT_EQ(std::bit_cast<uint32_t>(plain[r]), std::bit_cast<uint32_t>(want_plain))
          << "n=" << n << " row " << r;
      EXPECT_EQ(std::bit_cast<uint32_t>(fused[r]), std::bit_cast<uint32_t>(want_fused))
          << "n=" << n << " row " << r;
    }
  }
}

}  // namespace
}  // namespace tpx::cpu
