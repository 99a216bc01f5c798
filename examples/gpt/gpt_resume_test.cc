// Resuming the GPT example from a checkpoint: 8 steps straight equal, bit for
// bit, 4 steps + save + new processes + 4 resumed steps at the same TP size
// (dropout on, so the RNG tracker states matter; the first half saves
// asynchronously after every step, the resumed half synchronously); resuming the same
// checkpoint at TP=1 and TP=4 stays within the example's TP-invariance
// tolerance. In bf16 (f32 master weights): the same bit-identical resume at
// TP=2, the checkpoint holds only f32 tensors, and an f32 run at TP=1
// resumes from it within bf16's tolerance. Every run is its own set of real
// processes over UCX.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "examples/gpt/tiny_gpt_testutil.h"
#include "examples/gpt/trainer.h"
#include "sharded_state/metadata.h"
#include "gtest/gtest.h"

namespace tpx::gpt {
namespace {

constexpr int kSteps = 8;
// As gpt_tp_invariance_test: f32 sums in another order at another TP size.
constexpr double kLossTolerance = 1e-4;

TrainOptions Options(int tp) { return TinyTrainOptions(tp, kSteps, /*warmup_steps=*/3); }

TEST(GptResume, BitIdenticalAtTheSameTpAndWithinToleranceAtOthers) {
  setenv("TPX_NUM_THREADS", "1", 0);
  namespace fs = std::filesystem;
  const TrainRun straight = TrainOnNewRanks(2, Options(2), TestTmpPath("straight"));
  ASSERT_EQ(straight.losses.size(), static_cast<size_t>(kSteps));

  TrainOptions first_half = Options(2);
  first_half.save_dir = TestTmpPath("ckpt");
  first_half.stop_after = kSteps / 2;
  first_half.save_every = 1;      // steps 1..4, each written while the next step trains
  first_half.async_save = true;
  const TrainRun first = TrainOnNewRanks(2, first_half, TestTmpPath("first"));
  ASSERT_EQ(first.losses.size(), static_cast<size_t>(kSteps / 2));
  // Copies for the resumes at other TP sizes (each resume saves into its dir).
  fs::copy(TestTmpPath("ckpt"), TestTmpPath("ckpt_tp1"), fs::copy_options::recursive);
  fs::copy(TestTmpPath("ckpt"), TestTmpPath("ckpt_tp4"), fs::copy_options::recursive);

  TrainOptions second_half = Options(2);
  second_half.save_dir = TestTmpPath("ckpt");
  second_half.resume = true;
  const TrainRun second = TrainOnNewRanks(2, second_half, TestTmpPath("second"));
  EXPECT_EQ(second.first_step, kSteps / 2);
  ASSERT_EQ(second.losses.size(), static_cast<size_t>(kSteps / 2));
  for (int s = 0; s < kSteps; ++s) {
    const double resumed = s < kSteps / 2 ? first.losses[s] : second.losses[s - kSteps / 2];
    EXPECT_EQ(resumed, straight.losses[s]) << "step " << s + 1 << " is not bit-identical";
  }
  // Every step of the first half was saved; the resumed half saved its final step.
  for (int step = 1; step <= kSteps / 2; ++step) {
    EXPECT_TRUE(
        fs::exists(TestTmpPath("ckpt") + "/step-0000000" + std::to_string(step) +
                   "/tpx_checkpoint.json"));
  }
  EXPECT_TRUE(fs::exists(TestTmpPath("ckpt") + "/step-00000008/tpx_checkpoint.json"));

  for (int tp : {1, 4}) {
    TrainOptions other = Options(tp);
    other.save_dir = TestTmpPath("ckpt_tp" + std::to_string(tp));
    other.resume = true;
    const TrainRun run = TrainOnNewRanks(tp, other, TestTmpPath("other"));
    EXPECT_EQ(run.first_step, kSteps / 2) << "TP " << tp;
    ASSERT_EQ(run.losses.size(), static_cast<size_t>(kSteps / 2)) << "TP " << tp;
    for (int s = 0; s < kSteps / 2; ++s) {
      EXPECT_NEAR(run.losses[s], straight.losses[s + kSteps / 2], kLossTolerance)
          << "TP " << tp << " step " << s + kSteps / 2 + 1;
    }
  }
  // Without a resume the resumed losses differ: the state really came from the checkpoint.
  EXPECT_NE(straight.losses[kSteps / 2], straight.losses[0]);
}

TEST(GptResume, Bf16ResumesBitIdenticallyFromF32MasterWeights) {
  setenv("TPX_NUM_THREADS", "1", 0);
  auto bf16 = [](TrainOptions o) {
    o.model.dtype = DType::kBF16;
    return o;
  };
  const TrainRun straight = TrainOnNewRanks(2, bf16(Options(2)), TestTmpPath("bf16_straight"));
  ASSERT_EQ(straight.losses.size(), static_cast<size_t>(kSteps));

  TrainOptions first_half = bf16(Options(2));
  first_half.save_dir = TestTmpPath("bf16_ckpt");
  first_half.stop_after = kSteps / 2;
  const TrainRun first = TrainOnNewRanks(2, first_half, TestTmpPath("bf16_first"));
  ASSERT_EQ(first.losses.size(), static_cast<size_t>(kSteps / 2));
  std::filesystem::copy(TestTmpPath("bf16_ckpt"), TestTmpPath("bf16_ckpt_f32"),
                        std::filesystem::copy_options::recursive);
  auto meta = sharded_state::ReadMetadata(TestTmpPath("bf16_ckpt") + "/step-00000004");
  ASSERT_TRUE(meta.ok()) << meta.status();
  ASSERT_TRUE(meta->tensors.contains("block0.qkv.weight"));
  for (const auto& [name, layout] : meta->tensors) {
    if (name == "optimizer.param_steps") continue;
    EXPECT_EQ(layout.dtype, DType::kF32) << name << " is not saved as f32 master weights";
  }

  TrainOptions second_half = bf16(Options(2));
  second_half.save_dir = TestTmpPath("bf16_ckpt");
  second_half.resume = true;
  const TrainRun second = TrainOnNewRanks(2, second_half, TestTmpPath("bf16_second"));
  EXPECT_EQ(second.first_step, kSteps / 2);
  ASSERT_EQ(second.losses.size(), static_cast<size_t>(kSteps / 2));
  for (int s = 0; s < kSteps; ++s) {
    const double resumed = s < kSteps / 2 ? first.losses[s] : second.losses[s - kSteps / 2];
    EXPECT_EQ(resumed, straight.losses[s]) << "bf16 step " << s + 1 << " is not bit-identical";
  }

  // The f32 masters resume an f32 run (at TP=1): bf16's tolerance
  // (gpt_tp_invariance_test's kBf16VsF32Tolerance).
  TrainOptions f32 = Options(1);
  f32.save_dir = TestTmpPath("bf16_ckpt_f32");
  f32.resume = true;
  const TrainRun f32_run = TrainOnNewRanks(1, f32, TestTmpPath("bf16_f32"));
  EXPECT_EQ(f32_run.first_step, kSteps / 2);
  ASSERT_EQ(f32_run.losses.size(), static_cast<size_t>(kSteps / 2));
  for (int s = 0; s < kSteps / 2; ++s) {
    EXPECT_NEAR(f32_run.losses[s], straight.losses[s + kSteps / 2], 1e-2)
        << "f32 resume step " << s + kSteps / 2 + 1;
  }
}

}  // namespace
}  // namespace tpx::gpt
