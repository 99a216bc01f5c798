// ParallelFor covers its range exactly once at every thread count, and
// PieceRuns hands out every piece exactly once while threads claim from
// the fronts and backs of the runs at the same time.
#include "core/cpu/parallel.h"

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/gemm.h"
#include "gtest/gtest.h"

namespace tpx::cpu {
namespace {

class ParallelForTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    saved_ = GemmThreads();
    SetGemmThreads(GetParam());
  }
  void TearDown() override { SetGemmThreads(saved_); }
  int saved_ = 1;
};

INSTANTIATE_TEST_SUITE_P(Threads, ParallelForTest, ::testing::Values(1, 2, 3, 4));

TEST_P(ParallelForTest, CoversEveryItemOnce) {
  // Sizes below one thread's minimum work, with fewer items than pieces,
  // and uneven splits.
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{9}, int64_t{1000}, int64_t{4099}}) {
    for (const int64_t cost : {int64_t{1}, int64_t{100000}}) {
      std::vector<std::atomic<int>> seen(n);
      std::atomic<int> calls{0};
      ParallelFor(n, cost, [&](int64_t first, int64_t last) {
        ASSERT_LT(first, last);
        calls.fetch_add(1);
        for (int64_t i = first; i < last; ++i) seen[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i].load(), 1) << "n " << n << " item " << i;
      EXPECT_LE(calls.load(), std::max(1, GetParam()) * kPiecesPerThread);
    }
  }
}

TEST_P(ParallelForTest, RunsInlineInsideAParallelRegion) {
  std::atomic<int64_t> total{0};
#pragma omp parallel num_threads(2)
  {
    ParallelFor(1000, 100000, [&](int64_t first, int64_t last) { total.fetch_add(last - first); });
  }
  EXPECT_EQ(total.load(), 2000);
}

TEST(PieceRunsTest, EveryPieceOnceUnderContention) {
  // Threads more than runs, so that every run is claimed from both ends
  // at once; many rounds, so that the claims interleave.
  for (int round = 0; round < 200; ++round) {
    const int64_t pieces = 5 + round % 60;
    const int runs = 1 + round % 4;
    PieceRuns piece_runs(pieces, runs);
    std::vector<std::atomic<int>> taken(pieces);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        const int own = t % runs;
        for (int64_t p; (p = piece_runs.TakeFront(own)) >= 0;) taken[p].fetch_add(1);
        for (int i = 1; i <= runs; ++i) {
          for (int64_t p; (p = piece_runs.TakeBack((own + i) % runs)) >= 0;) taken[p].fetch_add(1);
        }
      });
    }
    for (std::thread& th : threads) th.join();
    for (int64_t p = 0; p < pieces; ++p) {
      ASSERT_EQ(taken[p].load(), 1) << "round " << round << " piece " << p;
    }
  }
}

TEST(PieceRunsTest, OwnersTakeTheirRunsInOrder) {
  PieceRuns piece_runs(10, 2);  // runs [0, 5) and [5, 10)
  EXPECT_EQ(piece_runs.TakeFront(0), 0);
  EXPECT_EQ(piece_runs.TakeFront(1), 5);
  EXPECT_EQ(piece_runs.TakeBack(1), 9);
  EXPECT_EQ(piece_runs.TakeFront(1), 6);
  EXPECT_EQ(piece_runs.TakeBack(1), 8);
  EXPECT_EQ(piece_runs.TakeFront(1), 7);
  EXPECT_EQ(piece_runs.TakeFront(1), -1);
  EXPECT_EQ(piece_runs.TakeBack(1), -1);
  EXPECT_EQ(piece_runs.TakeFront(0), 1);
}

}  // namespace
}  // namespace tpx::cpu
