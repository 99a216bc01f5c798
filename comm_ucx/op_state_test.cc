// OpState's blocking wait: with the spin phase off, every wait that does
// not find the operation done blocks on the futex, so these cover the
// hand-over between Complete() and a blocked (or about to block) waiter.
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "comm_ucx/communicator.h"
#include "gtest/gtest.h"

namespace tpx::ucx {
namespace {

// Before anything reads the tunables: no yield-polling before blocking.
[[maybe_unused]] const int kSpinOff = setenv("TPX_UCX_SPIN_US", "0", 1);

using std::chrono::milliseconds;

TEST(OpState, WaitReturnsFalseAtTheDeadline) {
  OpState op;
  const auto start = Clock::now();
  EXPECT_FALSE(op.WaitUntil(start + milliseconds(30), /*forever=*/false));
  EXPECT_GE(Clock::now() - start, milliseconds(30));
  EXPECT_FALSE(op.done());
}

TEST(OpState, WaitReturnsAtOnceWhenAlreadyDone) {
  OpState op;
  op.Complete(Status::Error(TPX_ERR_ABORTED, "gone"));
  EXPECT_TRUE(op.WaitUntil(Clock::now(), /*forever=*/false));
  EXPECT_EQ(op.status().code(), TPX_ERR_ABORTED);
  EXPECT_EQ(op.status().message(), "gone");
}

TEST(OpState, BlockedWaitersWakeOnComplete) {
  OpState op;
  std::atomic<int> woken{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.emplace_back([&, i] {
      // One waits without a deadline; the others with one far away.
      const bool forever = i == 0;
      if (op.WaitUntil(Clock::now() + milliseconds(20000), forever)) woken.fetch_add(1);
    });
  }
  std::this_thread::sleep_for(milliseconds(50));  // long enough for them to block
  EXPECT_EQ(woken.load(), 0);
  const auto completed = Clock::now();
  op.Complete(Status::Error(TPX_ERR_UNAVAILABLE, "peer left"));
  for (std::thread& t : waiters) t.join();
  EXPECT_EQ(woken.load(), 3);
  EXPECT_LT(Clock::now() - completed, milliseconds(5000)) << "a waiter slept past the wake-up";
  EXPECT_EQ(op.status().code(), TPX_ERR_UNAVAILABLE);
}

TEST(OpState, CompletionRacingTheWaiterIsNeverLost) {
  // Complete() lands at every point of the waiter's way into the futex:
  // no wake-up may be lost (a lost one shows as a wait that reaches its
  // deadline, 5 s away).
  for (int i = 0; i < 2000; ++i) {
    auto op = std::make_shared<OpState>();
    std::thread completer([op, i] {
      for (int spin = 0; spin < (i % 50) * 20; ++spin) __builtin_ia32_pause();
      op->Complete(Status());
    });
    const bool finished = op->WaitUntil(Clock::now() + milliseconds(5000), /*forever=*/false);
    completer.join();
    ASSERT_TRUE(finished) << "iteration " << i;
    ASSERT_TRUE(op->status().ok());
  }
}

}  // namespace
}  // namespace tpx::ucx
