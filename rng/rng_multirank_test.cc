// Tracker seeding and TP-invariant dropout across real ranks (UCX).
#include <vector>

#include "core/autograd/variable.h"
#include "gtest/gtest.h"
#include "core/ops.h"
#include "rng/dropout.h"
#include "rng/random.h"
#include "rng/tracker.h"
#include "testing/multiprocess.h"

namespace tpx::rng {
namespace {

// The dropout keep-mask of an all-ones [rows, cols] activation drawn inside a
// fork of `state`, as floats (0 or 1/(1-p)).
std::vector<float> ForkedDropout(const char* state, const Shape& shape, const ShardSpec* shard) {
  auto fork = GetRngTracker().Fork(state);
  EXPECT_TRUE(fork.ok()) << fork.status();
  Variable x(*Tensor::Ones(shard != nullptr ? shard->LocalShape() : shape));
  auto y = Dropout(x, 0.5, /*training=*/true, shard);
  EXPECT_TRUE(y.ok()) << y.status();
  return y->value().ToVector<float>();
}

// All ranks' vectors (equal lengths), rank-major.
std::vector<std::vector<float>> AllGather(comm::Communicator& comm, const std::vector<float>& v) {
  std::vector<float> all(v.size() * comm.size());
  EXPECT_TRUE(comm.AllGather(v.data(), all.data(), v.size(), DType::kF32).Wait().ok());
  std::vector<std::vector<float>> out;
  for (int r = 0; r < comm.size(); ++r) {
    out.emplace_back(all.begin() + r * v.size(), all.begin() + (r + 1) * v.size());
  }
  return out;
}

// World 4 = DP 2 x TP 2 (tp_rank = rank % 2).
TEST(TrackerMultiRank, PerRankSeedingGivesTpDistinctDpEqualMasks) {
  testing::RunOnRanks(4, [](testing::RankContext& ctx) {
    const int tp_rank = ctx.rank % 2;
    ASSERT_TRUE(ModelParallelManualSeed(1234, tp_rank).ok());
    const GeneratorState outer = DefaultGenerator().state();
    const Shape shape = {16, 32};
    auto tp_masks = AllGather(ctx.comm, ForkedDropout(kModelParallelRng, shape, nullptr));
    auto dp_masks = AllGather(ctx.comm, ForkedDropout(kDataParallelRng, shape, nullptr));
    EXPECT_EQ(DefaultGenerator().state(), outer);  // forks leave the default untouched
    EXPECT_NE(tp_masks[0], tp_masks[1]);           // different TP ranks differ
    EXPECT_EQ(tp_masks[0], tp_masks[2]);           // same TP rank, other DP group
    EXPECT_EQ(tp_masks[1], tp_masks[3]);
    for (int r = 1; r < 4; ++r) EXPECT_EQ(dp_masks[r], dp_masks[0]);  // replicated state
  });
}

// TP-invariant mode: each rank's shard mask is the slice of the TP=1 mask, for
// TP = 4 (world) and TP = 2 (split), dims 0 and 1, even and uneven.
TEST(TrackerMultiRank, TpInvariantMasksAreSlicesOfTheWholeMask) {
  testing::RunOnRanks(4, [](testing::RankContext& ctx) {
    auto tp2 = ctx.comm.Split(ctx.rank / 2, ctx.rank);
    ASSERT_TRUE(tp2.ok()) << tp2.status();
    for (comm::Communicator* tp : {&ctx.comm, tp2->get()}) {
      for (const Shape& global : {Shape{12, 8}, Shape{10, 7}, Shape{3, 5, 9}}) {
        for (int64_t dim : {0, 1}) {
          SCOPED_TRACE(::testing::Message() << "tp " << tp->size() << " dim " << dim
                                            << " shape " << ShapeString(global));
          // The whole tensor's mask, as a TP=1 run would draw it.
          ASSERT_TRUE(ModelParallelManualSeed(77, 0, 0, 0, SeedMode::kTpInvariant).ok());
          Tensor whole = *Tensor::FromVector(ForkedDropout(kModelParallelRng, global, nullptr),
                                             global);
          // This rank's shard at TP = tp->size().
          ASSERT_TRUE(
              ModelParallelManualSeed(77, tp->rank(), 0, 0, SeedMode::kTpInvariant).ok());
          ShardSpec shard = *ShardOf(global, dim, tp->rank(), tp->size());
          std::vector<float> mine = ForkedDropout(kModelParallelRng, global, &shard);
          EXPECT_EQ(mine, (*whole.Narrow(dim, shard.offset, shard.length)).ToVector<float>());
          // The pieces of all ranks concatenate to the whole mask.
          if (dim == 0) {
            std::vector<int64_t> counts, displs;
            int64_t at = 0;
            for (int64_t s : ops::SplitSizes(global[0], tp->size())) {
              counts.push_back(s * whole.numel() / global[0]);
              displs.push_back(at);
              at += counts.back();
            }
            std::vector<float> all(whole.numel());
            ASSERT_TRUE(tp->AllGatherV(mine.data(), all.data(), counts, displs, DType::kF32)
                            .Wait()
                            .ok());
            EXPECT_EQ(all, whole.ToVector<float>());
          }
        }
      }
    }
  });
}

}  // namespace
}  // namespace tpx::rng
