#include "examples/gpt/launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "comm/tcp_store.h"

namespace tpx::gpt {
namespace {

// A loopback port that is free right now (the kernel picks it).
int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace

bool LaunchedByLauncher() {
  for (const char* v : {"TPX_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

int RunLocalRanks(int nproc, const std::function<int()>& rank_main) {
  const int port = FreeLoopbackPort();
  if (port <= 0) {
    std::fprintf(stderr, "RunLocalRanks: no free loopback port for the rendezvous store\n");
    return 1;
  }
  // Only this job's ranks may use its store (unless the user chose a secret).
  absl::StatusOr<std::string> secret = comm::NewStoreSecret();
  if (!secret.ok()) {
    std::fprintf(stderr, "RunLocalRanks: %s\n", std::string(secret.status().message()).c_str());
    return 1;
  }
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const int threads_per_rank = std::max(1, cores / nproc);
  std::fflush(nullptr);
  std::vector<pid_t> children;
  for (int r = 0; r < nproc; ++r) {
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("RunLocalRanks: fork");
      for (pid_t c : children) kill(c, SIGTERM);
      return 1;
    }
    if (pid == 0) {
      setenv("TPX_RANK", std::to_string(r).c_str(), 1);
      setenv("TPX_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("TPX_LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("TPX_LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("TPX_STORE_ADDR", "127.0.0.1", 1);
      setenv("TPX_STORE_PORT", std::to_string(port).c_str(), 1);
      setenv("TPX_STORE_SECRET", secret->c_str(), 0);
      setenv("UCX_NET_DEVICES", "lo", 0);  // loopback only; keep a user's choice
      // Share the cores between the ranks: oversubscribed GEMM thread teams
      // spin against each other and run several times slower.
      setenv("TPX_NUM_THREADS", std::to_string(threads_per_rank).c_str(), 0);
      const int code = rank_main();
      std::fflush(nullptr);
      _exit(code);
    }
    children.push_back(pid);
  }
  int first_failure = 0;
  for (size_t left = children.size(); left > 0; --left) {
    int status = 0;
    pid_t pid = wait(&status);
    if (pid < 0) break;
    int code = WIFEXITED(status) ? WEXITSTATUS(status)
                                 : (WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1);
    if (code != 0 && first_failure == 0) {
      first_failure = code;
      for (pid_t c : children) {
        if (c != pid) kill(c, SIGTERM);
      }
    }
  }
  return first_failure;
}

}  // namespace tpx::gpt
