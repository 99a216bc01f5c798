#include "launch/local_job.h"

#include <errno.h>  // program_invocation_short_name

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "comm/launch_env.h"
#include "launch/job_store.h"
#include "launch/rank_processes.h"

namespace tpx::launch {

int RunLocalRanks(int nproc, const std::function<int()>& rank_main) {
  const std::string me = absl::StrCat(program_invocation_short_name, ": ");
  absl::StatusOr<std::string> secret = JobStoreSecret();
  absl::StatusOr<std::unique_ptr<comm::TcpStoreServer>> server =
      secret.ok() ? ListenForJob("127.0.0.1", 0, *secret) : secret.status();
  if (!server.ok()) {
    std::fprintf(stderr, "%s%s\n", me.c_str(), server.status().ToString().c_str());
    return 1;
  }
  comm::LaunchEnv place;
  place.world_size = place.local_world_size = nproc;
  place.store_host = "127.0.0.1";
  place.store_port = (*server)->port();
  place.store_hosted_by_launcher = true;
  place.store_secret = *secret;
  // Share the cores between the ranks: oversubscribed GEMM thread teams
  // spin against each other and run several times slower.
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const std::string threads = absl::StrCat(std::max(1, cores / nproc));
  RankProcesses ranks;
  for (int r = 0; r < nproc; ++r) {
    place.rank = place.local_rank = r;
    RankEnv env = RankEnv::For(place);
    env.defaults = {{"UCX_NET_DEVICES", "lo"}, {"TPX_NUM_THREADS", threads}};
    absl::Status started = ranks.Fork(r, [&](int) { return rank_main(); }, env);
    if (!started.ok()) {
      std::fprintf(stderr, "%s%s\n", me.c_str(), started.ToString().c_str());
      return 1;
    }
  }
  // Only now may this process start a thread (the store's).
  if (absl::Status s = (*server)->Start(); !s.ok()) {
    std::fprintf(stderr, "%s%s\n", me.c_str(), s.ToString().c_str());
    return 1;
  }
  SuperviseOptions options;
  options.log_prefix = me;
  return ranks.Supervise(options).exit_code();
}

int RunRanks(int nproc, const std::function<int()>& rank_main) {
  if (comm::StartedByLauncher()) return rank_main();
  return RunLocalRanks(std::max(nproc, 1), rank_main);
}

}  // namespace tpx::launch
