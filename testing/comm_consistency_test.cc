// A collective either gives the right answer on every rank or an error on
// every rank, with debug checks off (the production setting), over the real
// UCX plugin at world sizes 2-4:
//  - ranks that disagree on a size get a "size mismatch" error naming both
//    sizes, never a half-filled buffer;
//  - a rank whose call is rejected locally tells its peers, which fail at
//    once with the cause instead of after the communicator timeout;
//  - the same bad call on every rank leaves the communicator usable;
//  - a peer that finished its part and exited is not an error;
//  - communicators created and split in quick succession always connect.
// The communicator timeout is long (60 s): an error that arrives with any
// code other than DEADLINE_EXCEEDED came through the fast path.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "testing/multiprocess.h"

namespace tpx::testing {
namespace {

using comm::ReduceOp;

RunOptions SlowTimeout() {
  RunOptions options;
  options.comm_timeout = absl::Seconds(60);
  options.deadline = absl::Seconds(50);  // fails the test long before any timeout could fire
  return options;
}

void ExpectFastError(const absl::Status& s, const std::string& fragment, int rank) {
  std::fprintf(stderr, "rank %d sees: %s\n", rank, s.ToString().c_str());
  EXPECT_FALSE(s.ok()) << "rank " << rank << " got OK";
  EXPECT_NE(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find(fragment), std::string::npos) << "'" << fragment << "' missing: " << s;
}

class Consistency : public ::testing::TestWithParam<int> {};

// The sequence-parallel all-gather of a layer where rank 0 holds 5 rows and
// the others 4: every rank fails the all-gather itself, and the next call.
TEST_P(Consistency, SizeMismatchFailsEveryRank) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const int64_t rows = ctx.rank == 0 ? 5 : 4;
    Tensor in = *Tensor::Full({rows, 3}, 1.0 + ctx.rank);
    Tensor out = *Tensor::Zeros({rows * ctx.size, 3});
    absl::Status s = ctx.comm.AllGather(in, out).Wait();
    ExpectFastError(s, "all_gather", ctx.rank);
    EXPECT_TRUE(s.message().find("size mismatch") != std::string::npos ||
                s.message().find("failed collective #1") != std::string::npos)
        << s;
    ExpectFastError(ctx.comm.Barrier().Wait(), "barrier", ctx.rank);
  }, SlowTimeout());
}

// A gather where the root expects more bytes than a rank sends: the root
// names both sizes; the senders learn of it at their next call.
TEST_P(Consistency, ShortMessageNamesBothSizes) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    const int last = ctx.size - 1;
    std::vector<int64_t> counts(ctx.size, 4);
    std::vector<float> recv(4 * ctx.size, -1.0f);
    std::vector<float> send(4, ctx.rank);
    // Rank `last` sends 3 elements; the root was told 4.
    const int64_t mine = ctx.rank == last ? 3 : 4;
    absl::Status s =
        ctx.comm.GatherV(send.data(), mine, recv.data(), counts, {}, DType::kF32, 0).Wait();
    if (ctx.rank == 0) {
      ExpectFastError(s, "size mismatch", ctx.rank);
      EXPECT_NE(s.message().find(absl::StrCat("rank ", last, " sent 12 bytes where rank 0 "
                                              "expected 16")),
                std::string::npos)
          << s;
      EXPECT_NE(s.message().find("gather_v #1"), std::string::npos) << s;
    }
    ExpectFastError(ctx.comm.Barrier().Wait(), "size mismatch", ctx.rank);
  }, SlowTimeout());
}

// Rank 1's input does not match the row counts every rank declared: it fails
// at once with INVALID_ARGUMENT, the root at once with the same reason.
TEST_P(Consistency, LocalRejectionReachesThePeers) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    std::vector<int64_t> rows(ctx.size, 2);
    const int64_t mine = ctx.rank == 1 ? 3 : 2;
    Tensor in = *Tensor::Full({mine, 4}, ctx.rank);
    Tensor out = *Tensor::Zeros({2 * ctx.size, 4});
    absl::Status s = ctx.comm.GatherV(in, out, rows, /*root=*/0).Wait();
    if (ctx.rank == 1) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    } else if (ctx.rank == 0) {
      ExpectFastError(s, "rank 1 rejected collective #1", ctx.rank);
      EXPECT_NE(s.message().find("gather_v on rank 1"), std::string::npos) << s;
    }
    // Nobody is left waiting: every rank's next call fails, naming the cause.
    ExpectFastError(ctx.comm.Barrier().Wait(), "rank 1", ctx.rank);
  }, SlowTimeout());
}

// The same bad call on every rank, many times: rejections cancel out and
// the communicator stays usable (no rank reads another's notice as a failure).
TEST_P(Consistency, SameRejectionEverywhereKeepsTheCommunicator) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    Tensor in = *Tensor::Full({2, 3}, 1.0);
    Tensor wrong = *Tensor::Zeros({2 * ctx.size + 1, 3});
    for (int i = 0; i < 20; ++i) {
      absl::Status s = ctx.comm.AllGather(in, wrong).Wait();
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      int32_t v = ctx.rank + i;
      absl::Status ok = ctx.comm.AllReduce(&v, 1, DType::kI32, ReduceOp::kMax).Wait();
      ASSERT_TRUE(ok.ok()) << "iteration " << i << ": " << ok;
      EXPECT_EQ(v, ctx.size - 1 + i);
    }
  }, SlowTimeout());
}

// The root scatters and exits at once, without waiting for anyone; the
// others receive afterwards. Its messages arrived: no error.
TEST_P(Consistency, PeerThatExitedAfterItsPartIsNotAnError) {
  RunOptions options;
  options.comm_timeout = absl::Seconds(2);  // the survivors' final rendezvous waits this long
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    std::vector<float> all(8 * ctx.size);
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<float>(i);
    std::vector<int64_t> counts(ctx.size, 8);
    std::vector<float> mine(8, -1.0f);
    if (ctx.rank == 0) {
      absl::Status s =
          ctx.comm.ScatterV(all.data(), counts, {}, mine.data(), 8, DType::kF32, 0).Wait();
      if (!s.ok()) std::fprintf(stderr, "root: %s\n", s.ToString().c_str());
      std::fflush(stderr);
      ::_exit(s.ok() ? 0 : 1);
    }
    // Let the root be gone before this rank looks for its message.
    ::usleep(300 * 1000);
    absl::Status s =
        ctx.comm.ScatterV(nullptr, counts, {}, mine.data(), 8, DType::kF32, 0).Wait();
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(mine[7], 8.0f * ctx.rank + 7);
  }, options);
}

// Splits in quick succession, each child destroyed as soon as it was made
// on some ranks while others are still connecting.
TEST_P(Consistency, RepeatedSplitsAlwaysConnect) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    for (int i = 0; i < 10; ++i) {
      auto child = ctx.comm.Split(/*color=*/ctx.rank % 2, /*key=*/ctx.rank);
      ASSERT_TRUE(child.ok()) << "split " << i << ": " << child.status();
      if (i % 2 == 1) {
        int32_t v = 1;
        ASSERT_TRUE((*child)->AllReduce(&v, 1, DType::kI32, ReduceOp::kSum).Wait().ok());
        EXPECT_EQ(v, (ctx.size + 1 - ctx.rank % 2) / 2);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, Consistency, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("world", info.param);
                         });

}  // namespace
}  // namespace tpx::testing
