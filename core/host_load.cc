#include "core/host_load.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

namespace tpx {

double ParseUnsignedDecimal(const char** p) {
  double v = 0;
  while (**p >= '0' && **p <= '9') v = v * 10 + (*(*p)++ - '0');
  if (**p == '.') {
    ++*p;
    for (double scale = 0.1; **p >= '0' && **p <= '9'; scale /= 10) v += scale * (*(*p)++ - '0');
  }
  return v;
}

bool ReadHostLoadNow(HostLoadNow* out) {
  // "0.76 1.35 1.11 3/141 1234": 1, 5, 15-minute loads, runnable/total.
  const int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[128];
  const ssize_t got = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (got <= 0) return false;
  buf[got] = '\0';
  const char* p = buf;
  const double load_1min = ParseUnsignedDecimal(&p);
  for (int field = 0; field < 3 && *p != '\0'; ++p) {
    if (*p == ' ') ++field;
  }
  // The calling thread is running, so it is one of the runnable ones.
  const int runnable = static_cast<int>(ParseUnsignedDecimal(&p)) - 1;
  cpu_set_t set;
  out->load_1min = load_1min;
  out->runnable = runnable < 0 ? 0 : runnable;
  out->cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  return true;
}

}  // namespace tpx
