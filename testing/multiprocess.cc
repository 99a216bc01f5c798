#include "testing/multiprocess.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "comm/plugin_host/plugin_communicator.h"
#include "comm/plugin_host/plugin_loader.h"
#include "comm/store/tcp_store.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"
#include "launch/rank_processes.h"

namespace tpx::testing {

void RankContext::KillPoint(absl::string_view point) const {
  if (rank == options.kill_rank && point == options.kill_point) {
    std::fflush(stdout);
    std::fflush(stderr);
    ::raise(SIGKILL);
  }
}

namespace {

void WriteAll(int fd, const std::string& data) {
  for (size_t off = 0; off < data.size();) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += n;
  }
}

// The rank's gtest failures, '\0'-separated.
std::string FormatFailures(const ::testing::TestPartResultArray& results) {
  std::string out;
  for (int i = 0; i < results.size(); ++i) {
    const ::testing::TestPartResult& part = results.GetTestPartResult(i);
    if (!part.failed()) continue;
    absl::StrAppend(&out, part.file_name() ? part.file_name() : "?", ":", part.line_number(),
                    ": ", part.message(), std::string(1, '\0'));
  }
  return out;
}

// Runs in the forked rank (launch::RankProcesses: it dies with the harness,
// which hosts its store); never returns.
[[noreturn]] void RunRank(int rank, int size, int port, int result_fd,
                          const std::function<void(RankContext&)>& body,
                          const RunOptions& options) {
  auto fail = [&](const std::string& message) {
    WriteAll(result_fd, message + std::string(1, '\0'));
    ::_exit(1);
  };
  if (options.enter_rank_host) {
    absl::Status entered = options.enter_rank_host(rank);
    if (!entered.ok()) fail("entering the rank's host: " + entered.ToString());
  }
  auto store = comm::TcpStore::Connect(options.store_addr, port, absl::Seconds(30));
  if (!store.ok()) fail(std::string(store.status().message()));
  std::shared_ptr<comm::Store> shared_store = std::move(*store);
  // Test ranks talk over loopback only; UCX would otherwise open every interface.
  ::setenv("UCX_NET_DEVICES", "lo", /*overwrite=*/0);
  // Ranks on one host talk through UCX's sysv shared memory and cma, which
  // UCX prefers to its posix shared memory; leaving posix out spares each
  // rank zero-filling a posix segment of a few MiB it would never use.
  ::setenv("UCX_TLS", "^posix", /*overwrite=*/0);
  auto plugin = comm::LoadPlugin(options.backend);
  if (!plugin.ok()) fail(std::string(plugin.status().ToString()));
  comm::CommOptions comm_options;
  comm_options.rank = rank;
  comm_options.size = size;
  comm_options.timeout = options.comm_timeout;
  comm_options.debug_checks = options.debug_checks;
  // Device backends: one GPU per rank (all ranks run on this host), so the
  // rank's CUDA tensors go on Device::CUDA(rank).
  if ((*plugin)->api().stream_wait != nullptr) comm_options.device = rank;
  auto comm = comm::PluginCommunicator::Create(*plugin, comm_options, shared_store);
  if (!comm.ok()) fail(std::string(comm.status().ToString()));
  ::testing::TestPartResultArray results;
  {
    // Captures every failure of this rank, even inside the parent's
    // EXPECT_NONFATAL_FAILURE (which would otherwise swallow them here).
    // Both scopes: a per-thread reporter set by the parent takes precedence
    // over the global one on this thread.
    ::testing::ScopedFakeTestPartResultReporter all_threads(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ALL_THREADS, &results);
    ::testing::ScopedFakeTestPartResultReporter this_thread(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    RankContext ctx{rank, size, **comm, *shared_store, options};
    body(ctx);
  }
  std::string failures = FormatFailures(results);
  WriteAll(result_fd, failures);
  // Leave together: a rank's last messages may still be in flight to a
  // peer. Skip the orderly teardown when a peer is gone (failure tests).
  // The last rank to arrive says so; the others wait for that in the store.
  const std::string all_arrived = "tpx_harness/all_done";
  bool all_done = false;
  if (absl::StatusOr<int64_t> arrived = shared_store->Add("tpx_harness/done", 1); arrived.ok()) {
    all_done = (*arrived < size || shared_store->Set(all_arrived, "1").ok()) &&
               shared_store->Wait({all_arrived}, options.comm_timeout).ok();
  }
  if (all_done) comm->reset();
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(failures.empty() ? 0 : 1);
}

// Listens on addr:0, inside the network namespace at `netns` if given (the
// socket stays there; this thread returns to its own namespace).
absl::StatusOr<std::unique_ptr<comm::TcpStoreServer>> ListenInNetns(const std::string& addr,
                                                                    const std::string& netns) {
  if (netns.empty()) return comm::TcpStoreServer::Listen(addr, 0);
  int own = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  int target = ::open(netns.c_str(), O_RDONLY | O_CLOEXEC);
  if (own < 0 || target < 0 || ::setns(target, CLONE_NEWNET) != 0) {
    const std::string why = std::strerror(errno);
    if (own >= 0) ::close(own);
    if (target >= 0) ::close(target);
    return absl::UnavailableError("entering network namespace " + netns + ": " + why);
  }
  auto server = comm::TcpStoreServer::Listen(addr, 0);
  const bool back = ::setns(own, CLONE_NEWNET) == 0;
  ::close(own);
  ::close(target);
  if (!back) return absl::InternalError("cannot return to this process's network namespace");
  return server;
}

// Loads the UCX plugin's library (and the UCX libraries it links) into this
// process without running its entry point, so that ranks forked later find
// it loaded instead of loading and relocating it each (a good part of a
// rank's start). Loading UCX starts no thread; its context is made by each
// rank. Other backends' libraries (CUDA) are left to the ranks. Best effort:
// a plugin that cannot be loaded is reported by the ranks as before.
void PreloadPlugin(const std::string& backend) {
  static bool preloaded = false;
  if (backend != "ucx" || preloaded) return;
  preloaded = true;
  // Read when UCX is loaded: its InfiniBand and RDMA-CM transport modules
  // serve no loopback device.
  ::setenv("UCX_MODULES", "^ib,rdmacm", /*overwrite=*/0);
  for (const std::string& path : comm::PluginSearchPaths(backend)) {
    if (::access(path.c_str(), F_OK) != 0) continue;
    ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    return;
  }
}

}  // namespace

std::vector<RankOutcome> RunOnRanks(int world_size, const std::function<void(RankContext&)>& body,
                                    const RunOptions& given_options) {
  RunOptions options = given_options;
  if (const char* backend = std::getenv("TPX_TEST_COMM_BACKEND")) options.backend = backend;
  std::vector<RankOutcome> outcomes(world_size);
  auto server = ListenInNetns(options.store_addr, options.store_netns);
  if (!server.ok()) {
    ADD_FAILURE() << "cannot host the test store: " << server.status();
    return outcomes;
  }
  PreloadPlugin(options.backend);
  launch::RankProcesses ranks;
  for (int r = 0; r < world_size; ++r) {
    absl::Status forked = ranks.Fork(r, [&, r](int result_fd) -> int {
      RunRank(r, world_size, (*server)->port(), result_fd, body, options);
    });
    if (!forked.ok()) {
      ADD_FAILURE() << forked;
      break;
    }
  }
  // Only now may this process start threads (the store server).
  if (!(*server)->Start().ok()) ADD_FAILURE() << "cannot start the test store";

  // Every rank runs to its end (failure tests watch the survivors).
  launch::SuperviseOptions supervise;
  supervise.stop_on_failure = false;
  supervise.deadline = options.deadline;
  for (const launch::RankExit& exit : ranks.Supervise(supervise).ranks) {
    RankOutcome& o = outcomes[exit.rank];
    o.exit_code = exit.exit_code;
    o.timed_out = exit.timed_out;
    o.signal = exit.timed_out ? 0 : exit.signal;  // the deadline's SIGKILL is not the rank's
    for (absl::string_view f : absl::StrSplit(exit.report, '\0', absl::SkipEmpty())) {
      o.failures.emplace_back(f);
    }
  }
  for (int r = 0; r < world_size; ++r) {
    const RankOutcome& o = outcomes[r];
    const bool expected_death = r == options.kill_rank && o.signal == SIGKILL;
    for (const std::string& f : o.failures) ADD_FAILURE() << "rank " << r << ": " << f;
    if (o.timed_out) {
      ADD_FAILURE() << "rank " << r << ": still running after the deadline of "
                    << absl::FormatDuration(options.deadline) << "; killed";
    } else if (o.signal != 0 && !expected_death) {
      ADD_FAILURE() << "rank " << r << ": killed by signal " << o.signal << " ("
                    << strsignal(o.signal) << ")";
    } else if (o.exit_code > 0 && o.failures.empty()) {
      ADD_FAILURE() << "rank " << r << ": exited with code " << o.exit_code;
    }
    if (r == options.kill_rank && !expected_death && !o.timed_out) {
      ADD_FAILURE() << "rank " << r << " was to be killed at '" << options.kill_point
                    << "' but never reached it";
    }
  }
  return outcomes;
}

}  // namespace tpx::testing
