// The choice //core:omp_wait_policy makes before main: how long idle OpenMP
// threads spin before they sleep, from how busy the host is when the program
// starts. Exposed for tests and logs; programs only link the library.
//
//   const char* s = OmpWaitSettingFor({.runnable = 1, .cpus = 2});
//   // "OMP_WAIT_POLICY=PASSIVE": 1 busy task + 2 threads on 2 CPUs
#ifndef TPX_CORE_OMP_WAIT_POLICY_H_
#define TPX_CORE_OMP_WAIT_POLICY_H_

namespace tpx {

struct HostLoad {
  // /proc/loadavg's first field. For logs only: it lags by a minute and
  // counts this program's own previous runs.
  double load_1min = 0;
  int runnable = 0;  // other tasks runnable now (median of a few samples)
  int cpus = 1;      // CPUs this process may run on
  int threads = 0;   // this program's compute threads; 0: one per CPU
};

// "OMP_WAIT_POLICY=PASSIVE" (sleep at once) when the other runnable tasks
// and this program's threads together exceed the CPUs: then a thread of a
// team waits for a core, and its spinning team-mates hold the cores it
// waits for. Otherwise "GOMP_SPINCOUNT=10000" (spin ~0.2 ms, then sleep).
const char* OmpWaitSettingFor(const HostLoad& load);

// The variable the automatic choice adds beside its setting, valued
// "<pid>:<setting>" (the process that chose it and the setting chosen), so
// that a setting inherited from a parent's automatic choice can be told from
// one a user gave.
inline constexpr char kOmpWaitAutoVariable[] = "TPX_OMP_WAIT_AUTO";

// What the start-up hook does in process `pid` with environment envp
// (nullptr-terminated): the setting to run with, or nullptr when the
// environment's own stands. It stands when a user chose it (an
// OMP_WAIT_POLICY or GOMP_SPINCOUNT entry that kOmpWaitAutoVariable does not
// name, or both entries) or when this process chose it before re-executing
// itself. A setting another process chose automatically is chosen again for
// this process's start (the host may have got busier since), and nullptr is
// returned when the choice is the same. read_load (e.g. ReadHostLoad) is
// called only when a choice is made; the program's threads are
// TPX_NUM_THREADS from envp where it leaves them 0; when it fails, the
// choice is GOMP_SPINCOUNT=10000.
const char* OmpWaitSettingToApply(const char* const* envp, long pid,
                                  bool (*read_load)(HostLoad*));

// The host's load now, from /proc/loadavg (runnable: the median of 5
// samples ~2 ms apart, so that a blip of a daemon does not count) and the
// affinity mask; threads is left 0. False when it cannot be read. Async-signal-safe (no allocation): usable before any
// library initialises.
bool ReadHostLoad(HostLoad* load);

}  // namespace tpx

#endif  // TPX_CORE_OMP_WAIT_POLICY_H_
