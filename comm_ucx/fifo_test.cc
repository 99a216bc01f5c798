#include "comm_ucx/fifo.h"

#include <memory>

#include "gtest/gtest.h"

namespace tpx::ucx {
namespace {

TEST(Fifo, PopsInPushOrderAcrossClearsAndCompactions) {
  Fifo<std::unique_ptr<int>> q;
  int pushed = 0, popped = 0;
  // Runs of pushes and pops of varying lengths: the queue empties (and
  // clears) at times and stays non-empty past the compaction point at
  // others.
  for (int round = 0; round < 200; ++round) {
    const int push = 1 + (round * 7) % 150, pop = 1 + (round * 5) % 140;
    for (int i = 0; i < push; ++i) q.push_back(std::make_unique<int>(pushed++));
    for (int i = 0; i < pop && !q.empty(); ++i) {
      std::unique_ptr<int> item = std::move(q.front());
      q.pop_front();
      ASSERT_NE(item, nullptr);
      ASSERT_EQ(*item, popped++);
    }
    ASSERT_EQ(q.size(), static_cast<size_t>(pushed - popped));
  }
  int left = popped;
  for (std::unique_ptr<int>& item : q) EXPECT_EQ(*item, left++);
  EXPECT_EQ(left, pushed);
  q.clear();
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.begin(), q.end());
}

}  // namespace
}  // namespace tpx::ucx
