// Splitting a CPU kernel's loop over the kernel threads. Internal to the CPU
// kernels.
//
//   ParallelFor(rows, /*cost_per_item=*/h, [&](int64_t first, int64_t last) {
//     for (int64_t r = first; r < last; ++r) NormalizeRow(x + r * h, h);
//   });
//
// The threads are OpenMP's (the pool oneDNN's GEMMs run on, so elementwise
// work between GEMMs finds them awake) and as many as GemmThreads()
// (core/gemm.h: TPX_NUM_THREADS, SetGemmThreads). Small loops run inline on
// the calling thread: below about kMinWorkPerThread elements per thread the
// fork/join costs more than it saves.
#ifndef TPX_CORE_CPU_PARALLEL_H_
#define TPX_CORE_CPU_PARALLEL_H_

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "core/gemm.h"

namespace tpx::cpu {

inline constexpr int64_t kMinWorkPerThread = 16384;

inline int KernelThreads() { return GemmThreads(); }

// Calls fn(first, last) on disjoint ranges covering [0, n), possibly from
// several threads at once; cost_per_item is the elements each item touches.
template <typename Fn>
void ParallelFor(int64_t n, int64_t cost_per_item, Fn&& fn) {
  if (n <= 0) return;
  const int64_t work = n * std::max<int64_t>(1, cost_per_item);
  const int64_t by_work = work / kMinWorkPerThread;
  const int threads =
      static_cast<int>(std::min<int64_t>({KernelThreads(), by_work, n}));
  if (threads <= 1 || omp_in_parallel()) {
    fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num();
    const int64_t nt = omp_get_num_threads();
    const int64_t first = n * t / nt;
    const int64_t last = n * (t + 1) / nt;
    if (first < last) fn(first, last);
  }
}

}  // namespace tpx::cpu

#endif  // TPX_CORE_CPU_PARALLEL_H_
