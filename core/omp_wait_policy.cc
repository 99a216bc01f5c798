// How long idle OpenMP threads (oneDNN's GEMM threads and tpx's CPU kernel
// threads, core/cpu/parallel.h) spin before they sleep, for programs that
// link //core:omp_wait_policy.
//
// libgomp's default is to spin for about 300,000 iterations (milliseconds)
// after each parallel region. On a quiet machine spinning keeps the team hot
// between a training step's many short regions; on a shared one, the
// spinning threads take the cores the other processes (and this process's
// own other ranks) need, and a thread that is descheduled stalls its whole
// team at the next barrier. No fixed setting is good for both. Measured on
// a busy 2-core host (GPT example, TP=1, 2 threads, load 6-15, without and
// with one more busy process; medians of 3 interleaved rounds): sleeping at
// once (PASSIVE) was fastest in every round, 1,000 spins lost 38% / 77%,
// 10,000 lost 60% / 86% and libgomp's default 80% / 94%. On a quiet host
// (earlier measurements; none was available for these) sleeping at once
// costs 20-40% (every region then starts with a futex wake) and 10,000
// spins (~0.2 ms, longer than the gaps between a step's back-to-back
// kernels) keep the team hot. So the setting follows the host: PASSIVE when
// it is busy at start, else 10,000 spins (OmpWaitSettingFor in
// core/omp_wait_policy.h).
//
// libgomp reads its settings once, when it is loaded, before any static
// constructor of the program runs, and the C library only takes its
// environment from the process's initial one; so the default cannot simply
// be setenv'd. Instead, from the executable's .preinit_array (which runs
// before any library initialises), a process whose environment names no
// policy re-executes itself once with the chosen setting added. Nothing has
// run yet at that point, so the second start is the only one that does work.
// An explicit OMP_WAIT_POLICY or GOMP_SPINCOUNT in the environment wins (and
// forked ranks inherit the parent's choice); if the re-exec fails (no /proc),
// the program runs on with libgomp's default.
//
//   cc_binary(name = "train", ..., deps = ["//core:omp_wait_policy", ...])
#include "core/omp_wait_policy.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstring>

namespace tpx {
namespace {

constexpr char kPassive[] = "OMP_WAIT_POLICY=PASSIVE";
constexpr char kShortSpin[] = "GOMP_SPINCOUNT=10000";
constexpr size_t kMaxEnvironment = 4096;

// Parses an unsigned decimal (with an optional fraction) at *p, advancing it.
double ParseNumber(const char** p) {
  double v = 0;
  while (**p >= '0' && **p <= '9') v = v * 10 + (*(*p)++ - '0');
  if (**p == '.') {
    ++*p;
    for (double scale = 0.1; **p >= '0' && **p <= '9'; scale /= 10) v += scale * (*(*p)++ - '0');
  }
  return v;
}

char* new_environment[kMaxEnvironment + 2];  // static: no allocation this early

void SetDefaultOmpWaitPolicy(int, char** argv, char** envp) {
  if (argv == nullptr || envp == nullptr) return;
  size_t n = 0;
  for (; envp[n] != nullptr; ++n) {
    if (std::strncmp(envp[n], "OMP_WAIT_POLICY=", 16) == 0 ||
        std::strncmp(envp[n], "GOMP_SPINCOUNT=", 15) == 0) {
      return;
    }
    if (n >= kMaxEnvironment) return;
    new_environment[n] = envp[n];
  }
  HostLoad load;
  const bool known = ReadHostLoad(&load);
  new_environment[n] = const_cast<char*>(known ? OmpWaitSettingFor(load) : kShortSpin);
  new_environment[n + 1] = nullptr;
  execve("/proc/self/exe", argv, new_environment);
}

__attribute__((section(".preinit_array"), used)) void (*const kSetDefaultOmpWaitPolicy)(
    int, char**, char**) = &SetDefaultOmpWaitPolicy;

}  // namespace

const char* OmpWaitSettingFor(const HostLoad& load) {
  const int cpus = load.cpus < 1 ? 1 : load.cpus;
  return load.load_1min >= cpus || load.runnable >= cpus ? kPassive : kShortSpin;
}

bool ReadHostLoad(HostLoad* load) {
  // "0.76 1.35 1.11 3/141 1234": 1, 5, 15-minute loads, runnable/total.
  const int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[128];
  const ssize_t got = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (got <= 0) return false;
  buf[got] = '\0';
  const char* p = buf;
  load->load_1min = ParseNumber(&p);
  for (int field = 0; field < 3 && *p != '\0'; ++p) {
    if (*p == ' ') ++field;
  }
  // This process is running, so it is one of the runnable ones.
  const int runnable = static_cast<int>(ParseNumber(&p)) - 1;
  load->runnable = runnable < 0 ? 0 : runnable;
  cpu_set_t set;
  load->cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  return true;
}

}  // namespace tpx
