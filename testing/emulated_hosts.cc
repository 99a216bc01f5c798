#include "testing/emulated_hosts.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace tpx::testing {
namespace {

constexpr const char* kPrefix = "tpxmh";
// Per-host boot ids and the hosts file, named like the namespaces.
constexpr const char* kBootIdDir = "/run/tpx_emulated_hosts";

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// Names in `dir` made by this helper for a process that is gone.
std::vector<std::string> StaleNames(const char* path) {
  std::vector<std::string> stale;
  DIR* dir = ::opendir(path);
  if (dir == nullptr) return stale;
  while (dirent* e = ::readdir(dir)) {
    absl::string_view name = e->d_name;
    if (!absl::ConsumePrefix(&name, kPrefix)) continue;
    int pid = 0;
    if (!absl::SimpleAtoi(name.substr(0, name.find('-')), &pid) || pid <= 0) continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH) stale.emplace_back(e->d_name);
  }
  ::closedir(dir);
  return stale;
}

void RemoveStale() {
  for (const std::string& ns : StaleNames("/run/netns")) (void)RunCommand("ip netns del " + ns);
  for (const std::string& f : StaleNames(kBootIdDir)) {
    ::unlink(absl::StrCat(kBootIdDir, "/", f).c_str());
  }
}

}  // namespace

absl::Status RunCommand(const std::string& command) {
  std::fflush(stdout);
  std::fflush(stderr);
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return Errno("popen '" + command + "'");
  std::string output;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) output += buf;
  int status = ::pclose(p);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::UnavailableError(
        absl::StrCat("'", command, "' failed (status ", status, "): ", output));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<EmulatedHosts>> EmulatedHosts::Create(int num_hosts) {
  if (num_hosts < 1 || num_hosts > 200) {
    return absl::InvalidArgumentError(absl::StrCat("num_hosts ", num_hosts, " not in [1, 200]"));
  }
  RemoveStale();
  static std::atomic<int> counter{0};
  std::unique_ptr<EmulatedHosts> hosts(new EmulatedHosts(
      absl::StrCat(kPrefix, ::getpid(), "-", counter.fetch_add(1), "-"), num_hosts));
  hosts->StartReaper();
  const std::string br = hosts->bridge_ns();
  std::vector<std::string> commands = {
      "ip netns add " + br,
      "ip -n " + br + " link set lo up",
      "ip -n " + br + " link add br0 type bridge",
      "ip -n " + br + " link set br0 up",
  };
  for (int h = 0; h < num_hosts; ++h) {
    const std::string ns = hosts->host_ns(h);
    const std::string port = absl::StrCat("h", h);
    commands.push_back("ip netns add " + ns);
    commands.push_back("ip -n " + ns + " link set lo up");
    commands.push_back(absl::StrCat("ip -n ", ns, " link add ", kDevice, " type veth peer name ",
                                    port, " netns ", br));
    commands.push_back(
        absl::StrCat("ip -n ", ns, " addr add ", hosts->address(h), "/24 dev ", kDevice));
    commands.push_back(absl::StrCat("ip -n ", ns, " link set ", kDevice, " up"));
    commands.push_back("ip -n " + br + " link set " + port + " master br0");
    commands.push_back("ip -n " + br + " link set " + port + " up");
  }
  for (const std::string& c : commands) {
    absl::Status s = RunCommand(c);
    if (!s.ok()) return s;  // the destructor removes what was made
  }
  // A boot id per host: UCX (and the UCX plugin) take processes with equal
  // boot ids for one machine and would reach across hosts by shared memory.
  if (::mkdir(kBootIdDir, 0755) != 0 && errno != EEXIST) return Errno(std::string("mkdir ") + kBootIdDir);
  for (int h = 0; h < num_hosts; ++h) {
    const std::string id = absl::StrFormat("%08x-0000-4000-8000-%012x\n", ::getpid(), h + 1);
    FILE* f = std::fopen(hosts->boot_id_path(h).c_str(), "w");
    if (f == nullptr) return Errno("create " + hosts->boot_id_path(h));
    const bool written = std::fputs(id.c_str(), f) >= 0;
    if (std::fclose(f) != 0 || !written) return Errno("write " + hosts->boot_id_path(h));
  }
  std::string etc_hosts = "127.0.0.1 localhost\n";
  for (int h = 0; h < num_hosts; ++h) {
    absl::StrAppend(&etc_hosts, hosts->address(h), " ", hosts->hostname(h), "\n");
  }
  FILE* f = std::fopen(hosts->hosts_file_path().c_str(), "w");
  if (f == nullptr) return Errno("create " + hosts->hosts_file_path());
  const bool written = std::fputs(etc_hosts.c_str(), f) >= 0;
  if (std::fclose(f) != 0 || !written) return Errno("write " + hosts->hosts_file_path());
  return hosts;
}

EmulatedHosts::~EmulatedHosts() {
  RemoveAll();
  if (reaper_pipe_ >= 0) ::close(reaper_pipe_);  // the reaper finds nothing left and exits
  if (reaper_ > 0) (void)WaitForExit(reaper_, absl::Seconds(30));
}

