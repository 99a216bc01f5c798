// A tpx program started by other launchers finds its rank, size and
// rendezvous store from their environment (comm/launch_env.h): Open MPI's
// mpirun on one emulated host, and a Slurm-like environment (SLURM_* set
// here as srun would) across two emulated hosts whose hostnames resolve.
// Fixed ports are safe: they live in namespaces this test just made.
// Skips where namespaces cannot be created or mpirun is not installed.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/emulated_hosts.h"
#include "testing/test_files.h"

namespace tpx::testing {
namespace {

std::string FindMpirun() {
  for (const char* dir : {"/usr/bin", "/usr/local/bin"}) {
    std::string path = absl::StrCat(dir, "/mpirun");
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

TEST(Launchers, MpirunTwoRanks) {
  const std::string mpirun = FindMpirun();
  if (mpirun.empty()) GTEST_SKIP() << "mpirun not installed (Debian openmpi-bin)";
  TPX_EMULATED_HOSTS_OR_SKIP(hosts, 1);
  const std::string log = LogPath("mpirun");
  // Open MPI gives ranks and sizes (OMPI_COMM_WORLD_*), not a rendezvous
  // address: that comes with -x. Rank 0 hosts the store.
  auto pid = hosts->Spawn(0,
                          {mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2",
                           "-x", "TPX_STORE_ADDR=127.0.0.1", "-x", "TPX_STORE_PORT=29600",
                           Runfile("tools/tpxrun_test_prog"), "allreduce"},
                          log, {"OMPI_MCA_plm_rsh_agent=false"});
  ASSERT_TRUE(pid.ok()) << pid.status();
  auto code = WaitForExit(*pid, absl::Seconds(90));
  const std::string out = ReadAll(log);
  ASSERT_TRUE(code.ok()) << code.status() << "\n" << out;
  EXPECT_EQ(*code, 0) << out;
  // Both ranks print the all-reduce of rank + 1 over 2 ranks.
  const size_t first = out.find("sum=3\n");
  ASSERT_NE(first, std::string::npos) << out;
  EXPECT_NE(out.find("sum=3\n", first + 1), std::string::npos) << out;
}

TEST(Launchers, SlurmLikeAcrossTwoHosts) {
  TPX_EMULATED_HOSTS_OR_SKIP(hosts, 2);
  std::vector<pid_t> pids;
  for (int h = 0; h < 2; ++h) {
    // What srun sets for task h of a 2-node, 1-task-per-node step; no
    // MASTER_ADDR: the store goes to the first node of the node list.
    std::vector<std::string> env = {
        absl::StrCat("SLURM_PROCID=", h), "SLURM_NTASKS=2", "SLURM_LOCALID=0",
        "SLURM_NTASKS_PER_NODE=1(x2)", "SLURM_JOB_ID=4242",
        absl::StrCat("SLURM_STEP_NODELIST=", hosts->hostname(0).substr(0, 7), "[0-1]")};
    auto pid = hosts->Spawn(h, {Runfile("tools/tpxrun_test_prog"), "allreduce"},
                            LogPath(absl::StrCat("slurm_", h)), env);
    ASSERT_TRUE(pid.ok()) << pid.status();
    pids.push_back(*pid);
  }
  for (int h = 0; h < 2; ++h) {
    auto code = WaitForExit(pids[h], absl::Seconds(60));
    const std::string out = ReadAll(LogPath(absl::StrCat("slurm_", h)));
    ASSERT_TRUE(code.ok()) << code.status() << "\n" << out;
    EXPECT_EQ(*code, 0) << out;
    EXPECT_NE(out.find("sum=3\n"), std::string::npos) << out;
  }
}

}  // namespace
}  // namespace tpx::testing
