// SampleToken against hand-computed distributions.
#include "examples/gpt/sampling.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace tpx::gpt {
namespace {

TEST(Sampling, GreedyTakesTheLowestIdAmongMaxima) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(*SampleToken(logits, {.temperature = 0}, 0.9f), 1);
  EXPECT_EQ(*SampleToken(logits, {.temperature = 1.0, .top_k = 1}, 0.9f), 1);
}

TEST(Sampling, SortedCumulativeDistribution) {
  // Sorted: token 1 (0.75) then token 0 (0.25).
  const std::vector<float> logits = {0.0f, static_cast<float>(std::log(3.0))};
  EXPECT_EQ(*SampleToken(logits, {}, 0.10f), 1);
  EXPECT_EQ(*SampleToken(logits, {}, 0.74f), 1);
  EXPECT_EQ(*SampleToken(logits, {}, 0.76f), 0);
  // Temperature 0.5 squares the odds: 1/10 and 9/10.
  EXPECT_EQ(*SampleToken(logits, {.temperature = 0.5}, 0.89f), 1);
  EXPECT_EQ(*SampleToken(logits, {.temperature = 0.5}, 0.91f), 0);
}

TEST(Sampling, TopKAndTopPCutTheTail) {
  // Probabilities 0.5, 0.3, 0.2.
  const std::vector<float> logits = {static_cast<float>(std::log(0.2)),
                                     static_cast<float>(std::log(0.5)),
                                     static_cast<float>(std::log(0.3))};
  EXPECT_EQ(*SampleToken(logits, {}, 0.99f), 0);  // the tail is reachable without cuts
  // Top-2 and top-p 0.6 keep {1, 2}, renormalised to 5/8, 3/8.
  for (const SamplingOptions& o : {SamplingOptions{.top_k = 2}, SamplingOptions{.top_p = 0.6}}) {
    EXPECT_EQ(*SampleToken(logits, o, 0.60f), 1);
    EXPECT_EQ(*SampleToken(logits, o, 0.65f), 2);
    EXPECT_EQ(*SampleToken(logits, o, 0.99f), 2);
  }
  // top_p 0.5 keeps the first token only.
  EXPECT_EQ(*SampleToken(logits, {.top_p = 0.5}, 0.99f), 1);
}

TEST(Sampling, BadOptionsAndLogitsAreErrors) {
  const std::vector<float> logits = {0.0f, 1.0f};
  EXPECT_FALSE(SampleToken(logits, {.temperature = -1}, 0.5f).ok());
  EXPECT_FALSE(
      SampleToken(logits, {.temperature = std::numeric_limits<double>::infinity()}, 0.5f).ok());
  EXPECT_FALSE(SampleToken(logits, {.top_k = -2}, 0.5f).ok());
  EXPECT_FALSE(SampleToken(logits, {.top_p = 0}, 0.5f).ok());
  EXPECT_FALSE(SampleToken(logits, {.top_p = 1.5}, 0.5f).ok());
  EXPECT_FALSE(SampleToken({}, {}, 0.5f).ok());
  auto nan = SampleToken({0.0f, std::nanf("")}, {}, 0.5f);
  ASSERT_FALSE(nan.ok());
  EXPECT_NE(nan.status().message().find("logit 1 is NaN"), std::string::npos);
}

}  // namespace
}  // namespace tpx::gpt
