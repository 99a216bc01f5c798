#include "optim/lr_schedule.h"

#include "gtest/gtest.h"

namespace tpx::optim {
namespace {

TEST(WarmupCosineSchedule, WarmsUpLinearlyThenDecaysToMin) {
  auto s = WarmupCosineSchedule::Create(
      {.max_lr = 1.0, .min_lr = 0.1, .warmup_steps = 4, .total_steps = 14});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->At(0), 0.25);
  EXPECT_DOUBLE_EQ(s->At(3), 1.0);
  EXPECT_DOUBLE_EQ(s->At(4), 1.0);                // cosine starts at the peak
  EXPECT_NEAR(s->At(9), 0.55, 1e-12);             // halfway: (max + min) / 2
  EXPECT_DOUBLE_EQ(s->At(14), 0.1);
  EXPECT_DOUBLE_EQ(s->At(1000), 0.1);
  for (int64_t t = 4; t < 14; ++t) EXPECT_GT(s->At(t), s->At(t + 1)) << t;
}

TEST(WarmupCosineSchedule, NoWarmup) {
  auto s = WarmupCosineSchedule::Create({.max_lr = 2.0, .min_lr = 0.0, .total_steps = 2});
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->At(0), 2.0);
  EXPECT_NEAR(s->At(1), 1.0, 1e-12);
}

TEST(WarmupCosineSchedule, RejectsBadOptions) {
  EXPECT_FALSE(WarmupCosineSchedule::Create({.max_lr = 0.1, .min_lr = 0.2}).ok());
  EXPECT_FALSE(WarmupCosineSchedule::Create({.warmup_steps = 5, .total_steps = 3}).ok());
}

}  // namespace
}  // namespace tpx::optim
