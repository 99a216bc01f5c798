// Checkpoint with distribute_saved_activations over real ranks (UCX): the
// saved input is kept as 1-D pieces and all-gathered for the recomputation.
// A separate binary: RunOnRanks must fork before any GEMM thread pool starts.
#include "checkpoint/checkpoint_testutil.h"
#include "testing/multiprocess.h"

namespace tpx::checkpoint {
namespace {

TEST(Checkpoint, DistributedSavedActivationsMultiRank) {
  testing::RunOptions options;
  options.deadline = absl::Seconds(60);
  for (int world : {2, 3}) {
    testing::RunOnRanks(world, [](testing::RankContext& ctx) {
      // Data-parallel state: the same masks on every rank, as for a block whose
      // input is replicated over the TP group.
      const Mlp mlp = MakeMlp(7, 24, 4, rng::kDataParallelRng);
      const Tensor x = RandomTensor({5, 7}, DType::kF32, 8);  // 35 elements: uneven pieces
      Result r[3];
      for (int mode : {0, 1, 2}) {
        ASSERT_TRUE(rng::ModelParallelManualSeed(99, ctx.rank).ok());
        r[mode] = RunBlock(mlp, x, mode, &ctx.comm);
      }
      ExpectIdentical(r[0], r[1]);
      ExpectIdentical(r[0], r[2]);
    }, options);
  }
}

}  // namespace
}  // namespace tpx::checkpoint
