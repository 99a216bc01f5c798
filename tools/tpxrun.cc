// tpxrun: starts N local ranks of a program with the environment comm::Init
// reads, hosts their rendezvous store, prefixes every output line with
// "[rank r] ", stops everything on the first failure and forwards
// SIGINT/SIGTERM.
//
//   tpxrun --nproc 4 [--master_port 29500] [--master_addr 127.0.0.1]
//          [--store_on_rank0] -- ./my_trainer --tpx_comm_backend=ucx
//
// Several nodes (torchrun's options): one tpxrun per node, the same
// --nnodes/--nproc/--master_addr/--master_port everywhere and a distinct
// --node_rank. Node 0 hosts the store on master_addr:master_port (the
// address given, not every interface); node k's local rank r is global rank
// k * nproc + r; every node needs the same TPX_STORE_SECRET in its
// environment. Ranks start only once every node arrived; a node missing
// after --rdzv_timeout seconds (default 300) is an error naming the missing
// node ranks. Node 0 keeps the store up until every node's ranks finished.
//
//   host-a$ tpxrun --nnodes 2 --node_rank 0 --nproc 4 --master_addr 10.0.0.1
//                  --master_port 29500 -- ./my_trainer
//   host-b$ tpxrun --nnodes 2 --node_rank 1 --nproc 4 --master_addr 10.0.0.1
//                  --master_port 29500 -- ./my_trainer
//
// Exit status: 0 when every rank exits 0; otherwise that of the first rank
// to fail (128 + signal number for a rank killed by a signal).
//
// Each rank runs in its own process group (signals reach its children too)
// and dies with tpxrun, even when tpxrun is killed with SIGKILL (parent-death
// signal). The store admits only the job's ranks: tpxrun passes them a
// random TPX_STORE_SECRET (or the one in its own environment).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "comm/tcp_store.h"

extern char** environ;

namespace {

struct Args {
  int nproc = 0;
  int master_port = 0;
  std::string master_addr = "127.0.0.1";
  bool store_on_rank0 = false;
  int nnodes = 1;
  int node_rank = 0;
  int rdzv_timeout_s = 300;
  std::vector<std::string> command;
};

void Usage() {
  std::fprintf(stderr,
               "usage: tpxrun --nproc N [--master_port P] [--master_addr HOST] "
               "[--store_on_rank0] [--nnodes N --node_rank K --master_port P "
               "[--rdzv_timeout S]] -- program [args...]\n");
}

bool ParseArgs(int argc, char** argv, Args* args) {
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    auto value = [&](const std::string& name, std::string* out) {
      if (a == name && i + 1 < argc) {
        *out = argv[++i];
        return true;
      }
      if (a.rfind(name + "=", 0) == 0) {
        *out = a.substr(name.size() + 1);
        return true;
      }
      return false;
    };
    std::string v;
    if (value("--nproc", &v) || value("--nproc_per_node", &v)) {
      if (!absl::SimpleAtoi(v, &args->nproc) || args->nproc < 1) {
        std::fprintf(stderr, "tpxrun: --nproc must be a positive integer, got '%s'\n", v.c_str());
        return false;
      }
    } else if (value("--master_port", &v)) {
      if (!absl::SimpleAtoi(v, &args->master_port) || args->master_port < 0 ||
          args->master_port > 65535) {
        std::fprintf(stderr, "tpxrun: --master_port must be in [0, 65535], got '%s'\n",
                     v.c_str());
        return false;
      }
    } else if (value("--master_addr", &v)) {
      args->master_addr = v;
    } else if (value("--nnodes", &v)) {
      if (!absl::SimpleAtoi(v, &args->nnodes) || args->nnodes < 1) {
        std::fprintf(stderr, "tpxrun: --nnodes must be a positive integer, got '%s'\n", v.c_str());
        return false;
      }
    } else if (value("--node_rank", &v)) {
      if (!absl::SimpleAtoi(v, &args->node_rank) || args->node_rank < 0) {
        std::fprintf(stderr, "tpxrun: --node_rank must be a non-negative integer, got '%s'\n",
                     v.c_str());
        return false;
      }
    } else if (value("--rdzv_timeout", &v)) {
      if (!absl::SimpleAtoi(v, &args->rdzv_timeout_s) || args->rdzv_timeout_s < 1) {
        std::fprintf(stderr, "tpxrun: --rdzv_timeout must be a positive number of seconds, got '%s'\n",
                     v.c_str());
        return false;
      }
    } else if (a == "--store_on_rank0") {
      args->store_on_rank0 = true;
    } else if (a == "-h" || a == "--help") {
      return false;
    } else {
      std::fprintf(stderr, "tpxrun: unknown option '%s'\n", a.c_str());
      return false;
    }
  }
  for (; i < argc; ++i) args->command.push_back(argv[i]);
  if (args->nproc < 1 || args->command.empty()) {
    std::fprintf(stderr, "tpxrun: need --nproc and a program after --\n");
    return false;
  }
  if (args->node_rank >= args->nnodes) {
    std::fprintf(stderr, "tpxrun: --node_rank %d must be below --nnodes %d\n", args->node_rank,
                 args->nnodes);
    return false;
  }
  if (args->nnodes > 1 && (args->master_port == 0 || args->store_on_rank0)) {
    std::fprintf(stderr, "tpxrun: --nnodes %d needs --master_port (every node must know it) and "
                 "does not support --store_on_rank0\n", args->nnodes);
    return false;
  }
  return true;
}