void EmulatedHosts::StartReaper() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return;  // then only the next Create's stale sweep cleans up
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid == 0) {
    // Out of the test's process group and deaf to its signals, so that a
    // test killed on timeout still gets its namespaces removed.
    ::setsid();
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGTERM, SIG_IGN);
    ::signal(SIGHUP, SIG_IGN);
    int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
      ::dup2(null, STDIN_FILENO);
      ::dup2(null, STDOUT_FILENO);
      ::dup2(null, STDERR_FILENO);
    }
    ::close(fds[1]);
    char c;
    while (::read(fds[0], &c, 1) < 0 && errno == EINTR) {
    }
    RemoveAll();
    ::_exit(0);
  }
  ::close(fds[0]);
  if (pid < 0) {
    ::close(fds[1]);
    return;
  }
  reaper_ = pid;
  reaper_pipe_ = fds[1];
}

void EmulatedHosts::RemoveAll() {
  for (int h = 0; h < num_hosts_; ++h) ::unlink(boot_id_path(h).c_str());
  ::unlink(hosts_file_path().c_str());
  // Deleting a namespace destroys its veth ends and their peers.
  for (int h = 0; h < num_hosts_; ++h) {
    if (::access(netns_path(h).c_str(), F_OK) == 0) (void)RunCommand("ip netns del " + host_ns(h));
  }
  if (::access(("/run/netns/" + bridge_ns()).c_str(), F_OK) == 0) {
    (void)RunCommand("ip netns del " + bridge_ns());
  }
}

std::string EmulatedHosts::host_ns(int host) const { return absl::StrCat(prefix_, "h", host); }
std::string EmulatedHosts::netns_path(int host) const { return "/run/netns/" + host_ns(host); }
std::string EmulatedHosts::boot_id_path(int host) const {
  return absl::StrCat(kBootIdDir, "/", host_ns(host));
}
std::string EmulatedHosts::hosts_file_path() const {
  return absl::StrCat(kBootIdDir, "/", prefix_, "etc_hosts");
}
std::string EmulatedHosts::address(int host) const { return absl::StrCat("10.77.0.", host + 1); }
std::string EmulatedHosts::hostname(int host) const { return absl::StrCat("tpxhost", host); }

absl::Status EmulatedHosts::Enter(int host) const {
  if (host < 0 || host >= num_hosts_) {
    return absl::InvalidArgumentError(absl::StrCat("no emulated host ", host));
  }
  int fd = ::open(netns_path(host).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("open " + netns_path(host));
  const int rc = ::setns(fd, CLONE_NEWNET);
  ::close(fd);
  if (rc != 0) return Errno("setns " + netns_path(host));
  if (::unshare(CLONE_NEWUTS | CLONE_NEWNS) != 0) return Errno("unshare(UTS, mount)");
  const std::string name = hostname(host);
  if (::sethostname(name.data(), name.size()) != 0) return Errno("sethostname " + name);
  // UCX lists network devices under /sys/class/net, which shows the
  // namespace of whoever mounted /sys: remount it here (as `ip netns exec`).
  if (::mount(nullptr, "/", nullptr, MS_SLAVE | MS_REC, nullptr) != 0) return Errno("mount --make-rslave /");
  if (::umount2("/sys", MNT_DETACH) != 0) return Errno("umount /sys");
  if (::mount("sysfs", "/sys", "sysfs", 0, nullptr) != 0) return Errno("mount sysfs");
  if (::mount(boot_id_path(host).c_str(), "/proc/sys/kernel/random/boot_id", nullptr, MS_BIND,
              nullptr) != 0) {
    return Errno("bind-mount " + boot_id_path(host) + " over the boot id");
  }
  if (::mount(hosts_file_path().c_str(), "/etc/hosts", nullptr, MS_BIND, nullptr) != 0) {
    return Errno("bind-mount " + hosts_file_path() + " over /etc/hosts");
  }
  ::setenv("UCX_NET_DEVICES", kDevice, /*overwrite=*/1);
  return absl::OkStatus();
}

absl::StatusOr<pid_t> EmulatedHosts::Spawn(int host, const std::vector<std::string>& argv,
                                           const std::string& log_path,
                                           const std::vector<std::string>& env) const {
  if (argv.empty()) return absl::InvalidArgumentError("Spawn: empty argv");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return Errno("open " + log_path);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(log, STDOUT_FILENO);
    ::dup2(log, STDERR_FILENO);
    absl::Status entered = Enter(host);
    if (!entered.ok()) {
      std::fprintf(stderr, "cannot enter host %d: %s\n", host, entered.ToString().c_str());
      ::_exit(126);
    }
    for (const std::string& e : env) ::putenv(const_cast<char*>(e.c_str()));
    ::execv(args[0], args.data());
    std::fprintf(stderr, "cannot execute %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::close(log);
  if (pid < 0) return absl::UnavailableError(absl::StrCat("fork: ", std::strerror(fork_errno)));
  return pid;
}

absl::StatusOr<int> WaitForExit(pid_t pid, absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (true) {
    int status = 0;
    pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (got < 0 && errno != EINTR) return Errno(absl::StrCat("waitpid ", pid));
    if (absl::Now() >= give_up) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      return absl::DeadlineExceededError(absl::StrCat("process ", pid, " still running after ",
                                                      absl::FormatDuration(timeout), "; killed"));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

absl::Status EmulatedHosts::SetLinkUp(int host, bool up) const {
  return RunCommand(absl::StrCat("ip -n ", bridge_ns(), " link set h", host, up ? " up" : " down"));
}

void EmulatedHosts::PlaceRanks(int ranks_per_host, RunOptions* options) const {
  options->enter_rank_host = [this, ranks_per_host](int rank) {
    return Enter(rank / ranks_per_host);
  };
  options->store_addr = address(0);
  options->store_netns = netns_path(0);
}

}  // namespace tpx::testing
