// Splitting one of tpx's own GEMM kernels' calls (core/small_gemm.h,
// core/few_rows_gemm.h) over the GEMM threads (GemmThreads(), core/gemm.h).
// Internal to //core:gemm.
//
//   SplitWorkItems(items, /*worth_splitting=*/macs >= kMinSplitMacs,
//                  [&](int64_t first, int64_t last) { ... items [first, last) ... });
//
// Thread t of nt takes the t-th of nt equal runs of the items, in order, and
// each item is computed by the same code on any thread, so results do not
// depend on the thread count. Inside a parallel region, or when the call is
// too small for a team's start to pay, the calling thread runs them all.
#ifndef TPX_CORE_GEMM_WORK_SPLIT_H_
#define TPX_CORE_GEMM_WORK_SPLIT_H_

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "core/gemm.h"

namespace tpx {

template <typename RunFn>
void SplitWorkItems(int64_t items, bool worth_splitting, RunFn run) {
  const int threads = !worth_splitting || omp_in_parallel()
                          ? 1
                          : static_cast<int>(std::min<int64_t>(GemmThreads(), items));
  if (threads <= 1) {
    run(int64_t{0}, items);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    run(items * t / nt, items * (t + 1) / nt);
  }
}

}  // namespace tpx

#endif  // TPX_CORE_GEMM_WORK_SPLIT_H_
