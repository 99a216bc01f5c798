// The GPT example at TP=2 x DP=2 across two emulated hosts
// (testing/emulated_hosts.h) gives the same losses as on one host. Ranks 0, 1
// sit on host 0 and ranks 2, 3 on host 1, so each tensor-parallel pair shares
// its host's memory and the data-parallel gradient and loss all-reduces go
// between hosts over TCP; the reference is the same 4-rank run on this host
// (shared memory everywhere).
//
// Bit for bit, not within a tolerance: the transport only carries bytes.
// Which rank adds which partial sum, and in what order, is fixed by the UCX
// plugin's algorithm choice (world size, message size and its tunables,
// comm_ucx/tunables.h), never by the transport, and every rank computes its
// shard with one GEMM thread (TPX_NUM_THREADS=1) from the same seeds. A
// single differing bit means data was lost, reordered or mixed up on the
// way. Skips where network namespaces cannot be made.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "examples/gpt/tiny_gpt_testutil.h"
#include "examples/gpt/trainer.h"
#include "gtest/gtest.h"
#include "testing/emulated_hosts.h"
#include "testing/multiprocess.h"

namespace tpx::gpt {
namespace {

constexpr int kSteps = 6;
constexpr int kHosts = 2;
constexpr int kRanksPerHost = 2;

TEST(GptMultiHost, Tp2Dp2AcrossTwoHostsGivesTheLossesOfOneHost) {
  TPX_EMULATED_HOSTS_OR_SKIP(hosts, kHosts);
  setenv("TPX_NUM_THREADS", "1", 0);
  const TrainOptions options = TinyTrainOptions(/*tp=*/2, kSteps, /*warmup_steps=*/2);
  const int world = kHosts * kRanksPerHost;

  const TrainRun one_host = TrainOnNewRanks(world, options, TestTmpPath("one_host"));
  testing::RunOptions across;
  hosts->PlaceRanks(kRanksPerHost, &across);
  const TrainRun two_hosts = TrainOnNewRanks(world, options, TestTmpPath("two_hosts"), across);

  ASSERT_EQ(one_host.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(two_hosts.losses.size(), static_cast<size_t>(kSteps));
  for (int s = 0; s < kSteps; ++s) {
    std::printf("step %d: loss %.9g on one host, %.9g on two hosts\n", s + 1, one_host.losses[s],
                two_hosts.losses[s]);
    EXPECT_EQ(two_hosts.losses[s], one_host.losses[s])
        << "step " << s + 1 << ": 2 hosts x 2 ranks differs from 4 ranks on one host";
  }
  // The runs really trained: the losses move from step to step.
  EXPECT_NE(one_host.losses.front(), one_host.losses.back());
}

}  // namespace
}  // namespace tpx::gpt
