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
// The range is cut into kPiecesPerThread pieces per thread. Thread t owns
// the t-th run of them, in order, and takes them front to back; a thread
// done with its own run takes what is left of the others' from their
// backs. Equal shares alone left the faster thread waiting at the end of
// nearly every loop, since the two cores of a shared machine seldom run at
// the same speed (the GPT example at 2 threads: about 4% more tokens/s in
// bf16, 2% in f32, with pieces taken as the threads came free). Owning runs
// keeps a row on the core that wrote it in the loop before, as far as the
// speeds allow (the GEMMs' row splits also give thread t the t-th block):
// with pieces taken in any order, half the rows moved between the cores'
// caches at every loop. So fn may run several times on one thread, and which
// thread runs which piece varies: each item must be computed on its own, as
// every caller's is, for results not to depend on the thread count or the
// timing.
#ifndef TPX_CORE_CPU_PARALLEL_H_
#define TPX_CORE_CPU_PARALLEL_H_

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <utility>

#include "core/gemm.h"

namespace tpx::cpu {

inline constexpr int64_t kMinWorkPerThread = 16384;
inline constexpr int64_t kPiecesPerThread = 4;

inline int KernelThreads() { return GemmThreads(); }

// The pieces [0, pieces) of one ParallelFor split into `runs` runs of
// consecutive pieces, each claimed from its front (by its owner) or its
// back (by the others) exactly once.
class PieceRuns {
 public:
  static constexpr int kMaxRuns = 64;

  PieceRuns(int64_t pieces, int runs) {
    for (int r = 0; r < runs; ++r) {
      run_[r].bounds.store(Pack(pieces * r / runs, pieces * (r + 1) / runs),
                           std::memory_order_relaxed);
    }
  }

  // The first unclaimed piece of run r, or -1 when none is left.
  int64_t TakeFront(int r) {
    return Take(r, [](int64_t first, int64_t end) {
      return std::pair{first, Pack(first + 1, end)};
    });
  }
  // The last unclaimed piece of run r, or -1 when none is left.
  int64_t TakeBack(int r) {
    return Take(r, [](int64_t first, int64_t end) {
      return std::pair{end - 1, Pack(first, end - 1)};
    });
  }

 private:
  // A run's unclaimed pieces [first, end): first in the low 32 bits.
  static uint64_t Pack(int64_t first, int64_t end) {
    return static_cast<uint64_t>(first) | static_cast<uint64_t>(end) << 32;
  }
  template <typename Claim>
  int64_t Take(int r, Claim claim) {
    std::atomic<uint64_t>& bounds = run_[r].bounds;
    uint64_t word = bounds.load(std::memory_order_relaxed);
    while (true) {
      const auto first = static_cast<int64_t>(word & 0xffffffffu);
      const auto end = static_cast<int64_t>(word >> 32);
      if (first >= end) return -1;
      const auto [piece, next] = claim(first, end);
      if (bounds.compare_exchange_weak(word, next, std::memory_order_relaxed)) return piece;
    }
  }
  // A cache line per run: a thread claiming from its own run does not
  // take the line of the next one from its owner.
  struct alignas(64) Run {
    std::atomic<uint64_t> bounds;
  };
  Run run_[kMaxRuns];
};

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
  auto piece = [&](int64_t p) {
    const int64_t first = n * p / pieces;
    const int64_t last = n * (p + 1) / pieces;
    if (first < last) fn(first, last);
  };
  if (threads > PieceRuns::kMaxRuns) {
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t p = 0; p < pieces; ++p) piece(p);
    return;
  }
  PieceRuns runs(pieces, threads);
#pragma omp parallel num_threads(threads)
  {
    // Its own run first, then the others' (also those of threads the team
    // came without).
    const int t = omp_get_thread_num();
    for (int64_t p; (p = runs.TakeFront(t)) >= 0;) piece(p);
    for (int i = 1; i < threads; ++i) {
      for (int64_t p; (p = runs.TakeBack((t + i) % threads)) >= 0;) piece(p);
    }
  }
}

}  // namespace tpx::cpu

#endif  // TPX_CORE_CPU_PARALLEL_H_
