// What the host's scheduler has to run at this moment: the tasks runnable
// now (/proc/loadavg's "runnable/total" field, the calling thread counted
// out) and the CPUs this process may run on. Dependency-free and
// allocation-free, so that the OpenMP wait policy (before main) and the
// UCX plugin's executor (core/omp_wait_policy.h, comm_ucx/communicator.h)
// can both read it.
//
//   HostLoadNow now;
//   if (ReadHostLoadNow(&now) && now.runnable >= now.cpus) { /* no idle CPU */ }
#ifndef TPX_CORE_HOST_LOAD_H_
#define TPX_CORE_HOST_LOAD_H_

namespace tpx {

struct HostLoadNow {
  double load_1min = 0;  // the first field: lags by a minute
  int runnable = 0;      // other tasks runnable now
  int cpus = 1;          // CPUs this process may run on
};

// One read of /proc/loadavg and of this process's CPU affinity. False
// (out unchanged) where /proc/loadavg cannot be read.
bool ReadHostLoadNow(HostLoadNow* out);

// Parses an unsigned decimal with an optional fraction at *p (as /proc
// writes them), advancing *p past it; 0 when there is none. No locale, no
// allocation: usable before main.
double ParseUnsignedDecimal(const char** p);

}  // namespace tpx

#endif  // TPX_CORE_HOST_LOAD_H_
