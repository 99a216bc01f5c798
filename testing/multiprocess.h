// Multi-rank test harness: runs a test body on N real processes that talk
// through a real communication backend, and reports every rank's gtest
// failures in the calling test as "rank r: ...".
//
//   TEST(MyLayer, MatchesSerial) {
//     tpx::testing::RunOnRanks(4, [](tpx::testing::RankContext& ctx) {
//       std::vector<float> x(8, ctx.rank);
//       ASSERT_TRUE(ctx.comm.AllReduce(x.data(), 8, DType::kF32, ReduceOp::kSum).Wait().ok());
//       EXPECT_EQ(x[0], 6.0f);
//     });
//   }
//
// The parent forks the ranks before it starts any thread, then hosts the
// TcpStore they rendezvous through. Each rank loads the backend plugin
// (found through runfiles: declare the test with tpx_multirank_test from
// testing/multirank_test.bzl), creates the world communicator and runs the body.
// A fresh set of ranks per call costs tens of milliseconds, so for UCX the
// parent loads the plugin's libraries once for all ranks it forks, and ranks
// keep UCX to what one host uses (UCX_NET_DEVICES=lo, UCX_TLS=^posix,
// UCX_MODULES=^ib,rdmacm; the environment's own values win). Ranks that
// crash, exit early or outlive the deadline are killed and reported. For
// failure tests, a rank can be made to die at a named point
// (RunOptions::kill_rank / kill_point, RankContext::KillPoint). With a
// device backend (nccl), rank r's communicator is bound to CUDA device r.
#ifndef TPX_TESTING_MULTIPROCESS_H_
#define TPX_TESTING_MULTIPROCESS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "comm/store/store.h"

namespace tpx::testing {

struct RunOptions {
  // Backend plugin name; the environment variable TPX_TEST_COMM_BACKEND
  // overrides the default.
  std::string backend = "ucx";
  // The communicator timeout: how long a rank waits for a dead peer.
  absl::Duration comm_timeout = absl::Seconds(3);
  // Ranks still running after this are killed and reported.
  absl::Duration deadline = absl::Seconds(90);
  // TPX_COMM_DEBUG-style descriptor checks before each collective.
  bool debug_checks = false;
  // The rank that dies (SIGKILL) when it reaches KillPoint(kill_point).
  int kill_rank = -1;
  std::string kill_point;
  // Multi-host emulation (testing/emulated_hosts.h sets these): runs first
  // in each forked rank (an error fails the rank), and the store listens on
  // store_addr inside the network namespace at path store_netns ("" = this
  // process's own).
  std::function<absl::Status(int rank)> enter_rank_host;
  std::string store_addr = "127.0.0.1";
  std::string store_netns;
};

struct RankContext {
  int rank;
  int size;
  comm::Communicator& comm;
  // The job's rendezvous store (shared by all ranks).
  comm::Store& store;
  const RunOptions& options;

  // Dies here if this is options.kill_rank and `point` is options.kill_point.
  void KillPoint(absl::string_view point) const;
};

// What happened to one rank (for tests that inspect outcomes).
struct RankOutcome {
  int exit_code = -1;    // when it exited normally
  int signal = 0;        // when it was killed by a signal
  bool timed_out = false;
  std::vector<std::string> failures;  // its gtest failure messages
};

// Runs `body` on `world_size` processes; adds a gtest failure to the calling
// test for every failing, crashing or hanging rank (an expected kill of
// options.kill_rank is not a failure). Returns the per-rank outcomes.
std::vector<RankOutcome> RunOnRanks(int world_size,
                                    const std::function<void(RankContext&)>& body,
                                    const RunOptions& options = RunOptions());

}  // namespace tpx::testing

#endif  // TPX_TESTING_MULTIPROCESS_H_