// Self-pipe: the signal handler only writes the signal number.
int g_signal_pipe[2] = {-1, -1};
void OnSignal(int sig) {
  unsigned char s = static_cast<unsigned char>(sig);
  (void)!::write(g_signal_pipe[1], &s, 1);
}

// A rank's output stream: bytes in, prefixed complete lines out.
struct Stream {
  int fd = -1;
  int rank = 0;
  FILE* out = nullptr;
  std::string partial;

  void Emit(const char* data, size_t n) {
    partial.append(data, n);
    size_t start = 0, nl;
    while ((nl = partial.find('\n', start)) != std::string::npos) {
      std::fprintf(out, "[rank %d] %.*s\n", rank, static_cast<int>(nl - start),
                   partial.data() + start);
      start = nl + 1;
    }
    partial.erase(0, start);
    std::fflush(out);
  }
  void Flush() {
    if (!partial.empty()) {
      std::fprintf(out, "[rank %d] %s\n", rank, partial.c_str());
      partial.clear();
      std::fflush(out);
    }
  }
};

// Picks a free port for a store rank 0 will host (a small race is accepted:
// the port could be taken between now and rank 0's bind).
int FreePort(const std::string& host) {
  auto server = tpx::comm::TcpStoreServer::Listen(host, 0);
  return server.ok() ? (*server)->port() : 0;
}

// Store keys of the node rendezvous.
std::string NodeKey(int node) { return absl::StrCat("tpxrun/node/", node); }
constexpr const char* kFinishedKey = "tpxrun/nodes_finished";

// Announces this node and waits until all `nnodes` did; the error names the
// node ranks still missing after `timeout`.
absl::Status JoinNodes(tpx::comm::Store& store, int nnodes, int node_rank, absl::Duration timeout) {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  absl::Status s = store.Set(NodeKey(node_rank), host);
  if (!s.ok()) return s;
  std::vector<std::string> keys;
  for (int k = 0; k < nnodes; ++k) keys.push_back(NodeKey(k));
  s = store.Wait(keys, timeout);
  if (s.ok() || s.code() != absl::StatusCode::kDeadlineExceeded) return s;
  std::vector<int> missing;
  for (int k = 0; k < nnodes; ++k) {
    auto there = store.Check(NodeKey(k));
    if (!there.ok()) return there.status();
    if (!*there) missing.push_back(k);
  }
  return absl::DeadlineExceededError(
      absl::StrCat("node rank(s) ", absl::StrJoin(missing, ", "), " of ", nnodes,
                   " never joined within ", absl::FormatDuration(timeout),
                   " (is tpxrun running there with the same --master_addr/--master_port?)"));
}

