// Work: the handle every communication call returns. The operation runs in
// the background; Wait() returns once it is safe to use its results and
// gives its status.
//
//   Work w = comm.AllReduce(buf, n, DType::kF32, ReduceOp::kSum);
//   ... overlap other work ...
//   TPX_RETURN_IF_ERROR(w.Wait());
//
// Host operations (CPU tensors, raw pointers): Wait() blocks the host until
// the operation finished.
// Device operations (CUDA tensors on a device backend, comm/communicator.h):
// Wait() does not block the host; it makes the tensors' device's current
// stream wait for the operation, so kernels queued afterwards see its result.
// It returns an error already known (a failed or aborted operation) and OK
// otherwise; a failure found later (a peer died, the timeout passed) aborts
// the communicator, fails every pending operation and every later call, and
// is reported by Wait(timeout) (after IsCompleted() turns true, at once) or
// by the next operation. Wait(timeout) and IsCompleted() always look at the host: they
// poll whether the operation finished on the device.
//
// Operations on one communicator complete in the order they were issued.
// Work is a cheap shared handle: copies refer to the same operation.
// Thread-safe.
#ifndef TPX_COMM_WORK_H_
#define TPX_COMM_WORK_H_

#include <memory>
#include <mutex>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tpx::comm {

// What a backend implements behind a Work handle.
class WorkImpl {
 public:
  virtual ~WorkImpl() = default;
  // Blocks up to `timeout` (InfiniteDuration: until done). Returns whether the
  // operation finished; if so sets *status to its result.
  virtual bool Wait(absl::Duration timeout, absl::Status* status) = 0;
  // True for device operations: Work::Wait() then calls WaitOnStream().
  virtual bool device_ordered() const { return false; }
  // Makes the device's current stream wait for the operation; no host block.
  virtual absl::Status WaitOnStream() { return absl::OkStatus(); }
};

class Work {
 public:
  // An operation that already finished with `status` (e.g. rejected input).
  explicit Work(absl::Status status = absl::OkStatus());
  explicit Work(std::shared_ptr<WorkImpl> impl);

  // Host operations: blocks until the operation finishes; its status.
  // Backends bound every operation by the communicator's timeout, so this
  // does not hang forever. Device operations: orders the current stream
  // after the operation without blocking (see the top of this file).
  absl::Status Wait();
  // Blocks the host at most `timeout`. DeadlineExceeded ("still running") if
  // not finished; the operation continues and may be waited on again.
  absl::Status Wait(absl::Duration timeout);
  // Non-blocking: whether the operation finished (on the device too).
  bool IsCompleted();

 private:
  struct State {
    std::mutex mu;  // not absl::Mutex: visible to ThreadSanitizer
    std::shared_ptr<WorkImpl> impl;
    bool done = false;
    absl::Status status;
  };
  // Polls or blocks up to `timeout`; state_->mu held.
  void WaitLocked(absl::Duration timeout);
  absl::Status WaitFor(absl::Duration timeout, bool* done);
  std::shared_ptr<State> state_;
};

}  // namespace tpx::comm

#endif  // TPX_COMM_WORK_H_
