// A single-machine job started from inside a program: `train --nproc 2`
// forks its ranks itself, each with the environment comm::Init reads and a
// loopback store this process hosts, so it needs no external launcher.
//
//   int main(int argc, char** argv) {
//     absl::ParseCommandLine(argc, argv);
//     return tpx::launch::RunRanks(absl::GetFlag(FLAGS_nproc), [] { return RankMain(); });
//   }
//
// Forks: call while this process has a single thread. Each rank gets
// cores / nproc GEMM threads (TPX_NUM_THREADS) and UCX on loopback
// (UCX_NET_DEVICES=lo) unless those are set; the store admits only the
// job's secret (TPX_STORE_SECRET, or a random one).
#ifndef TPX_LAUNCH_LOCAL_JOB_H_
#define TPX_LAUNCH_LOCAL_JOB_H_

#include <functional>

namespace tpx::launch {

// Runs rank_main in nproc forked ranks and waits for them. When one fails
// (non-zero exit or a signal) the others are stopped. Returns 0 when all
// succeed, else the first failure's exit code (128 + signal for a signal).
int RunLocalRanks(int nproc, const std::function<int()>& rank_main);

// rank_main() as this process's rank when a launcher (tpxrun, torchrun,
// mpirun, srun) started it, else RunLocalRanks(max(nproc, 1), rank_main).
int RunRanks(int nproc, const std::function<int()>& rank_main);

}  // namespace tpx::launch

#endif  // TPX_LAUNCH_LOCAL_JOB_H_
