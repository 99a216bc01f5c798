#include "launch/rank_processes.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

extern char** environ;

namespace tpx::launch {

RankEnv RankEnv::For(const comm::LaunchEnv& place) {
  return RankEnv{comm::LaunchEnvVariables(place), {}};
}

std::string RankExit::Describe() const {
  if (signal != 0) {
    return absl::StrCat("rank ", rank, " was killed by signal ", signal, " (", strsignal(signal),
                        ")");
  }
  return absl::StrCat("rank ", rank, " exited with code ", exit_code);
}

// A rank's output stream: bytes in, complete lines out, prefixed "[rank r] ".
struct RankProcesses::Stream {
  int fd = -1;
  FILE* out = nullptr;
  std::string partial;

  void Emit(int rank, const char* data, size_t n) {
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
  void Close(int rank) {
    if (!partial.empty()) {
      std::fprintf(out, "[rank %d] %s\n", rank, partial.c_str());
      partial.clear();
      std::fflush(out);
    }
    ::close(fd);
    fd = -1;
  }
};

struct RankProcesses::Rank {
  RankExit exit;
  bool running = false;
  // Readable once the process exited, so that Supervise wakes at once
  // instead of at its next round; -1 where the kernel has no pidfd_open.
  int pid_fd = -1;
  int report_fd = -1;
  Stream out, err;
};

namespace {

// Reads what `fd` has now (non-blocking) into `sink`; false at end of file
// or on an error other than "nothing yet".
template <typename Sink>
bool Drain(int fd, Sink&& sink) {
  char buf[65536];
  while (true) {
    ssize_t got = ::read(fd, buf, sizeof(buf));
    if (got > 0) {
      sink(buf, static_cast<size_t>(got));
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    return got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

// Read end non-blocking, both ends close-on-exec (a child's dup2 clears it).
bool MakePipe(int fds[2]) {
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  return true;
}

// The environment `env` makes of this process's, as NAME=value strings.
std::vector<std::string> ChildEnvironment(const RankEnv& env) {
  auto name_of = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = name_of(entry);
    const bool replaced = std::any_of(env.set.begin(), env.set.end(),
                                      [&](const auto& kv) { return kv.first == name; });
    if (!replaced) out.push_back(entry);
  }
  for (const auto& [name, value] : env.set) out.push_back(name + "=" + value);
  for (const auto& [name, value] : env.defaults) {
    const bool present = std::any_of(out.begin(), out.end(),
                                     [&](const std::string& e) { return name_of(e) == name; });
    if (!present) out.push_back(name + "=" + value);
  }
  return out;
}

// A pidfd for `pid` (close-on-exec), or -1.
int PidFd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  return -1;
#endif
}

// SIGINT/SIGTERM arrive here while Supervise forwards them: the handler
// only writes the signal number into a pipe the supervise loop polls.
int g_signal_pipe[2] = {-1, -1};
void OnSignal(int sig) {
  unsigned char s = static_cast<unsigned char>(sig);
  (void)!::write(g_signal_pipe[1], &s, 1);
}

}  // namespace

RankProcesses::RankProcesses(Options options) : options_(options) {}

RankProcesses::~RankProcesses() {
  for (Rank& r : ranks_) {
    if (r.running) {
      ::kill(options_.own_process_group ? -r.exit.pid : r.exit.pid, SIGKILL);
      ::waitpid(r.exit.pid, nullptr, 0);
    }
    for (int fd : {r.pid_fd, r.report_fd, r.out.fd, r.err.fd}) {
      if (fd >= 0) ::close(fd);
    }
  }
}

absl::Status RankProcesses::Start(int rank, const std::function<void()>& child) {
  Rank r;
  r.exit.rank = rank;
  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  if (options_.prefix_output && (!MakePipe(out_pipe) || !MakePipe(err_pipe))) {
    const std::string why = std::strerror(errno);
    for (int fd : {out_pipe[0], out_pipe[1]}) {
      if (fd >= 0) ::close(fd);
    }
    return absl::ResourceExhaustedError(absl::StrCat("rank ", rank, ": pipe: ", why));
  }
  std::fflush(nullptr);  // buffered output must not be written twice
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (const Rank& other : ranks_) {
      for (int fd : {other.pid_fd, other.report_fd, other.out.fd, other.err.fd}) {
        if (fd >= 0) ::close(fd);
      }
    }
    if (options_.own_process_group) ::setpgid(0, 0);
    // Die with the launcher, also when it is SIGKILLed (kept across exec).
    // It may have died before prctl: then this process is orphaned already.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != launcher) ::_exit(128 + SIGKILL);
    if (options_.prefix_output) {
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
      for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    }
    child();
    ::_exit(127);  // child() does not return
  }
  for (int fd : {out_pipe[1], err_pipe[1]}) {
    if (fd >= 0) ::close(fd);
  }
  if (pid < 0) {
    const std::string why = std::strerror(errno);
    for (int fd : {out_pipe[0], err_pipe[0]}) {
      if (fd >= 0) ::close(fd);
    }
    return absl::ResourceExhaustedError(absl::StrCat("rank ", rank, ": fork: ", why));
  }
  // Also set here: signals to the group must work before the child ran.
  if (options_.own_process_group) ::setpgid(pid, pid);
  r.exit.pid = pid;
  r.running = true;
  r.pid_fd = PidFd(pid);  // close-on-exec
  r.out = {out_pipe[0], options_.out, ""};
  r.err = {err_pipe[0], options_.err, ""};
  ranks_.push_back(std::move(r));
  return absl::OkStatus();
}

absl::Status RankProcesses::Exec(int rank, const std::vector<std::string>& argv,
                                 const RankEnv& env) {
  if (argv.empty()) return absl::InvalidArgumentError(absl::StrCat("rank ", rank, ": no program"));
  // Everything the child needs is made before fork (other threads may run).
  std::vector<std::string> env_strings = ChildEnvironment(env);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (std::string& a : args) argp.push_back(a.data());
  argp.push_back(nullptr);
  return Start(rank, [&] {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGINT, SIGTERM, SIGPIPE}) ::sigaction(sig, &dfl, nullptr);
    ::execvpe(argp[0], argp.data(), envp.data());
    const char msg[] = "cannot execute the program\n";
    (void)!::write(STDERR_FILENO, msg, sizeof(msg) - 1);
    ::_exit(127);
  });
}

