// Failure behaviour shared by all backends: a dead rank turns into an error
// naming the op and the missing rank on every survivor (never a hang), and
// TPX_COMM_DEBUG reports ranks that issue different collectives.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/multiprocess.h"

namespace tpx::testing {
namespace {

using comm::ReduceOp;

constexpr int kWorld = 3;
constexpr int kVictim = 2;

RunOptions KillOptions(const std::string& point) {
  RunOptions options;
  options.comm_timeout = absl::Milliseconds(1500);
  options.deadline = absl::Seconds(30);
  options.kill_rank = kVictim;
  options.kill_point = point;
  return options;
}

void ExpectNamesOpAndMissingRank(const absl::Status& s, const std::string& op) {
  std::fprintf(stderr, "survivor sees: %s\n", s.ToString().c_str());
  EXPECT_TRUE(s.code() == absl::StatusCode::kDeadlineExceeded ||
              s.code() == absl::StatusCode::kUnavailable ||
              s.code() == absl::StatusCode::kAborted)
      << s;
  EXPECT_NE(s.message().find(op), std::string::npos) << s;
  EXPECT_NE(s.message().find(absl::StrCat("rank ", kVictim, " never entered it")),
            std::string::npos)
      << s;
}

TEST(CommFailure, DeadRankDuringAllReduce) {
  RunOnRanks(kWorld, [](RankContext& ctx) {
    float x[256] = {};
    for (int i = 0; i < 3; ++i) {  // some completed work first
      ASSERT_TRUE(ctx.comm.AllReduce(x, 256, DType::kF32, ReduceOp::kSum).Wait().ok());
    }
    ctx.KillPoint("all_reduce");
    absl::Status s = ctx.comm.AllReduce(x, 256, DType::kF32, ReduceOp::kSum).Wait();
    ExpectNamesOpAndMissingRank(s, "all_reduce #4");
  }, KillOptions("all_reduce"));
}

TEST(CommFailure, DeadRankDuringAllGather) {
  RunOnRanks(kWorld, [](RankContext& ctx) {
    float mine[16] = {}, all[16 * kWorld];
    ASSERT_TRUE(ctx.comm.Barrier().Wait().ok());
    ctx.KillPoint("all_gather");
    absl::Status s = ctx.comm.AllGather(mine, all, 16, DType::kF32).Wait();
    ExpectNamesOpAndMissingRank(s, "all_gather #2");
  }, KillOptions("all_gather"));
}

TEST(CommFailure, DeadRankDuringBarrier) {
  RunOnRanks(kWorld, [](RankContext& ctx) {
    ctx.KillPoint("barrier");
    absl::Status s = ctx.comm.Barrier().Wait();
    ExpectNamesOpAndMissingRank(s, "barrier #1");
  }, KillOptions("barrier"));
}

// In a split, ranks are renumbered; messages name the world ranks too, so a
// user knows which process to look at.
TEST(CommFailure, SplitMessagesNameWorldRanks) {
  RunOptions options = KillOptions("child_all_reduce");
  options.kill_rank = 3;
  RunOnRanks(4, [](RankContext& ctx) {
    auto child = ctx.comm.Split(/*color=*/ctx.rank % 2, /*key=*/ctx.rank);
    ASSERT_TRUE(child.ok()) << child.status();
    if (ctx.rank % 2 == 0) return;
    ctx.KillPoint("child_all_reduce");
    float x[4] = {};
    absl::Status s = (*child)->AllReduce(x, 4, DType::kF32, ReduceOp::kSum).Wait();
    std::fprintf(stderr, "survivor sees: %s\n", s.ToString().c_str());
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("on rank 0 (world rank 1) of world/split1/c1"), std::string::npos)
        << s;
    EXPECT_NE(s.message().find("rank 1 (world rank 3) never entered it"), std::string::npos)
        << s;
  }, options);
}

TEST(CommDebug, MismatchedCollectivesAreReportedOnEveryRank) {
  RunOptions options;
  options.debug_checks = true;
  options.comm_timeout = absl::Seconds(10);
  RunOnRanks(2, [](RankContext& ctx) {
    float x[16] = {};
    // Matching calls pass the check.
    ASSERT_TRUE(ctx.comm.AllReduce(x, 16, DType::kF32, ReduceOp::kSum).Wait().ok());
    ASSERT_TRUE(ctx.comm.Broadcast(x, 16, DType::kF32, 1).Wait().ok());
    // Rank 1 passes a different count.
    const int64_t count = ctx.rank == 0 ? 8 : 16;
    absl::Status s = ctx.comm.AllReduce(x, count, DType::kF32, ReduceOp::kSum).Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("#3"), std::string::npos) << s;
    EXPECT_NE(s.message().find("rank 0 issued all_reduce(f32, sum, count 8) but rank 1 issued "
                               "all_reduce(f32, sum, count 16)"),
              std::string::npos)
        << s;
    // A different root.
    s = ctx.comm.Broadcast(x, 4, DType::kF32, ctx.rank).Wait();
    EXPECT_NE(s.message().find("rank 0 issued broadcast(f32, root 0, count 4) but rank 1 "
                               "issued broadcast(f32, root 1, count 4)"),
              std::string::npos)
        << s;
    // Still usable afterwards.
    EXPECT_TRUE(ctx.comm.AllReduce(x, 16, DType::kF32, ReduceOp::kMax).Wait().ok());
  }, options);
}

}  // namespace
}  // namespace tpx::testing
