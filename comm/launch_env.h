// Reads a process's place in a job (rank, world size, local rank, where the
// rendezvous store is) from the environment its launcher set.
//
//   TPX_ASSIGN_OR_RETURN(LaunchEnv env, ReadLaunchEnv());
//   // env.rank, env.world_size, env.store_host:env.store_port, env.launcher
//
// Launchers understood, first match wins:
//   tpx (tpxrun):  TPX_RANK, TPX_WORLD_SIZE, TPX_LOCAL_RANK, TPX_LOCAL_WORLD_SIZE
//   torchrun-style: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
//   Open MPI:      OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   Slurm (srun):  SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
//   none:          a single process (rank 0 of 1)
// Store: TPX_STORE_ADDR / TPX_STORE_PORT, else MASTER_ADDR and MASTER_PORT + 1
// (torchrun's own store already listens on MASTER_PORT itself).
// Under Slurm without those: the first host of SLURM_STEP_NODELIST (or
// SLURM_JOB_NODELIST, SLURM_NODELIST) and port 10000 + SLURM_JOB_ID % 20000.
// Under Open MPI, pass them with `mpirun -x TPX_STORE_ADDR=... -x TPX_STORE_PORT=...`.
// TPX_STORE_HOSTED=1 says the launcher hosts the store (rank 0 then only
// connects). TPX_STORE_SECRET is the job's store secret (tpxrun generates
// one; every rank and the store host must see the same). Errors name the
// variable and its value.
//
// Launchers write the same names with LaunchEnvVariables (launch/ builds
// every tpx launcher on it), so reader and writers cannot drift apart:
//
//   for (const auto& [name, value] : LaunchEnvVariables(place)) setenv(...);
#ifndef TPX_COMM_LAUNCH_ENV_H_
#define TPX_COMM_LAUNCH_ENV_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tpx::comm {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string store_host = "127.0.0.1";
  int store_port = 0;  // 0: not given (only valid for a single process)
  bool store_hosted_by_launcher = false;
  std::string store_secret;  // "" : the store admits any client
  std::string launcher = "none";  // "tpx", "torchrun", "openmpi", "slurm", "none"
};

// Returns the value of an environment variable or nullptr.
using EnvLookup = std::function<const char*(const char*)>;

absl::StatusOr<LaunchEnv> ReadLaunchEnv(const EnvLookup& env);
absl::StatusOr<LaunchEnv> ReadLaunchEnv();  // from the process environment

// The variables that make ReadLaunchEnv read `env` back (launcher "tpx"):
// tpx's own names, the store's, and torchrun's names for programs that read
// those (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT). TPX_STORE_SECRET only when env.store_secret is set.
std::vector<std::pair<std::string, std::string>> LaunchEnvVariables(const LaunchEnv& env);

// Whether a launcher (tpxrun, torchrun, mpirun, srun) gave this process a
// rank, i.e. whether a rank variable of any launcher above is set.
bool StartedByLauncher(const EnvLookup& env);
bool StartedByLauncher();  // from the process environment

}  // namespace tpx::comm

#endif  // TPX_COMM_LAUNCH_ENV_H_
