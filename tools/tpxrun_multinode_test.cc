// tpxrun across two emulated hosts (testing/emulated_hosts.h): one tpxrun
// per host with torchrun's multi-node options, and a node that never comes.
// The store port is fixed: it lives inside namespaces this test just made,
// where nothing else listens. Skips where namespaces cannot be created.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/emulated_hosts.h"

namespace tpx::testing {
namespace {

std::string Runfile(const std::string& path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/tpx/", path);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string LogPath(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name, ".log");
}

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

TEST(TpxrunMultiNode, TwoNodesRunOneJob) {
  TPX_EMULATED_HOSTS_OR_SKIP(hosts, 2);
  const std::string prog = Runfile("tools/tpxrun_test_prog");
  std::vector<pid_t> pids;
  for (int node = 0; node < 2; ++node) {
    const std::string log = LogPath(absl::StrCat("two_nodes_", node));
    auto pid = hosts->Spawn(node, Tpxrun(*hosts, 2, node, {"--", prog, "allreduce"}), log,
                            {kSecret});
    ASSERT_TRUE(pid.ok()) << pid.status();
    pids.push_back(*pid);
  }
  for (int node = 0; node < 2; ++node) {
    auto code = WaitForExit(pids[node], absl::Seconds(60));
    const std::string log = ReadAll(LogPath(absl::StrCat("two_nodes_", node)));
    ASSERT_TRUE(code.ok()) << code.status() << "\n" << log;
    EXPECT_EQ(*code, 0) << log;
    // Node k runs global ranks 2k and 2k+1; all four take part: 1+2+3+4.
    for (int r = 2 * node; r < 2 * node + 2; ++r) {
      EXPECT_NE(log.find(absl::StrCat("[rank ", r, "] sum=10")), std::string::npos) << log;
    }
  }
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
