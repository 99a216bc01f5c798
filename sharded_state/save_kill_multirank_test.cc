// A save killed (SIGKILL) at any stage never damages the previous
// checkpoint: for each stage of SaveShardedState (temp dir made, after a
// tensor of a shard file, file synced, metadata written, directory renamed,
// "latest" replaced) one trial kills a rank there while it saves a second
// model over a root that holds a first one. Loading the root afterwards
// gives exactly the first model, or the second where the kill came after
// the commit, never an error or a mix; the next save succeeds and removes
// the leftovers.
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "parallel/parallel_state.h"
#include "sharded_state/load.h"
#include "sharded_state/save.h"
#include "sharded_state/tiny_net_testutil.h"
#include "testing/multiprocess.h"

namespace tpx::sharded_state {
namespace {

struct Trial {
  int rank;
  const char* point;  // "<stage>#<n>": the n-th time this rank reaches the stage
  bool committed;     // the second save is the latest after the kill
};

std::string Root(size_t trial) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/kill", trial);
}

bool BitEqual(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST(SaveKill, PreviousCheckpointSurvivesAKillAtEveryStage) {
  const std::vector<Trial> trials = {
      {1, "begin#0", false},          {1, "tensor-written#0", false},
      {1, "tensor-written#3", false}, {1, "file-written#0", false},
      {0, "tensor-written#2", false}, {0, "metadata-written#0", false},
      {0, "renamed#0", false},        {0, "committed#0", true},
  };
  testing::RunOptions healthy;
  healthy.comm_timeout = absl::Seconds(30);
  // The first checkpoint of every trial, by a job where nobody dies.
  testing::RunOnRanks(2, [&](testing::RankContext& ctx) {
    auto ps = parallel::ParallelState::Create(ctx.comm, 2);
    ASSERT_TRUE(ps.ok());
    auto first = TinyNet::Create(ctx.comm, 1);
    ASSERT_TRUE(first.ok());
    for (size_t i = 0; i < trials.size(); ++i) {
      ASSERT_TRUE(SaveShardedState(**ps, Root(i), *(*first)->ShardedState(), {.step = 1}).ok());
    }
  }, healthy);
  for (size_t i = 0; i < trials.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("kill rank ", trials[i].rank, " at ", trials[i].point));
    testing::RunOptions options;
    options.comm_timeout = absl::Seconds(3);  // how long the survivor waits for the dead rank
    options.kill_rank = trials[i].rank;
    options.kill_point = trials[i].point;
    auto outcomes = testing::RunOnRanks(2, [&](testing::RankContext& ctx) {
      auto ps = parallel::ParallelState::Create(ctx.comm, 2);
      ASSERT_TRUE(ps.ok());
      auto second = TinyNet::Create(ctx.comm, 2);
      ASSERT_TRUE(second.ok());
      std::map<std::string, int> seen;
      SaveOptions save{.step = 2};
      save.on_point = [&](absl::string_view point) {
        const std::string name(point);
        ctx.KillPoint(absl::StrCat(name, "#", seen[name]++));
      };
      // The survivor's save fails (its peer died); only the files matter here.
      (void)SaveShardedState(**ps, Root(i), *(*second)->ShardedState(), save);
    }, options);
    ASSERT_EQ(outcomes.size(), 2u);
    EXPECT_EQ(outcomes[static_cast<size_t>(trials[i].rank)].signal, SIGKILL) << "no kill happened";
  }
  // Check every root in one fresh job: loads, content, and a later save.
  testing::RunOnRanks(2, [&](testing::RankContext& ctx) {
    auto ps = parallel::ParallelState::Create(ctx.comm, 2);
    ASSERT_TRUE(ps.ok());
    auto first = TinyNet::Create(ctx.comm, 1);
    auto second = TinyNet::Create(ctx.comm, 2);
    ASSERT_TRUE(first.ok() && second.ok());
    for (size_t i = 0; i < trials.size(); ++i) {
      SCOPED_TRACE(absl::StrCat("killed rank ", trials[i].rank, " at ", trials[i].point));
      auto net = TinyNet::Create(ctx.comm, 3);
      ASSERT_TRUE(net.ok());
      auto state = (*net)->ShardedState();
      auto meta = LoadShardedState(ctx.comm, Root(i), *state);
      ASSERT_TRUE(meta.ok()) << meta.status();
      EXPECT_EQ(meta->step, trials[i].committed ? 2 : 1);
      auto expected = (trials[i].committed ? *second : *first)->ShardedState();
      for (size_t t = 0; t < state->size(); ++t) {
        EXPECT_TRUE(BitEqual((*state)[t].local, (*expected)[t].local)) << (*state)[t].name;
      }
      auto again = SaveShardedState(**ps, Root(i), *state, {.step = 3});
      ASSERT_TRUE(again.ok()) << again.status();
      EXPECT_TRUE(LoadShardedState(ctx.comm, Root(i), *state).ok());
      if (ctx.rank == 0) {
        for (const auto& e : std::filesystem::directory_iterator(Root(i))) {
          EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << "leftover " << e.path();
        }
      }
    }
  }, healthy);
}

}  // namespace
}  // namespace tpx::sharded_state
