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
//
// The range is cut into kPiecesPerThread pieces per thread, which the
// threads take as they come free: equal halves left the faster thread
// waiting at the end of nearly every loop, since the two cores of a shared
// machine seldom run at the same speed (the GPT example at 2 threads: about
// 4% more tokens/s in bf16, 2% in f32). So fn may run several times on one
// thread, and which thread runs which piece varies: each item must be
// computed on its own, as every caller's is, for results not to depend on
// the thread count or the timing.
#ifndef TPX_CORE_CPU_PARALLEL_H_
#define TPX_CORE_CPU_PARALLEL_H_

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "core/gemm.h"

namespace tpx::cpu {

inline constexpr int64_t kMinWorkPerThread = 16384;
inline constexpr int64_t kPiecesPerThread = 4;

inline int KernelThreads() { return GemmThreads(); }

// Calls fn(first, last) on disjoint ranges covering [0, n), possibly from
// several threads at once and several times per thread; cost_per_item is
// the elements each item touches.
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
  const int64_t pieces = std::min<int64_t>(n, int64_t{threads} * kPiecesPerThread);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t first = n * p / pieces;
    const int64_t last = n * (p + 1) / pieces;
    if (first < last) fn(first, last);
  }
}

}  // namespace tpx::cpu

#endif  // TPX_CORE_CPU_PARALLEL_H_