absl::Status RankProcesses::Fork(int rank, const std::function<int(int report_fd)>& main,
                                 const RankEnv& env) {
  int report[2];
  if (!MakePipe(report)) {
    return absl::ResourceExhaustedError(absl::StrCat("rank ", rank, ": pipe: ", std::strerror(errno)));
  }
  absl::Status started = Start(rank, [&] {
    ::close(report[0]);
    for (const auto& [name, value] : env.set) ::setenv(name.c_str(), value.c_str(), 1);
    for (const auto& [name, value] : env.defaults) ::setenv(name.c_str(), value.c_str(), 0);
    const int code = main(report[1]);
    std::fflush(nullptr);
    ::_exit(code);
  });
  ::close(report[1]);
  if (!started.ok()) {
    ::close(report[0]);
    return started;
  }
  ranks_.back().report_fd = report[0];
  return absl::OkStatus();
}

int RankProcesses::size() const { return static_cast<int>(ranks_.size()); }

void RankProcesses::Signal(int sig) {
  for (const Rank& r : ranks_) {
    if (r.running) ::kill(options_.own_process_group ? -r.exit.pid : r.exit.pid, sig);
  }
}

JobResult RankProcesses::Supervise(const SuperviseOptions& options) {
  struct sigaction old_int {}, old_term {};
  if (options.forward_signals && ::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0) {
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int);
    ::sigaction(SIGTERM, &sa, &old_term);
  }
  auto log = [&](const std::string& line) {
    if (options.log_prefix.empty()) return;
    std::fprintf(stderr, "%s%s\n", options.log_prefix.c_str(), line.c_str());
    std::fflush(stderr);
  };
  JobResult result;
  int running = 0;
  for (const Rank& r : ranks_) running += r.running;
  const absl::Time deadline = absl::Now() + options.deadline;
  absl::Time kill_at = absl::InfiniteFuture();
  // Stops the running ranks for `why`: SIGTERM now, SIGKILL after `grace`.
  auto stop = [&](const JobStop& why, absl::Duration grace) {
    result.failure = why;
    Signal(SIGTERM);
    kill_at = std::min(kill_at, absl::Now() + grace);
  };
  auto streams_open = [&] {
    return std::any_of(ranks_.begin(), ranks_.end(),
                       [](const Rank& r) { return r.out.fd >= 0 || r.err.fd >= 0; });
  };
  while (running > 0 || streams_open()) {
    std::vector<pollfd> fds;
    if (g_signal_pipe[0] >= 0) fds.push_back({g_signal_pipe[0], POLLIN, 0});
    for (const Rank& r : ranks_) {
      for (int fd : {r.running ? r.pid_fd : -1, r.report_fd, r.out.fd, r.err.fd}) {
        if (fd >= 0) fds.push_back({fd, POLLIN, 0});
      }
    }
    // Wakes when a rank exits or writes; otherwise paces the watch rounds.
    ::poll(fds.data(), fds.size(), 20);
    unsigned char sig;
    while (g_signal_pipe[0] >= 0 && ::read(g_signal_pipe[0], &sig, 1) == 1) {
      log(absl::StrCat("got signal ", sig, ", forwarding to all ranks"));
      Signal(sig);
      kill_at = std::min(kill_at, absl::Now() + options.signal_grace);
      if (!result.failure.has_value()) {
        result.failure = JobStop{128 + sig, absl::StrCat("received signal ", sig, " (",
                                                         strsignal(sig), ")")};
        if (options.on_stop) options.on_stop(*result.failure);
      }
    }
    for (Rank& r : ranks_) {
      for (Stream* s : {&r.out, &r.err}) {
        if (s->fd >= 0 && !Drain(s->fd, [&](const char* d, size_t n) { s->Emit(r.exit.rank, d, n); })) {
          s->Close(r.exit.rank);
        }
      }
      if (r.report_fd >= 0 && !Drain(r.report_fd, [&](const char* d, size_t n) {
            r.exit.report.append(d, n);
          })) {
        ::close(r.report_fd);
        r.report_fd = -1;
      }
    }
    for (Rank& r : ranks_) {
      int status = 0;
      if (!r.running || ::waitpid(r.exit.pid, &status, WNOHANG) != r.exit.pid) continue;
      r.running = false;
      --running;
      if (r.pid_fd >= 0) {
        ::close(r.pid_fd);
        r.pid_fd = -1;
      }
      if (WIFEXITED(status)) r.exit.exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) r.exit.signal = WTERMSIG(status);
      // All it wrote is in the pipe now; a process it left behind may hold
      // the pipe open, so do not wait for the end of file.
      if (r.report_fd >= 0) {
        Drain(r.report_fd, [&](const char* d, size_t n) { r.exit.report.append(d, n); });
        ::close(r.report_fd);
        r.report_fd = -1;
      }
      if (!r.exit.failed() || result.failure.has_value()) continue;
      const JobStop failure{r.exit.code(), r.exit.Describe()};
      if (!options.stop_on_failure) {
        result.failure = failure;
        continue;
      }
      log(running > 0 ? failure.reason + "; stopping the other ranks" : failure.reason);
      stop(failure, options.kill_grace);
      if (options.on_stop) options.on_stop(failure);
    }
    if (running > 0 && !result.failure.has_value() && options.should_stop) {
      if (std::optional<JobStop> why = options.should_stop()) {
        log(why->reason + "; stopping the ranks");
        stop(*why, options.kill_grace);
      }
    }
    const absl::Time now = absl::Now();
    if (running > 0 && now >= deadline) {
      for (Rank& r : ranks_) r.exit.timed_out = r.exit.timed_out || r.running;
      if (!result.failure.has_value()) {
        result.failure = JobStop{124, absl::StrCat("ranks still running after the deadline of ",
                                                   absl::FormatDuration(options.deadline))};
        log(result.failure->reason + "; killing them");
      }
      kill_at = now;
    }
    if (running > 0 && now >= kill_at) {
      Signal(SIGKILL);
      kill_at = absl::InfiniteFuture();
    }
  }
  if (g_signal_pipe[0] >= 0) {
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGTERM, &old_term, nullptr);
    for (int& fd : g_signal_pipe) {
      ::close(fd);
      fd = -1;
    }
  }
  for (const Rank& r : ranks_) result.ranks.push_back(r.exit);
  return result;
}

}  // namespace tpx::launch
