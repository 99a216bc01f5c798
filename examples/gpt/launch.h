// Starts the ranks of a single-machine job from inside a program: forks
// `nproc` processes that each find their rank, the world size and a loopback
// rendezvous store in the environment (the variables comm::Init reads), so
// `train --nproc 2` needs no external launcher. Rank 0 hosts the store (with a
// random TPX_STORE_SECRET unless one is set). Each rank gets cores / nproc
// GEMM threads (TPX_NUM_THREADS, unless already set).
//
//   if (nproc > 1 && !LaunchedByLauncher()) return RunLocalRanks(nproc, [&] { return RankMain(); });
//
// Must be called before the program starts any thread (fork).
#ifndef TPX_EXAMPLES_GPT_LAUNCH_H_
#define TPX_EXAMPLES_GPT_LAUNCH_H_

#include <functional>

namespace tpx::gpt {

// True when a launcher (tpxrun, torchrun, mpirun, srun) already set a rank.
bool LaunchedByLauncher();

// Runs rank_main in nproc forked children and waits for them. When one fails
// (non-zero exit or a signal) the others are terminated. Returns 0 when all
// succeed, else the first failure's exit code (128 + signal for a signal).
int RunLocalRanks(int nproc, const std::function<int()>& rank_main);

}  // namespace tpx::gpt

#endif  // TPX_EXAMPLES_GPT_LAUNCH_H_
