// Asynchronous save: the checkpoint holds the model as it was when the save
// started, although the model changes while the files are written; a save
// dropped without Wait commits nothing. Two real ranks (TP=2) over UCX.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "parallel/parallel_state.h"
#include "sharded_state/load.h"
#include "sharded_state/save.h"
#include "sharded_state/tiny_net_testutil.h"
#include "testing/multiprocess.h"

namespace tpx::sharded_state {
namespace {

bool BitEqual(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST(AsyncSave, SavesTheSnapshotWhileTheModelChanges) {
  testing::RunOptions options;
  options.comm_timeout = absl::Seconds(30);
  testing::RunOnRanks(2, [](testing::RankContext& ctx) {
    const std::string root = std::string(std::getenv("TEST_TMPDIR")) + "/async";
    auto ps = parallel::ParallelState::Create(ctx.comm, 2);
    auto model = TinyNet::Create(ctx.comm, 1);
    auto original = TinyNet::Create(ctx.comm, 1);
    auto other = TinyNet::Create(ctx.comm, 2);
    ASSERT_TRUE(ps.ok() && model.ok() && original.ok() && other.ok());
    auto state = (*model)->ShardedState();
    auto other_state = (*other)->ShardedState();
    ASSERT_TRUE(state.ok() && other_state.ok());

    // The writer thread waits until the model has changed, so the file can
    // only hold the original values if they were copied at the start.
    absl::Notification model_changed;
    SaveOptions save{.step = 1};
    save.on_point = [&](absl::string_view point) {
      if (point == "file-start") model_changed.WaitForNotification();
    };
    auto pending = StartShardedSave(**ps, root, *state, save);
    ASSERT_TRUE(pending.ok()) << pending.status();
    // "Training" goes on: every parameter changes before the files are written.
    for (size_t i = 0; i < state->size(); ++i) {
      EXPECT_TRUE(AssignFromShard((*state)[i], (*other_state)[i].local).ok());
    }
    model_changed.Notify();
    auto dir = pending->Wait();
    ASSERT_TRUE(dir.ok()) << dir.status();
    EXPECT_FALSE(pending->Wait().ok()) << "a second Wait has nothing to wait for";

    // A save dropped without Wait commits nothing: "latest" still names step 1.
    {
      auto dropped = StartShardedSave(**ps, root, *state, {.step = 2});
      ASSERT_TRUE(dropped.ok()) << dropped.status();
    }
    ASSERT_TRUE(ctx.comm.Barrier().Wait().ok());

    auto loaded = TinyNet::Create(ctx.comm, 3);
    ASSERT_TRUE(loaded.ok());
    auto loaded_state = (*loaded)->ShardedState();
    auto meta = LoadShardedState(ctx.comm, root, *loaded_state);
    ASSERT_TRUE(meta.ok()) << meta.status();
    EXPECT_EQ(meta->step, 1);
    auto expected = (*original)->ShardedState();
    for (size_t i = 0; i < loaded_state->size(); ++i) {
      EXPECT_TRUE(BitEqual((*loaded_state)[i].local, (*expected)[i].local))
          << (*loaded_state)[i].name;
    }
    // The next save works and removes the dropped save's temp dir.
    auto next = StartShardedSave(**ps, root, *state, {.step = 3});
    ASSERT_TRUE(next.ok());
    auto next_dir = next->Wait();
    ASSERT_TRUE(next_dir.ok()) << next_dir.status();
    EXPECT_EQ(*next_dir, root + "/step-00000003");
    EXPECT_TRUE(LoadShardedState(ctx.comm, root, *loaded_state).ok());
    for (size_t i = 0; i < loaded_state->size(); ++i) {
      EXPECT_TRUE(BitEqual((*loaded_state)[i].local, (*other_state)[i].local));
    }
  }, options);
}

}  // namespace
}  // namespace tpx::sharded_state
