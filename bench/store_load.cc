// Load test of the rendezvous store server (comm/store/tcp_store.h): --clients
// TcpStore clients each run --rounds of Set / Get / Wait-on-a-neighbour's-key
// while hostile local clients stream garbage, stream empty
// frames, and hold silent connections. The server runs in a forked process
// so its memory can be read from /proc. Prints one JSON line:
// set/get latency percentiles, request and error counts, what the hostile
// clients did, and the server's resident memory (start, peak, end).
//
//   bazel run -c opt //bench:store_load -- --clients=500 --rounds=200
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/store/tcp_store.h"

ABSL_FLAG(int, clients, 500, "Well-behaved store clients (one thread and connection each).");
ABSL_FLAG(int, rounds, 200, "Set/Get/Wait rounds per client.");
ABSL_FLAG(int, garbage_clients, 2, "Hostile clients streaming random bytes, reconnecting.");
ABSL_FLAG(int, silent_connections, 200, "Hostile connections that never send anything.");

namespace {

// Resident and peak-resident memory of `pid` in MiB (/proc/<pid>/status).
std::pair<double, double> RssMiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  double rss = 0, hwm = 0;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) rss = std::stod(line.substr(6)) / 1024;
    if (line.rfind("VmHWM:", 0) == 0) hwm = std::stod(line.substr(6)) / 1024;
  }
  return {rss, hwm};
}

int RawConnect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * v.size()));
  std::nth_element(v.begin(), v.begin() + i, v.end());
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int clients = absl::GetFlag(FLAGS_clients);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &rl);
  ::signal(SIGPIPE, SIG_IGN);

  const std::string secret = "load-test-secret";
  int port_pipe[2];
  if (::pipe(port_pipe) != 0) return 1;
  pid_t server_pid = ::fork();
  if (server_pid == 0) {
    tpx::comm::TcpStoreServerOptions options;
    options.secret = secret;
    options.max_connections = 4096;
    auto server = tpx::comm::TcpStoreServer::Listen("127.0.0.1", 0, options);
    if (!server.ok() || !(*server)->Start().ok()) ::_exit(1);
    int port = (*server)->port();
    (void)!::write(port_pipe[1], &port, sizeof(port));
    ::pause();  // until the parent kills it
    ::_exit(0);
  }
  int port = 0;
  if (::read(port_pipe[0], &port, sizeof(port)) != sizeof(port)) return 1;
  const auto rss_start = RssMiB(server_pid);

  std::atomic<bool> stop{false};
  std::atomic<int64_t> hostile_bytes{0}, hostile_connections{0}, errors{0}, waits{0};
  std::atomic<int> finished{0};
  std::vector<std::thread> hostile;
  for (int g = 0; g < absl::GetFlag(FLAGS_garbage_clients); ++g) {
    hostile.emplace_back([&, g] {
      std::mt19937_64 rng(g);
      std::string junk(64 << 10, '\0');
      while (!stop) {
        int fd = RawConnect(port);
        if (fd < 0) continue;
        ++hostile_connections;
        while (!stop) {
          for (char& c : junk) c = static_cast<char>(rng());
          ssize_t n = ::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
          if (n <= 0) break;
          hostile_bytes += n;
        }
        ::close(fd);
      }
    });
  }
  hostile.emplace_back([&] {  // empty frames, never authenticating
    const std::string zeros(64 << 10, '\0');
    while (!stop) {
      int fd = RawConnect(port);
      if (fd < 0) continue;
      ++hostile_connections;
      while (!stop) {
        ssize_t n = ::send(fd, zeros.data(), zeros.size(), MSG_NOSIGNAL);
        if (n <= 0) break;
        hostile_bytes += n;
      }
      ::close(fd);
    }
  });
  std::vector<int> silent;
  for (int i = 0; i < absl::GetFlag(FLAGS_silent_connections); ++i) {
    int fd = RawConnect(port);
    if (fd >= 0) silent.push_back(fd);
  }
  hostile_connections += silent.size();

  std::mutex mu;
  std::vector<double> set_ms, get_ms;
  std::vector<std::thread> workers;
  const absl::Time start = absl::Now();
  for (int c = 0; c < clients; ++c) {
    workers.emplace_back([&, c] {
      auto store = tpx::comm::TcpStore::Connect("127.0.0.1", port, absl::Seconds(60), secret);
      if (!store.ok()) {
        ++errors;
        ++finished;
        return;
      }
      std::vector<double> my_set, my_get;
      for (int64_t i = 0; i < rounds; ++i) {
        const std::string key = absl::StrCat("c", c, "/", i);
        absl::Time t0 = absl::Now();
        if (!(*store)->Set(key, std::string(64, 'v')).ok()) ++errors;
        absl::Time t1 = absl::Now();
        if (!(*store)->Get(key, absl::Seconds(10)).ok()) ++errors;
        absl::Time t2 = absl::Now();
        my_set.push_back(absl::ToDoubleMilliseconds(t1 - t0));
        my_get.push_back(absl::ToDoubleMilliseconds(t2 - t1));
        // Wait for the neighbour's key of the previous round (a ring: all advance together).
        if (i > 0) {
          const std::string theirs = absl::StrCat("c", (c + 1) % clients, "/", i - 1);
          if (!(*store)->Wait({theirs}, absl::Seconds(10)).ok()) ++errors;
          ++waits;
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      set_ms.insert(set_ms.end(), my_set.begin(), my_set.end());
      get_ms.insert(get_ms.end(), my_get.begin(), my_get.end());
      ++finished;
    });
  }
  // Sample the server's memory while the load runs.
  double rss_peak_sampled = 0;
  while (finished.load() < clients) {
    rss_peak_sampled = std::max(rss_peak_sampled, RssMiB(server_pid).first);
    absl::SleepFor(absl::Milliseconds(200));
  }
  for (std::thread& t : workers) t.join();
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  const auto rss_end = RssMiB(server_pid);
  stop = true;
  for (int fd : silent) ::shutdown(fd, SHUT_RDWR);
  for (std::thread& t : hostile) t.join();
  for (int fd : silent) ::close(fd);
  ::kill(server_pid, SIGKILL);
  ::waitpid(server_pid, nullptr, 0);

  const size_t requests = set_ms.size() + get_ms.size();
  std::printf(
      "{\"bench\":\"store_load\",\"clients\":%d,\"seconds\":%.1f,\"set_get_requests\":%zu,"
      "\"waits\":%lld,\"errors\":%lld,\"set_p50_ms\":%.3f,\"set_p99_ms\":%.3f,"
      "\"get_p50_ms\":%.3f,\"get_p99_ms\":%.3f,\"max_ms\":%.3f,\"hostile_connections\":%lld,"
      "\"hostile_mb_sent\":%.1f,\"server_rss_mib_start\":%.1f,\"server_rss_mib_max_sampled\":%.1f,"
      "\"server_rss_mib_end\":%.1f,\"server_rss_mib_hwm\":%.1f}\n",
      clients, elapsed, requests, static_cast<long long>(waits.load()),
      static_cast<long long>(errors.load()), Percentile(set_ms, 0.5), Percentile(set_ms, 0.99),
      Percentile(get_ms, 0.5), Percentile(get_ms, 0.99),
      std::max(set_ms.empty() ? 0 : *std::max_element(set_ms.begin(), set_ms.end()),
               get_ms.empty() ? 0 : *std::max_element(get_ms.begin(), get_ms.end())),
      static_cast<long long>(hostile_connections.load()), hostile_bytes.load() / 1e6,
      rss_start.first, rss_peak_sampled, rss_end.first, rss_end.second);
  return 0;
}
