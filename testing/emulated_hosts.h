// Emulated hosts for multi-host tests on one machine: each host is a Linux
// network namespace (its own loopback and an `eth0` veth whose other end is
// a port of a bridge living in one more namespace), and each process placed
// on a host also gets its own UTS namespace (hostname "tpxhost<h>"), a
// /sys showing that host's network devices and its host's own boot id
// (/proc/sys/kernel/random/boot_id, which UCX uses to tell machines apart),
// and an /etc/hosts in which every emulated hostname resolves. Addresses are 10.77.0.<h+1>/24
// and exist only inside these namespaces: nothing leaves the machine.
//
//   TPX_EMULATED_HOSTS_OR_SKIP(hosts, 2);          // skips without root / CAP_SYS_ADMIN
//   RunOptions options;
//   hosts->PlaceRanks(/*ranks_per_host=*/2, &options);  // ranks 0,1 on host 0; 2,3 on host 1
//   RunOnRanks(4, body, options);
//   hosts->SetLinkUp(1, false);                         // pull host 1's cable
//
// Namespaces are named "tpxmh<pid>-<n>-..." and removed by the destructor,
// or, when the process is killed first, by a small reaper process that
// outlives it; Create() also sweeps those of processes that no longer exist.
//
// Processes on different emulated hosts see different hostnames, so the UCX
// plugin treats them as remote peers (TCP over eth0, UCX peer error
// handling) while ranks on one host share memory as on a real node.
#ifndef TPX_TESTING_EMULATED_HOSTS_H_
#define TPX_TESTING_EMULATED_HOSTS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "testing/multiprocess.h"

namespace tpx::testing {

class EmulatedHosts {
 public:
  // Unavailable (with the failing command) where namespaces cannot be made.
  static absl::StatusOr<std::unique_ptr<EmulatedHosts>> Create(int num_hosts);
  ~EmulatedHosts();
  EmulatedHosts(const EmulatedHosts&) = delete;
  EmulatedHosts& operator=(const EmulatedHosts&) = delete;

  int size() const { return num_hosts_; }
  // Host h's address on the bridge ("10.77.0.<h+1>").
  std::string address(int host) const;
  std::string hostname(int host) const;
  // The network device every host has onto the bridge.
  static constexpr const char* kDevice = "eth0";
  // Path of host h's network namespace (for setns(2)).
  std::string netns_path(int host) const;

  // Moves the calling single-threaded process onto host h: network, UTS and
  // mount namespaces, hostname, a fresh /sys, UCX_NET_DEVICES=eth0.
  absl::Status Enter(int host) const;
  // Starts `argv` on host h (fork, Enter, exec) with stdout and stderr
  // appended to `log_path` and `env` ("NAME=value") added to the
  // environment; returns its pid (reap it with WaitForExit).
  absl::StatusOr<pid_t> Spawn(int host, const std::vector<std::string>& argv,
                              const std::string& log_path,
                              const std::vector<std::string>& env = {}) const;
  // Brings host h's bridge port up or down (its "cable").
  absl::Status SetLinkUp(int host, bool up) const;
  // Sets `options` so that RunOnRanks puts ranks [h*n, (h+1)*n) on host h
  // and hosts the store on host 0.
  void PlaceRanks(int ranks_per_host, RunOptions* options) const;

 private:
  EmulatedHosts(std::string prefix, int num_hosts)
      : prefix_(std::move(prefix)), num_hosts_(num_hosts) {}
  std::string bridge_ns() const { return prefix_ + "br"; }
  std::string host_ns(int host) const;
  std::string boot_id_path(int host) const;
  std::string hosts_file_path() const;
  void RemoveAll();
  // Forks a process that removes everything once this process is gone
  // (killed included): it waits for EOF on a pipe only this process writes.
  void StartReaper();

  std::string prefix_;
  int num_hosts_;
  pid_t reaper_ = -1;
  int reaper_pipe_ = -1;
};

// Waits for `pid` to exit: its exit code (128 + signal when killed), or
// DeadlineExceeded after `timeout`, when it is killed (SIGKILL) and reaped.
absl::StatusOr<int> WaitForExit(pid_t pid, absl::Duration timeout);

// Runs a shell command line; Unavailable naming it and its output on failure.
absl::Status RunCommand(const std::string& command);

}  // namespace tpx::testing

// In a gtest body: declares std::unique_ptr<EmulatedHosts> `var` with `n`
// hosts, or skips the test saying why they cannot be made.
#define TPX_EMULATED_HOSTS_OR_SKIP(var, n)                                          \
  auto var##_or_error = ::tpx::testing::EmulatedHosts::Create(n);                   \
  if (!var##_or_error.ok()) {                                                       \
    GTEST_SKIP() << "cannot emulate hosts with network namespaces (needs root): "   \
                 << var##_or_error.status();                                        \
  }                                                                                 \
  std::unique_ptr<::tpx::testing::EmulatedHosts> var = std::move(*var##_or_error)

#endif  // TPX_TESTING_EMULATED_HOSTS_H_
