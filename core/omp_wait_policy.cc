// How long idle OpenMP threads (oneDNN's GEMM threads and tpx's CPU kernel
// threads, core/cpu/parallel.h) spin before they sleep, for programs that
// link //core:omp_wait_policy.
//
// libgomp's default is to spin for about 300,000 iterations (milliseconds)
// after each parallel region. On a quiet machine that keeps the team hot
// between a training step's many short regions; on a shared one, the
// spinning threads take the cores the other processes (and this process's
// own other ranks) need, and a step can take many times longer. A bounded
// spin of kSpinCount iterations (tens of microseconds: longer than the gap
// between back-to-back kernels, far shorter than a time slice) keeps the
// hot case and sleeps soon enough on a busy machine.
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

constexpr const char* kSpinCount = "10000";

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
