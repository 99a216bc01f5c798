// Test program run under tpxrun by tpxrun_test:
//   env       print the rank layout this process sees
//   fail R    rank R exits with code 3 at once; the others sleep long
//   kill R    rank R dies of SIGKILL at once; the others sleep long
//   wait_file P  node 0's ranks (rank < local world size) wait, at most
//             60 s, for file P to exist and exit 0; the others exit 0 at once
//   sleep     every rank prints "pid=<pid>" and sleeps long (signals, orphans)
//   secret    print the store secret this rank was given
//   die0      all-reduce once, then rank 0 dies (SIGKILL) and the others keep
//             all-reducing until an error, which they print
//   allreduce comm::Init() and an all-reduce of the ranks (needs the plugin)
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "comm/init.h"
#include "comm/launch_env.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "env";
  auto env = tpx::comm::ReadLaunchEnv();
  if (!env.ok()) {
    std::fprintf(stderr, "%s\n", std::string(env.status().message()).c_str());
    return 1;
  }
  if (mode == "env") {
    std::printf("rank=%d size=%d local=%d launcher=%s port_set=%d\nsecond line\n", env->rank,
                env->world_size, env->local_rank, env->launcher.c_str(), env->store_port > 0);
    std::fprintf(stderr, "to stderr");  // no trailing newline
    return 0;
  }
  if (mode == "fail") {
    if (env->rank == std::atoi(argv[2])) return 3;
    ::sleep(120);
    return 0;
  }
  if (mode == "kill") {
    if (env->rank == std::atoi(argv[2])) ::raise(SIGKILL);
    ::sleep(120);
    return 0;
  }
  if (mode == "wait_file") {
    if (env->rank >= env->local_world_size) return 0;
    for (int i = 0; i < 6000 && ::access(argv[2], F_OK) != 0; ++i) ::usleep(10000);
    return ::access(argv[2], F_OK) == 0 ? 0 : 4;
  }
  if (mode == "sleep") {
    std::printf("pid=%d\n", static_cast<int>(::getpid()));
    std::fflush(stdout);
    ::sleep(120);
    return 0;
  }
  if (mode == "secret") {
    std::printf("secret=%s\n", env->store_secret.c_str());
    return 0;
  }
  if (mode == "die0") {
    auto world = tpx::comm::Init();
    if (!world.ok()) {
      std::fprintf(stderr, "init failed: %s\n", std::string(world.status().message()).c_str());
      return 1;
    }
    for (int step = 0; step < 100000; ++step) {
      if (step == 1 && (*world)->rank() == 0) ::raise(SIGKILL);
      int32_t x = 1;
      absl::Status s =
          (*world)->AllReduce(&x, 1, tpx::DType::kI32, tpx::comm::ReduceOp::kSum).Wait();
      if (!s.ok()) {
        std::printf("all_reduce failed: %s\n", std::string(s.message()).c_str());
        return 1;
      }
    }
    return 0;
  }
  if (mode == "allreduce") {
    auto world = tpx::comm::Init();
    if (!world.ok()) {
      std::fprintf(stderr, "init failed: %s\n", std::string(world.status().message()).c_str());
      return 1;
    }
    int32_t x = (*world)->rank() + 1;
    absl::Status s =
        (*world)->AllReduce(&x, 1, tpx::DType::kI32, tpx::comm::ReduceOp::kSum).Wait();
    if (!s.ok()) {
      std::fprintf(stderr, "all_reduce failed: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    std::printf("sum=%d\n", x);
    return 0;
  }
  return 2;
}
