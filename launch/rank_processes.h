// The rank processes of one node of a job, started together and supervised
// until they all exit: every tpx launcher (tools/tpxrun, launch/local_job.h,
// the multi-rank test harness) is built on this.
//
//   RankProcesses ranks({.own_process_group = true, .prefix_output = true});
//   for (int r = 0; r < n; ++r) {
//     TPX_RETURN_IF_ERROR(ranks.Exec(r, {"./trainer"}, RankEnv::For(place_of_rank_r)));
//   }
//   JobResult result = ranks.Supervise({.forward_signals = true, .log_prefix = "tpxrun: "});
//   return result.exit_code();
//
// A rank is a program (Exec: fork + exec) or a function of this program
// (Fork: the child runs it and exits with its return value; fork only while
// this process has a single thread). Every rank dies with this process, also
// when it is SIGKILLed (parent-death signal; it follows the thread that
// started the rank, so start and supervise from one thread). Supervise stops
// the others when one fails (SIGTERM, then SIGKILL after a grace period),
// forwards SIGINT/SIGTERM, enforces a deadline, and says which rank failed
// and how.
#ifndef TPX_LAUNCH_RANK_PROCESSES_H_
#define TPX_LAUNCH_RANK_PROCESSES_H_

#include <sys/types.h>

#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "comm/launch_env.h"

namespace tpx::launch {

// Environment changes for one rank: `set` replaces what this process has,
// `defaults` apply only to variables this process leaves unset.
struct RankEnv {
  std::vector<std::pair<std::string, std::string>> set;
  std::vector<std::pair<std::string, std::string>> defaults;

  // The variables that give a rank its place in the job (comm::ReadLaunchEnv
  // reads them back).
  static RankEnv For(const comm::LaunchEnv& place);
};

// How one rank ended.
struct RankExit {
  int rank = -1;
  pid_t pid = -1;
  int exit_code = -1;      // when it exited
  int signal = 0;          // when a signal killed it
  bool timed_out = false;  // killed at SuperviseOptions::deadline
  std::string report;      // what a Fork rank wrote to its report fd

  bool failed() const { return signal != 0 || exit_code != 0; }
  // The shell's convention: the exit code, or 128 + the signal.
  int code() const { return signal != 0 ? 128 + signal : exit_code; }
  // "rank 3 exited with code 3", "rank 3 was killed by signal 9 (Killed)".
  std::string Describe() const;
};

// Why the ranks of a job were stopped (or, without stop_on_failure, the
// first failure): the exit code the launcher should return and a reason.
struct JobStop {
  int exit_code = 1;
  std::string reason;
};

struct SuperviseOptions {
  // Once a rank fails, stop the others: SIGTERM, SIGKILL after kill_grace.
  bool stop_on_failure = true;
  absl::Duration kill_grace = absl::Seconds(5);
  // SIGINT and SIGTERM sent to this process go to every rank (exit code
  // 128 + signal); ranks still running signal_grace later get SIGKILL.
  bool forward_signals = false;
  absl::Duration signal_grace = absl::Seconds(10);
  // Ranks running this long after Supervise began are SIGKILLed (timed_out).
  absl::Duration deadline = absl::InfiniteDuration();
  // Asked every poll round (about 20 ms) while ranks run; an answer stops
  // the ranks as a failure would, for that reason. Must not block.
  std::function<std::optional<JobStop>()> should_stop;
  // Told once when this process stops its ranks for a reason of its own (a
  // rank failed, a signal came); not for should_stop's. Must not block.
  std::function<void(const JobStop&)> on_stop;
  // Prefix of the lines saying why ranks are stopped; "" prints none.
  std::string log_prefix;
};

struct JobResult {
  std::vector<RankExit> ranks;  // in the order they were started
  // The first failure: a rank's, a forwarded signal's or should_stop's.
  std::optional<JobStop> failure;
  int exit_code() const { return failure.has_value() ? failure->exit_code : 0; }
};

class RankProcesses {
 public:
  struct Options {
    // Each rank leads its own process group, so that signals reach the
    // processes it starts too.
    bool own_process_group = false;
    // Ranks' stdout and stderr go to `out` and `err` with every line
    // prefixed "[rank r] "; otherwise ranks share this process's.
    bool prefix_output = false;
    FILE* out = stdout;
    FILE* err = stderr;
  };

  explicit RankProcesses(Options options);
  RankProcesses() : RankProcesses(Options()) {}
  // SIGKILLs and reaps ranks still running (an error return between spawns).
  ~RankProcesses();
  RankProcesses(const RankProcesses&) = delete;
  RankProcesses& operator=(const RankProcesses&) = delete;

  // Starts `argv` (found on PATH) as `rank` with this process's environment
  // changed by `env`; signal dispositions start at their defaults.
  absl::Status Exec(int rank, const std::vector<std::string>& argv, const RankEnv& env = {});
  // Forks a child that applies `env`, runs main(report_fd) and exits with
  // its return value; bytes written to report_fd come back in RankExit::report.
  absl::Status Fork(int rank, const std::function<int(int report_fd)>& main,
                    const RankEnv& env = {});

  int size() const;

  // Waits until every rank exited (and its output ended). Call once.
  JobResult Supervise(const SuperviseOptions& options);

 private:
  struct Stream;
  struct Rank;
  absl::Status Start(int rank, const std::function<void()>& child);
  void Signal(int sig);

  Options options_;
  std::vector<Rank> ranks_;
};

}  // namespace tpx::launch

#endif  // TPX_LAUNCH_RANK_PROCESSES_H_
