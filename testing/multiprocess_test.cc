#include "testing/multiprocess.h"

#include <cstdlib>
#include <vector>

#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"

namespace tpx::testing {
namespace {

TEST(RunOnRanks, EveryRankRunsWithItsOwnRank) {
  std::vector<RankOutcome> outcomes = RunOnRanks(3, [](RankContext& ctx) {
    EXPECT_EQ(ctx.comm.size(), 3);
    EXPECT_EQ(ctx.comm.rank(), ctx.rank);
    int32_t x = ctx.rank + 1;
    ASSERT_TRUE(ctx.comm.AllReduce(&x, 1, DType::kI32, comm::ReduceOp::kSum).Wait().ok());
    EXPECT_EQ(x, 6);
  });
  ASSERT_EQ(outcomes.size(), 3u);
  for (const RankOutcome& o : outcomes) EXPECT_EQ(o.exit_code, 0);
}

TEST(RunOnRanks, ReportsFailuresPrefixedWithTheRank) {
  EXPECT_NONFATAL_FAILURE(
      RunOnRanks(2, [](RankContext& ctx) { EXPECT_NE(ctx.rank, 1) << "marker-41"; }),
      "rank 1: ");
}

TEST(RunOnRanks, ReportsACrashedRank) {
  EXPECT_NONFATAL_FAILURE(RunOnRanks(2,
                                     [](RankContext& ctx) {
                                       // abort: sanitizers turn SIGSEGV into exit(1).
                                       if (ctx.rank == 0) std::abort();
                                     }),
                          "rank 0: killed by signal 6");
}

TEST(RunOnRanks, KillsRanksPastTheDeadline) {
  RunOptions options;
  options.deadline = absl::Seconds(2);
  options.comm_timeout = absl::Milliseconds(300);  // rank 0 gives up waiting for rank 1
  EXPECT_NONFATAL_FAILURE(RunOnRanks(
                              2,
                              [](RankContext& ctx) {
                                if (ctx.rank == 1) absl::SleepFor(absl::Seconds(60));
                              },
                              options),
                          "rank 1: still running after the deadline");
}

TEST(RunOnRanks, ExpectedKillIsNotAFailure) {
  RunOptions options;
  options.kill_rank = 1;
  options.kill_point = "start";
  std::vector<RankOutcome> outcomes =
      RunOnRanks(2,
                 [](RankContext& ctx) {
                   // Both ranks are connected before one dies: otherwise rank 0
                   // may still be creating its communicator (and fail) when
                   // rank 1 is killed.
                   EXPECT_TRUE(ctx.comm.Barrier().Wait().ok());
                   ctx.KillPoint("start");
                 },
                 options);
  EXPECT_EQ(outcomes[1].signal, SIGKILL);
  EXPECT_EQ(outcomes[0].exit_code, 0);
}

}  // namespace
}  // namespace tpx::testing
