// tpxrun across two emulated hosts (testing/emulated_hosts.h): one tpxrun
// per host with torchrun's multi-node options; a failure on either node
// stops the other's ranks (told through the store), a node finishing first
// does not, a lost store stops the job, and a node that never comes is named.
// The store port is fixed: it lives inside namespaces this test just made,
// where nothing else listens. Skips where namespaces cannot be created.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "testing/emulated_hosts.h"
#include "testing/test_files.h"

namespace tpx::testing {
namespace {

std::vector<std::string> Tpxrun(const EmulatedHosts& hosts, int nnodes, int node_rank,
                                std::vector<std::string> extra) {
  std::vector<std::string> argv = {Runfile("tools/tpxrun"),
                                   "--nnodes", absl::StrCat(nnodes),
                                   "--node_rank", absl::StrCat(node_rank),
                                   "--nproc", "2",
                                   "--master_addr", hosts.address(0),
                                   "--master_port", "29500"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

// Every node's tpxrun gets the job's store secret (the same everywhere).
const std::string kSecret = "TPX_STORE_SECRET=0123456789abcdef0123456789abcdef";

std::string NodeLog(const std::string& job, int node) {
  return LogPath(absl::StrCat(job, "_node", node));
}

// Starts one tpxrun per emulated host (2 ranks each) running
// tpxrun_test_prog with `prog_args`; node k logs to NodeLog(job, k).
std::vector<pid_t> StartJob(const EmulatedHosts& hosts, const std::string& job,
                            const std::vector<std::string>& prog_args) {
  std::vector<std::string> command = {"--", Runfile("tools/tpxrun_test_prog")};
  command.insert(command.end(), prog_args.begin(), prog_args.end());
  std::vector<pid_t> pids;
  for (int node = 0; node < hosts.size(); ++node) {
    auto pid = hosts.Spawn(node, Tpxrun(hosts, hosts.size(), node, command), NodeLog(job, node),
                           {kSecret});
    EXPECT_TRUE(pid.ok()) << pid.status();
    if (pid.ok()) pids.push_back(*pid);
  }
  return pids;
}

// Node `node`'s tpxrun exit code (-1 when it had to be killed) and its log.
std::pair<int, std::string> Finish(pid_t pid, const std::string& job, int node) {
  // Far below the 120 s the sleeping ranks would take on their own.
  auto code = WaitForExit(pid, absl::Seconds(60));
  const std::string log = ReadAll(NodeLog(job, node));
  EXPECT_TRUE(code.ok()) << "node " << node << ": " << code.status() << "\n" << log;
  return {code.ok() ? *code : -1, log};
}

bool Has(const std::string& log, const std::string& text) {
  return log.find(text) != std::string::npos;
}

TEST(TpxrunMultiNode, TwoNodesRunOneJob) {
  TPX_EMULATED_HOSTS_OR_SKIP(hosts, 2);
  std::vector<pid_t> pids = StartJob(*hosts, "two_nodes", {"allreduce"});
  ASSERT_EQ(pids.size(), 2u);
  for (int node = 0; node < 2; ++node) {
    auto [code, log] = Finish(pids[node], "two_nodes", node);
    EXPECT_EQ(code, 0) << log;
    // Node k runs global ranks 2k and 2k+1; all four take part: 1+2+3+4.
    for (int r = 2 * node; r < 2 * node + 2; ++r) {
      EXPECT_TRUE(Has(log, absl::StrCat("[rank ", r, "] sum=10"))) << log;
    }
    EXPECT_FALSE(Has(log, "failed")) << log;
  }
}

// A rank fails on one node while every other rank sleeps for 120 s: only
// the other node's tpxrun, told through the store, can stop its ranks in time.
struct NodeFailure {
  std::string job;                     // also the test's name
  std::vector<std::string> prog_args;  // of tpxrun_test_prog
  int failing_node;
  int exit_code;                       // of both nodes' tpxrun
  std::string failing_node_says, other_node_says;
};

class TpxrunNodeFailure : public ::testing::TestWithParam<NodeFailure> {};

TEST_P(TpxrunNodeFailure, StopsTheOtherNode) {
  const NodeFailure& c = GetParam();
  TPX_EMULATED_HOSTS_OR_SKIP(hosts, 2);
  std::vector<pid_t> pids = StartJob(*hosts, c.job, c.prog_args);
  ASSERT_EQ(pids.size(), 2u);
  // The failing node first: node 0 keeps the store up until node 1 has left.
  for (int node : {c.failing_node, 1 - c.failing_node}) {
    auto [code, log] = Finish(pids[node], c.job, node);
    EXPECT_EQ(code, c.exit_code) << log;
    const std::string& says = node == c.failing_node ? c.failing_node_says : c.other_node_says;
    EXPECT_TRUE(Has(log, says)) << log;
    EXPECT_FALSE(Has(log, "did not finish")) << log;
  }
}

INSTANTIATE_TEST_SUITE_P(
    TpxrunMultiNode, TpxrunNodeFailure,
    ::testing::Values(
        NodeFailure{"ExitOnNode1", {"fail", "3"}, 1, 3,
                    "tpxrun: rank 3 exited with code 3; stopping the other ranks",
                    "tpxrun: the job failed on node 1: rank 3 exited with code 3; "
                    "stopping the ranks"},
        NodeFailure{"SigkillOnNode1", {"kill", "3"}, 1, 128 + SIGKILL,
                    "tpxrun: rank 3 was killed by signal 9 (Killed); stopping the other ranks",
                    "tpxrun: the job failed on node 1: rank 3 was killed by signal 9 (Killed); "
                    "stopping the ranks"},
        // The store's own node fails.
        NodeFailure{"ExitOnNode0", {"fail", "0"}, 0, 3,
                    "tpxrun: rank 0 exited with code 3; stopping the other ranks",
                    "tpxrun: the job failed on node 0: rank 0 exited with code 3; "
                    "stopping the ranks"}),
    [](const ::testing::TestParamInfo<NodeFailure>& info) { return info.param.job; });

// Node 1 finishes (all ranks exit 0) while node 0's ranks still run: that
// is not a failure, and node 0 finishes cleanly later.
TEST(TpxrunMultiNode, ANodeFinishingFirstIsNotAFailure) {
  TPX_EMULATED_HOSTS_OR_SKIP(hosts, 2);
  const std::string go = absl::StrCat(std::getenv("TEST_TMPDIR"), "/finish_node0");
  std::vector<pid_t> pids = StartJob(*hosts, "uneven", {"wait_file", go});
  ASSERT_EQ(pids.size(), 2u);
  auto [code1, log1] = Finish(pids[1], "uneven", 1);
  EXPECT_EQ(code1, 0) << log1;
  FILE* f = std::fopen(go.c_str(), "w");  // node 0's ranks may finish now
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  auto [code0, log0] = Finish(pids[0], "uneven", 0);
  EXPECT_EQ(code0, 0) << log0;
  EXPECT_FALSE(Has(log0, "failed")) << log0;
  EXPECT_FALSE(Has(log0, "stopping")) << log0;
}

// Node 0's tpxrun (with the store) is SIGKILLed: its ranks die with it, and
// node 1, whose ranks sleep, stops once the store stays silent.
TEST(TpxrunMultiNode, LosingTheStoreStopsTheJob) {
  TPX_EMULATED_HOSTS_OR_SKIP(hosts, 2);
  std::vector<pid_t> pids = StartJob(*hosts, "lost", {"sleep"});
  ASSERT_EQ(pids.size(), 2u);
  // Kill only once node 1's ranks run (bounded wait on its log).
  for (int i = 0; i < 3000; ++i) {
    const std::string log = ReadAll(NodeLog("lost", 1));
    if (Has(log, "[rank 2] pid=") && Has(log, "[rank 3] pid=")) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  ::kill(pids[0], SIGKILL);
  auto [code0, log0] = Finish(pids[0], "lost", 0);
  EXPECT_EQ(code0, 128 + SIGKILL) << log0;
  auto [code1, log1] = Finish(pids[1], "lost", 1);
  EXPECT_NE(code1, 0) << log1;
  EXPECT_TRUE(Has(log1, "tpxrun: the job's store has not answered for 5s")) << log1;
}

TEST(TpxrunMultiNode, MissingNodesAreNamed) {
  TPX_EMULATED_HOSTS_OR_SKIP(hosts, 1);
  const std::string log = LogPath("missing");
  auto pid = hosts->Spawn(
      0, Tpxrun(*hosts, 3, 0, {"--rdzv_timeout", "1", "--", Runfile("tools/tpxrun_test_prog")}),
      log, {kSecret});
  ASSERT_TRUE(pid.ok()) << pid.status();
  auto code = WaitForExit(*pid, absl::Seconds(60));
  const std::string out = ReadAll(log);
  ASSERT_TRUE(code.ok()) << code.status() << "\n" << out;
  EXPECT_EQ(*code, 1) << out;
  EXPECT_NE(out.find("tpxrun: node 0 of 3: node rank(s) 1, 2 of 3 never joined within 1s"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("[rank"), std::string::npos) << "no rank may start: " << out;
}

// Runs tpxrun with `args` on this host; its exit code and output.
std::pair<int, std::string> RunLocally(const std::string& args) {
  std::string cmd = absl::StrCat(Runfile("tools/tpxrun"), " ", args, " 2>&1");
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// Argument checks happen before any network use: no namespace needed.
TEST(TpxrunMultiNode, BadNodeRankIsRejected) {
  auto [code, out] = RunLocally("--nnodes 2 --node_rank 2 --nproc 1 --master_port 1 -- true");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--node_rank 2 must be below --nnodes 2"), std::string::npos) << out;
}

TEST(TpxrunMultiNode, SeveralNodesNeedASharedSecret) {
  ::unsetenv("TPX_STORE_SECRET");
  auto [code, out] = RunLocally("--nnodes 2 --node_rank 1 --nproc 1 --master_port 1 -- true");
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--nnodes 2 needs TPX_STORE_SECRET, the same on every node"),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace tpx::testing
