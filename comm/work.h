// Work: the handle every communication call returns. The operation runs in
// the background; Wait() blocks until it finishes and returns its status.
//
//   Work w = comm.AllReduce(buf, n, DType::kF32, ReduceOp::kSum);
//   ... overlap other work ...
//   TPX_RETURN_IF_ERROR(w.Wait());
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
};

class Work {
 public:
  // An operation that already finished with `status` (e.g. rejected input).
  explicit Work(absl::Status status = absl::OkStatus());
  explicit Work(std::shared_ptr<WorkImpl> impl);

  // Blocks until the operation finishes; its status. Backends bound every
  // operation by the communicator's timeout, so this does not hang forever.
  absl::Status Wait();
  // Blocks at most `timeout`. DeadlineExceeded ("still running") if not
  // finished; the operation continues and may be waited on again.
  absl::Status Wait(absl::Duration timeout);
  // Non-blocking.
  bool IsCompleted();

 private:
  struct State {
    std::mutex mu;  // not absl::Mutex: visible to ThreadSanitizer
    std::shared_ptr<WorkImpl> impl;
    bool done = false;
    absl::Status status;
  };
  absl::Status WaitFor(absl::Duration timeout, bool* done);
  std::shared_ptr<State> state_;
};

}  // namespace tpx::comm

#endif  // TPX_COMM_WORK_H_
