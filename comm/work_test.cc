// Work's host and device waiting rules, on a scripted WorkImpl.
#include "comm/work.h"

#include <memory>

#include "gtest/gtest.h"

namespace tpx::comm {
namespace {

// An operation that finishes when the test says so.
class ScriptedOp : public WorkImpl {
 public:
  explicit ScriptedOp(bool on_device) : on_device_(on_device) {}

  bool Wait(absl::Duration timeout, absl::Status* status) override {
    ++polls;
    if (timeout != absl::ZeroDuration()) ++blocking_waits;
    if (!finished && timeout == absl::InfiniteDuration()) finished = true;  // "blocks" until done
    if (!finished) return false;
    *status = result;
    return true;
  }
  bool device_ordered() const override { return on_device_; }
  absl::Status WaitOnStream() override {
    ++stream_waits;
    return stream_wait_result;
  }

  bool finished = false;
  absl::Status result;
  absl::Status stream_wait_result;
  int polls = 0;
  int blocking_waits = 0;
  int stream_waits = 0;

 private:
  bool on_device_;
};

TEST(Work, HostOperationWaitBlocksUntilDone) {
  auto op = std::make_shared<ScriptedOp>(/*on_device=*/false);
  op->result = absl::UnavailableError("peer gone");
  Work w(op);
  EXPECT_EQ(w.Wait().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(op->blocking_waits, 1);
  EXPECT_EQ(op->stream_waits, 0);
  EXPECT_TRUE(w.IsCompleted());
}

TEST(Work, DeviceOperationWaitOrdersTheStreamWithoutBlocking) {
  auto op = std::make_shared<ScriptedOp>(/*on_device=*/true);
  Work w(op);
  EXPECT_TRUE(w.Wait().ok());
  EXPECT_EQ(op->stream_waits, 1);
  EXPECT_EQ(op->blocking_waits, 0);  // only a poll
  // The host still sees it running until the device finishes.
  EXPECT_FALSE(w.IsCompleted());
  EXPECT_EQ(w.Wait(absl::Milliseconds(1)).code(), absl::StatusCode::kDeadlineExceeded);
  op->finished = true;
  EXPECT_TRUE(w.IsCompleted());
  EXPECT_TRUE(w.Wait(absl::Milliseconds(1)).ok());
  // Once finished, Wait() is the plain status: no more stream waits.
  EXPECT_TRUE(w.Wait().ok());
  EXPECT_EQ(op->stream_waits, 1);
}

TEST(Work, DeviceOperationWaitReportsAKnownFailure) {
  auto op = std::make_shared<ScriptedOp>(/*on_device=*/true);
  op->finished = true;
  op->result = absl::DeadlineExceededError("nccl all_reduce timed out");
  Work w(op);
  absl::Status s = w.Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_EQ(op->stream_waits, 0);
}

TEST(Work, DeviceOperationWaitReportsAStreamWaitFailure) {
  auto op = std::make_shared<ScriptedOp>(/*on_device=*/true);
  op->stream_wait_result = absl::InternalError("cudaStreamWaitEvent failed");
  Work w(op);
  EXPECT_EQ(w.Wait().code(), absl::StatusCode::kInternal);
}

TEST(Work, FinishedWorkIsCompleted) {
  Work ok;
  EXPECT_TRUE(ok.IsCompleted());
  EXPECT_TRUE(ok.Wait().ok());
  Work failed(absl::InvalidArgumentError("bad"));
  EXPECT_EQ(failed.Wait(absl::ZeroDuration()).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpx::comm
