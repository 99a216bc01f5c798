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

// The host's load now, from /proc/loadavg and the affinity mask; false when
// it cannot be read. Async-signal-safe (no allocation): usable before any
// library initialises.
bool ReadHostLoad(HostLoad* load);

}  // namespace tpx

#endif  // TPX_CORE_OMP_WAIT_POLICY_H_
