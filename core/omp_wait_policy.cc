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
// spin of kSpinCount iterations (microseconds: the gap between back-to-back
// kernels, far less than a time slice) is the compromise; no fixed value is
// best for both.
//
// libgomp reads its settings once, when it is loaded, before any static
// constructor of the program runs; so the default is set from the
// executable's .preinit_array, which runs first. An explicit
// OMP_WAIT_POLICY or GOMP_SPINCOUNT in the environment wins.
//
//   cc_binary(name = "train", ..., deps = ["//core:omp_wait_policy", ...])
#include <cstdlib>

namespace tpx {
namespace {

constexpr const char* kSpinCount = "1000";

void SetDefaultOmpWaitPolicy(int, char**, char**) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) {
    return;
  }
  setenv("GOMP_SPINCOUNT", kSpinCount, /*overwrite=*/0);
}

__attribute__((section(".preinit_array"), used)) void (*const kSetDefaultOmpWaitPolicy)(
    int, char**, char**) = &SetDefaultOmpWaitPolicy;

}  // namespace
}  // namespace tpx
