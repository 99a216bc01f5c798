// The choice //core:omp_wait_policy makes before main: how long idle OpenMP
// threads spin before they sleep, from how busy the host is when the program
// starts. Exposed for tests and logs; programs only link the library.
//
//   const char* s = OmpWaitSettingFor({.load_1min = 3.5, .runnable = 4, .cpus = 2});
//   // "OMP_WAIT_POLICY=PASSIVE"
#ifndef TPX_CORE_OMP_WAIT_POLICY_H_
#define TPX_CORE_OMP_WAIT_POLICY_H_

namespace tpx {

struct HostLoad {
  double load_1min = 0;  // /proc/loadavg's first field
  int runnable = 0;      // runnable tasks now, this one excluded
  int cpus = 1;          // CPUs this process may run on
};

// "OMP_WAIT_POLICY=PASSIVE" (sleep at once) when the host is busy: the
// 1-minute load or the tasks runnable now reach the CPU count; otherwise
// "GOMP_SPINCOUNT=10000" (spin ~0.2 ms, then sleep).
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
// itself. A setting a parent chose automatically is chosen again for this
// process's host load (the host may have got busier since), and nullptr is
// returned when the choice is the same. load nullptr: the load is unknown
// (then GOMP_SPINCOUNT=10000).
const char* OmpWaitSettingToApply(const char* const* envp, long pid, const HostLoad* load);

// The host's load now, from /proc/loadavg and the affinity mask; false when
// it cannot be read. Async-signal-safe (no allocation): usable before any
// library initialises.
bool ReadHostLoad(HostLoad* load);

}  // namespace tpx

#endif  // TPX_CORE_OMP_WAIT_POLICY_H_
