#include "comm/work.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tpx::comm {

Work::Work(absl::Status status) : state_(std::make_shared<State>()) {
  state_->done = true;
  state_->status = std::move(status);
}

Work::Work(std::shared_ptr<WorkImpl> impl) : state_(std::make_shared<State>()) {
  state_->impl = std::move(impl);
}

void Work::WaitLocked(absl::Duration timeout) {
  if (state_->done) return;
  absl::Status status;
  if (state_->impl->Wait(timeout, &status)) {
    state_->done = true;
    state_->status = std::move(status);
    state_->impl.reset();  // frees the backend request early
  }
}

absl::Status Work::WaitFor(absl::Duration timeout, bool* done) {
  // Waiters are serialised so the backend sees one waiter per request.
  std::lock_guard<std::mutex> lock(state_->mu);
  WaitLocked(timeout);
  *done = state_->done;
  return state_->status;
}

absl::Status Work::Wait() {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->done && state_->impl->device_ordered()) {
    // One poll reports a failure that is already known; otherwise the
    // stream waits and the host goes on.
    WaitLocked(absl::ZeroDuration());
    if (state_->done) return state_->status;
    return state_->impl->WaitOnStream();
  }
  // A backend's unbounded wait always finishes (it bounds every operation
  // by the communicator's timeout).
  WaitLocked(absl::InfiniteDuration());
  return state_->status;
}

absl::Status Work::Wait(absl::Duration timeout) {
  bool done = false;
  absl::Status status = WaitFor(timeout, &done);
  if (!done) {
    return absl::DeadlineExceededError(absl::StrCat(
        "operation still running after waiting ", absl::FormatDuration(timeout)));
  }
  return status;
}

bool Work::IsCompleted() {
  // Another thread blocked in Wait() holds the lock: the operation is then
  // still running (or just finishing), so "not yet" is a correct answer.
  if (!state_->mu.try_lock()) return false;
  bool done = state_->done;
  state_->mu.unlock();
  if (done) return true;
  WaitFor(absl::ZeroDuration(), &done).IgnoreError();
  return done;
}

}  // namespace tpx::comm
