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
// core/omp_wait_policy.h). "Busy" is what the program's threads would meet:
// the tasks runnable now (median of a few samples) plus the program's
// threads exceed the CPUs; one busy task beside a 2-thread team on 2 cores
// is contention (measured: spinning then lost ~90%, bench:gpt --contend=1).
// The 1-minute load average is not used: it lags, so it misses a competitor
// that just started and counts this program's own previous run as load.
//
// libgomp reads its settings once, when it is loaded, before any static
// constructor of the program runs, and the C library only takes its
// environment from the process's initial one; so the default cannot simply
// be setenv'd. Instead, from the executable's .preinit_array (which runs
// before any library initialises), a process whose environment names no
// policy re-executes itself once with the chosen setting added. Nothing has
// run yet at that point, so the second start is the only one that does work.
// An explicit OMP_WAIT_POLICY or GOMP_SPINCOUNT in the environment wins.
// Forked ranks inherit the parent's choice (libgomp is loaded already); a
// program the chooser starts (fork + exec) chooses again for the load at its
// own start, told apart from a user's setting by TPX_OMP_WAIT_AUTO
// (OmpWaitSettingToApply). If the re-exec fails (no /proc), the program runs
// on with libgomp's default.
//
//   cc_binary(name = "train", ..., deps = ["//core:omp_wait_policy", ...])
#include "core/omp_wait_policy.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/host_load.h"

namespace tpx {
namespace {

constexpr char kPassive[] = "OMP_WAIT_POLICY=PASSIVE";
constexpr char kShortSpin[] = "GOMP_SPINCOUNT=10000";
constexpr size_t kMaxEnvironment = 4096;

bool StartsWith(const char* s, const char* prefix) {
  return std::strncmp(s, prefix, std::strlen(prefix)) == 0;
}
bool IsSetting(const char* entry) {
  return StartsWith(entry, "OMP_WAIT_POLICY=") || StartsWith(entry, "GOMP_SPINCOUNT=");
}
// Points past "TPX_OMP_WAIT_AUTO=" in entry, or nullptr.
const char* AutoValue(const char* entry) {
  const size_t n = std::strlen(kOmpWaitAutoVariable);
  return std::strncmp(entry, kOmpWaitAutoVariable, n) == 0 && entry[n] == '=' ? entry + n + 1
                                                                             : nullptr;
}

// Static: no allocation this early.
char* new_environment[kMaxEnvironment + 3];
char auto_entry[96];

void SetDefaultOmpWaitPolicy(int, char** argv, char** envp) {
  if (argv == nullptr || envp == nullptr) return;
  const long pid = static_cast<long>(getpid());
  const char* setting = OmpWaitSettingToApply(envp, pid, &ReadHostLoad);
  if (setting == nullptr) return;
  // "TPX_OMP_WAIT_AUTO=<pid>:<setting>", written without snprintf.
  char digits[24];
  int nd = 0;
  for (long v = pid; nd == 0 || v > 0; v /= 10) digits[nd++] = static_cast<char>('0' + v % 10);
  size_t len = 0;
  auto append = [&](const char* s) {
    for (; *s != '\0' && len + 1 < sizeof(auto_entry); ++s) auto_entry[len++] = *s;
  };
  append(kOmpWaitAutoVariable);
  append("=");
  while (nd > 0 && len + 1 < sizeof(auto_entry)) auto_entry[len++] = digits[--nd];
  append(":");
  append(setting);
  auto_entry[len] = '\0';
  size_t n = 0;
  for (char** e = envp; *e != nullptr; ++e) {
    if (IsSetting(*e) || AutoValue(*e) != nullptr) continue;
    if (n >= kMaxEnvironment) return;
    new_environment[n++] = *e;
  }
  new_environment[n] = const_cast<char*>(setting);
  new_environment[n + 1] = auto_entry;
  new_environment[n + 2] = nullptr;
  execve("/proc/self/exe", argv, new_environment);
}

__attribute__((section(".preinit_array"), used)) void (*const kSetDefaultOmpWaitPolicy)(
    int, char**, char**) = &SetDefaultOmpWaitPolicy;

}  // namespace

const char* OmpWaitSettingToApply(const char* const* envp, long pid,
                                  bool (*read_load)(HostLoad*)) {
  const char* setting = nullptr;
  const char* auto_value = nullptr;
  int settings = 0;
  for (const char* const* e = envp; *e != nullptr; ++e) {
    if (IsSetting(*e)) {
      setting = *e;
      ++settings;
    } else if (const char* v = AutoValue(*e); v != nullptr) {
      auto_value = v;
    }
  }
  if (settings > 0) {
    // Only "<pid>:<setting>" of another process, naming the one setting
    // present, is an automatic choice to make again.
    if (settings > 1 || auto_value == nullptr) return nullptr;
    const char* colon = std::strchr(auto_value, ':');
    if (colon == nullptr || std::strcmp(colon + 1, setting) != 0) return nullptr;
    const char* p = auto_value;
    const double chooser = ParseUnsignedDecimal(&p);
    if (p != colon || chooser == static_cast<double>(pid)) return nullptr;
  }
  HostLoad load;
  const char* chosen = kShortSpin;
  if (read_load(&load)) {
    for (const char* const* e = envp; load.threads == 0 && *e != nullptr; ++e) {
      if (StartsWith(*e, "TPX_NUM_THREADS=")) {
        const char* p = *e + 16;
        const double n = ParseUnsignedDecimal(&p);
        if (*p == '\0' && n >= 1 && n < 1e6) load.threads = static_cast<int>(n);
      }
    }
    chosen = OmpWaitSettingFor(load);
  }
  return setting != nullptr && std::strcmp(chosen, setting) == 0 ? nullptr : chosen;
}

const char* OmpWaitSettingFor(const HostLoad& load) {
  const int cpus = load.cpus < 1 ? 1 : load.cpus;
  const int threads = load.threads < 1 || load.threads > cpus ? cpus : load.threads;
  return load.runnable + threads > cpus ? kPassive : kShortSpin;
}

bool ReadHostLoad(HostLoad* load) {
  constexpr int kSamples = 5;
  int runnable[kSamples];
  HostLoadNow now;
  for (int i = 0; i < kSamples; ++i) {
    if (i > 0) {
      const timespec pause{0, 2'000'000};
      nanosleep(&pause, nullptr);
    }
    if (!ReadHostLoadNow(&now)) return false;
    runnable[i] = now.runnable;
  }
  std::sort(runnable, runnable + kSamples);
  load->load_1min = now.load_1min;
  load->runnable = runnable[kSamples / 2];
  load->cpus = now.cpus;
  return true;
}

}  // namespace tpx
