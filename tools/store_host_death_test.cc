// The torchrun / mpirun / Slurm layout, where rank 0 hosts the rendezvous
// store: when rank 0 dies, the other ranks must fail within seconds with an
// error that says so, not after one communication timeout per store access.
// The ranks are started directly (no tpxrun, which would stop them itself).
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/store/tcp_store.h"
#include "gtest/gtest.h"
#include "testing/test_files.h"

namespace {

using ::tpx::testing::Runfile;

struct Rank {
  pid_t pid = -1;
  int out = -1;
  std::string output;
  int status = 0;
  bool exited = false;
};

TEST(StoreHostDeath, SurvivorsFailFastWhenRankZeroWithTheStoreDies) {
  // A free port for rank 0's store (released again; a small race is accepted).
  int port;
  {
    auto probe = tpx::comm::TcpStoreServer::Listen("127.0.0.1", 0);
    ASSERT_TRUE(probe.ok());
    port = (*probe)->port();
  }
  const int world = 3;
  const std::string prog = Runfile("tools/tpxrun_test_prog");
  std::vector<Rank> ranks(world);
  for (int r = 0; r < world; ++r) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      ::dup2(fds[1], STDERR_FILENO);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port - 1).c_str(), 1);  // the store uses +1
      ::setenv("UCX_NET_DEVICES", "lo", 1);
      // Far longer than the test may run: survivors must not wait for it.
      ::setenv("TPX_COMM_TIMEOUT_MS", "600000", 1);
      ::execl(prog.c_str(), prog.c_str(), "die0", nullptr);
      ::_exit(127);
    }
    ::close(fds[1]);
    ranks[r].pid = pid;
    ranks[r].out = fds[0];
  }
  // Collect output until every rank exited; kill what is left after 120 s.
  const absl::Time give_up = absl::Now() + absl::Seconds(120);
  int running = world;
  while (running > 0 && absl::Now() < give_up) {
    std::vector<pollfd> fds;
    for (Rank& k : ranks) {
      if (k.out >= 0) fds.push_back({k.out, POLLIN, 0});
    }
    ::poll(fds.data(), fds.size(), 100);
    for (Rank& k : ranks) {
      if (k.out >= 0) {
        pollfd p{k.out, POLLIN, 0};
        if (::poll(&p, 1, 0) > 0) {
          char buf[4096];
          ssize_t n = ::read(k.out, buf, sizeof(buf));
          if (n > 0) {
            k.output.append(buf, n);
          } else {
            ::close(k.out);
            k.out = -1;
          }
        }
      }
      if (!k.exited && ::waitpid(k.pid, &k.status, WNOHANG) == k.pid) {
        k.exited = true;
        --running;
      }
    }
  }
  for (Rank& k : ranks) {
    if (!k.exited) {
      ::kill(k.pid, SIGKILL);
      ::waitpid(k.pid, &k.status, 0);
    }
    if (k.out >= 0) ::close(k.out);
  }
  ASSERT_TRUE(ranks[0].exited);
  EXPECT_TRUE(WIFSIGNALED(ranks[0].status) && WTERMSIG(ranks[0].status) == SIGKILL)
      << ranks[0].output;
  for (int r = 1; r < world; ++r) {
    const Rank& k = ranks[r];
    ASSERT_TRUE(k.exited) << "rank " << r << " still waiting 120 s after rank 0 died:\n"
                          << k.output;
    EXPECT_TRUE(WIFEXITED(k.status) && WEXITSTATUS(k.status) == 1) << k.output;
    EXPECT_NE(k.output.find("all_reduce failed"), std::string::npos) << k.output;
    EXPECT_NE(k.output.find("has exited"), std::string::npos) << k.output;
  }
}

}  // namespace