// Multi-node: says this node's ranks finished; node 0 (the store host) then
// waits, bounded, for the other nodes so that their ranks keep the store.
void LeaveNodes(tpx::comm::Store& store, int nnodes, int node_rank) {
  if (!store.Add(kFinishedKey, 1).ok() || node_rank != 0) return;
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (absl::Now() < give_up) {
    auto n = store.Add(kFinishedKey, 0);
    if (!n.ok() || *n >= nnodes) return;
    absl::SleepFor(absl::Milliseconds(50));
  }
  std::fprintf(stderr, "tpxrun: not every node finished within 60s; closing the store\n");
}

// The job's store secret: TPX_STORE_SECRET if set, else a random one.
std::string JobSecret() {
  if (const char* s = std::getenv("TPX_STORE_SECRET"); s != nullptr && s[0] != '\0') return s;
  absl::StatusOr<std::string> secret = tpx::comm::NewStoreSecret();
  if (!secret.ok()) {
    std::fprintf(stderr, "tpxrun: %s\n", std::string(secret.status().message()).c_str());
    std::exit(1);
  }
  return *secret;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) {
    Usage();
    return 2;
  }

  if (args.nnodes > 1 && std::getenv("TPX_STORE_SECRET") == nullptr) {
    // A secret made up here would differ on every node.
    std::fprintf(stderr, "tpxrun: --nnodes %d needs TPX_STORE_SECRET, the same on every node "
                 "(e.g. from `openssl rand -hex 16`)\n", args.nnodes);
    return 2;
  }
  const std::string secret = JobSecret();
  std::unique_ptr<tpx::comm::TcpStoreServer> server;
  int port = args.master_port;
  if (args.store_on_rank0) {
    if (port == 0) port = FreePort(args.master_addr);
  } else if (args.node_rank == 0) {  // other nodes use node 0's store
    tpx::comm::TcpStoreServerOptions store_options;
    store_options.secret = secret;
    auto listening = tpx::comm::TcpStoreServer::Listen(args.master_addr, port, store_options);
    if (!listening.ok()) {
      std::fprintf(stderr, "tpxrun: %s\n", std::string(listening.status().message()).c_str());
      return 1;
    }
    server = std::move(*listening);
    port = server->port();
    if (!server->Start().ok()) return 1;
  }

  std::unique_ptr<tpx::comm::TcpStore> node_store;
  if (args.nnodes > 1) {
    const absl::Duration timeout = absl::Seconds(args.rdzv_timeout_s);
    auto connected = tpx::comm::TcpStore::Connect(args.master_addr, port, timeout, secret);
    absl::Status joined = connected.ok() ? JoinNodes(**connected, args.nnodes, args.node_rank, timeout)
                                         : connected.status();
    if (!joined.ok()) {
      std::fprintf(stderr, "tpxrun: node %d of %d: %s\n", args.node_rank, args.nnodes,
                   std::string(joined.message()).c_str());
      return 1;
    }
    node_store = std::move(*connected);
  }

  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return 1;
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  // Everything a child needs is prepared before fork (the store thread runs).
  std::vector<std::string> base_env;
  for (char** e = environ; *e != nullptr; ++e) base_env.push_back(*e);
  std::vector<char*> argv_child;
  for (std::string& c : args.command) argv_child.push_back(c.data());
  argv_child.push_back(nullptr);

  const int n = args.nproc;
  const int world = n * args.nnodes;
  const int rank0 = n * args.node_rank;  // global rank of local rank 0
  std::vector<pid_t> pids(n, -1);
  std::vector<Stream> streams;
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> env = base_env;
    auto put = [&](const std::string& k, const std::string& v) { env.push_back(k + "=" + v); };
    put("TPX_RANK", absl::StrCat(rank0 + r));
    put("TPX_WORLD_SIZE", absl::StrCat(world));
    put("TPX_LOCAL_RANK", absl::StrCat(r));
    put("TPX_LOCAL_WORLD_SIZE", absl::StrCat(n));
    put("TPX_STORE_ADDR", args.master_addr);
    put("TPX_STORE_PORT", absl::StrCat(port));
    put("TPX_STORE_HOSTED", server || args.nnodes > 1 ? "1" : "0");
    put("TPX_STORE_SECRET", secret);
    put("RANK", absl::StrCat(rank0 + r));
    put("WORLD_SIZE", absl::StrCat(world));
    put("LOCAL_RANK", absl::StrCat(r));
    put("LOCAL_WORLD_SIZE", absl::StrCat(n));
    put("MASTER_ADDR", args.master_addr);
    put("MASTER_PORT", absl::StrCat(port));
    // All ranks are local: keep UCX off the machine's network interfaces
    // unless the user chose devices.
    if (args.nnodes == 1 && std::getenv("UCX_NET_DEVICES") == nullptr) {
      put("UCX_NET_DEVICES", "lo");
    }
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);

    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
      std::perror("tpxrun: pipe");
      return 1;
    }
    const pid_t launcher = ::getpid();
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);  // its own group: signals reach the rank's children too
      // Die with tpxrun, also when it is SIGKILLed (the setting survives
      // exec). tpxrun may have died before prctl: then we are orphaned already.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher) ::_exit(128 + SIGKILL);
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      ::sigaction(SIGINT, &dfl, nullptr);
      ::sigaction(SIGTERM, &dfl, nullptr);
      ::signal(SIGPIPE, SIG_DFL);
      ::execvpe(argv_child[0], argv_child.data(), envp.data());
      const char msg[] = "tpxrun: cannot execute the program\n";
      (void)!::write(STDERR_FILENO, msg, sizeof(msg) - 1);
      ::_exit(127);
    }
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    if (pid < 0) {
      std::perror("tpxrun: fork");
      return 1;
    }
    ::setpgid(pid, pid);
    ::fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
    ::fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
    pids[r] = pid;
    streams.push_back({out_pipe[0], rank0 + r, stdout, ""});
    streams.push_back({err_pipe[0], rank0 + r, stderr, ""});
  }

  int exit_code = 0;
  int running = n;
  int first_failed = -1;
  absl::Time kill_at = absl::InfiniteFuture();
  auto signal_all = [&](int sig) {
    for (pid_t pid : pids) {
      if (pid > 0) ::kill(-pid, sig);
    }
  };
  while (running > 0 || std::any_of(streams.begin(), streams.end(),
                                     [](const Stream& s) { return s.fd >= 0; })) {
    std::vector<pollfd> fds;
    fds.push_back({g_signal_pipe[0], POLLIN, 0});
    for (Stream& s : streams) {
      if (s.fd >= 0) fds.push_back({s.fd, POLLIN, 0});
    }
    ::poll(fds.data(), fds.size(), 50);
    unsigned char sig;
    while (::read(g_signal_pipe[0], &sig, 1) == 1) {
      std::fprintf(stderr, "tpxrun: got signal %d, forwarding to all ranks\n", sig);
      signal_all(sig);
      if (exit_code == 0) exit_code = 128 + sig;
      kill_at = std::min(kill_at, absl::Now() + absl::Seconds(10));
    }
    for (Stream& s : streams) {
      if (s.fd < 0) continue;
      char buf[65536];
      ssize_t got = ::read(s.fd, buf, sizeof(buf));
      if (got > 0) {
        s.Emit(buf, got);
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
        s.Flush();
        ::close(s.fd);
        s.fd = -1;
      }
    }
    for (int r = 0; r < n; ++r) {
      if (pids[r] <= 0) continue;
      int status = 0;
      if (::waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      pids[r] = -1;
      --running;
      int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (code != 0 && first_failed < 0) {
        first_failed = r;
        if (exit_code == 0) exit_code = code;
        if (WIFSIGNALED(status)) {
          std::fprintf(stderr, "tpxrun: rank %d was killed by signal %d (%s)", rank0 + r,
                       WTERMSIG(status), strsignal(WTERMSIG(status)));
        } else {
          std::fprintf(stderr, "tpxrun: rank %d exited with code %d", rank0 + r, code);
        }
        if (running > 0) std::fprintf(stderr, "; stopping the other ranks");
        std::fprintf(stderr, "\n");
        signal_all(SIGTERM);
        kill_at = std::min(kill_at, absl::Now() + absl::Seconds(5));
      }
    }
    if (running > 0 && absl::Now() >= kill_at) {
      signal_all(SIGKILL);
      kill_at = absl::InfiniteFuture();
    }
  }
  if (node_store != nullptr) LeaveNodes(*node_store, args.nnodes, args.node_rank);
  return exit_code;
}
