// How long idle OpenMP threads (oneDNN's GEMM threads and tpx's CPU kernel
// threads, core/cpu/parallel.h) spin before they sleep, for programs that
// link //core:omp_wait_policy.
//
// libgomp's default is to spin for about 300,000 iterations (milliseconds)
// after each parallel region. On a quiet machine that keeps the team hot
// between a training step's many short regions; on a shared one, the
// spinning threads take the cores the other processes (and this process's
// own other ranks) need, and a thread that is descheduled stalls its whole
// team at the next barrier. Measured on a busy 2-core host (GPT example,
// TP=1, 2 threads): sleeping at once was fastest, 1,000 iterations lost
// 25-50%, 10,000 lost 80% and the default 90%; on a quiet host sleeping at
// once costs 20-40% (every region then starts with a futex wake). A short
// spin of 1,000 iterations (kSpinSetting) (microseconds: the gap between back-to-back
// kernels, far less than a time slice) is the compromise; no fixed value is
// best for both.
//
// libgomp reads its settings once, when it is loaded, before any static
// constructor of the program runs, and the C library only takes its
// environment from the process's initial one; so the default cannot simply
// be setenv'd. Instead, from the executable's .preinit_array (which runs
// before any library initialises), a process whose environment names no
// policy re-executes itself once with GOMP_SPINCOUNT added. Nothing has run
// yet at that point, so the second start is the only one that does work.
// An explicit OMP_WAIT_POLICY or GOMP_SPINCOUNT in the environment wins; if
// the re-exec fails (no /proc), the program runs on with libgomp's default.
//
//   cc_binary(name = "train", ..., deps = ["//core:omp_wait_policy", ...])
#include <unistd.h>

#include <cstring>

namespace tpx {
namespace {

constexpr char kSpinSetting[] = "GOMP_SPINCOUNT=1000";
constexpr size_t kMaxEnvironment = 4096;

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
  new_environment[n] = const_cast<char*>(kSpinSetting);
  new_environment[n + 1] = nullptr;
  execve("/proc/self/exe", argv, new_environment);
}

__attribute__((section(".preinit_array"), used)) void (*const kSetDefaultOmpWaitPolicy)(
    int, char**, char**) = &SetDefaultOmpWaitPolicy;

}  // namespace
}  // namespace tpx
