// Checkpointed blocks with dropout give bit-identical results to plain ones
// and use less memory (multi-rank: checkpoint_multirank_test.cc).
#include <iostream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_testutil.h"
#include "core/allocator.h"

namespace tpx::checkpoint {
namespace {

TEST(Checkpoint, BitIdenticalToThePlainBlockWithDropout) {
  const Mlp mlp = MakeMlp(16, 64, 1, rng::kModelParallelRng);
  const Tensor x = RandomTensor({8, 16}, DType::kF32, 9);
  ASSERT_TRUE(rng::ModelParallelManualSeed(5, 1).ok());
  const Result plain = RunBlock(mlp, x, 0, nullptr);
  const rng::RngStates after_plain = rng::GetRngTracker().GetStates();
  ASSERT_TRUE(rng::ModelParallelManualSeed(5, 1).ok());
  const Result ckpt = RunBlock(mlp, x, 1, nullptr);
  ExpectIdentical(plain, ckpt);
  EXPECT_EQ(rng::GetRngTracker().GetStates(), after_plain);  // recompute advanced nothing
  // A different seed changes the result (the comparison can fail).
  ASSERT_TRUE(rng::ModelParallelManualSeed(6, 1).ok());
  EXPECT_NE(RunBlock(mlp, x, 1, nullptr).out, plain.out);
}

TEST(Checkpoint, ForwardInsideAForkReplaysTheForkedStream) {
  const Mlp mlp = MakeMlp(16, 32, 3, rng::kExpertParallelRng);
  const Tensor x = RandomTensor({4, 16}, DType::kF32, 2);
  Result r[2];
  for (int mode : {0, 1}) {
    ASSERT_TRUE(rng::ModelParallelManualSeed(21, 0).ok());
    auto fork = rng::GetRngTracker().Fork(rng::kDataParallelRng);
    ASSERT_TRUE(fork.ok());
    r[mode] = RunBlock(mlp, x, mode, nullptr);
  }
  ExpectIdentical(r[0], r[1]);
}

TEST(Checkpoint, DistributeNeedsACommunicator) {
  const Mlp mlp = MakeMlp(4, 8, 1, rng::kModelParallelRng);
  Variable x(RandomTensor({2, 4}), true);
  EXPECT_FALSE(Checkpoint(mlp, true, {x}, nullptr).ok());
}

// Peak allocator bytes of forward + backward through N blocks.
int64_t PeakBytes(const std::vector<Mlp>& blocks, const Tensor& x_value, bool checkpointed) {
  CpuAllocator& alloc = GetCpuAllocator();
  Variable x(*x_value.Clone(), true);
  const int64_t base = alloc.CurrentBytes();
  alloc.ResetPeak();
  {
    Variable h = x;
    for (const Mlp& b : blocks) {
      auto out = checkpointed ? Checkpoint(b, false, {h}) : b({h});
      EXPECT_TRUE(out.ok());
      h = (*out)[0];
    }
    Variable loss = *ag::Sum(h);
    EXPECT_TRUE(Backward(loss).ok());
  }
  return alloc.PeakBytes() - base;
}

TEST(Checkpoint, StackOfBlocksUsesLessPeakMemory) {
  ASSERT_TRUE(rng::ModelParallelManualSeed(1, 0).ok());
  const int64_t n = 6, tokens = 256, width = 128, hidden = 512;
  std::vector<Mlp> blocks;
  for (int i = 0; i < n; ++i) blocks.push_back(MakeMlp(width, hidden, 10 + 2 * i, rng::kModelParallelRng));
  const Tensor x = RandomTensor({tokens, width});
  // Warm up lazily allocated gradients so both runs start alike.
  PeakBytes(blocks, x, false);
  const int64_t plain = PeakBytes(blocks, x, false);
  const int64_t ckpt = PeakBytes(blocks, x, true);
  std::cout << "peak bytes for " << n << " MLP blocks [" << tokens << ", " << width << "->"
            << hidden << "]: plain " << plain << ", checkpointed " << ckpt << "\n";
  RecordProperty("peak_bytes_plain", std::to_string(plain));
  RecordProperty("peak_bytes_checkpointed", std::to_string(ckpt));
  EXPECT_LT(ckpt, plain);
}

}  // namespace
}  // namespace tpx::checkpoint
