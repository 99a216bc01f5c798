// A UCX communicator: one worker with endpoints to every member, and posted
// operations run strictly in post order by whichever thread holds the
// communicator's drive lock:
//  - the thread that waits for an operation runs it itself when nobody else
//    is (no thread hand-off on the latency path), and
//  - an executor thread picks up operations nobody waits for after a short
//    grace period, so communication progresses while the caller computes.
// Send/recv overlap with later operations (an exchange of large messages
// cannot deadlock), but every operation completes in post order.
//
//   std::unique_ptr<Communicator> comm;
//   Status s = Communicator::Create(config, &comm);
//   auto op = std::make_shared<OpState>();
//   comm->Post(args, op);
//   bool finished = comm->Wait(*op, /*timeout_ms=*/-1);
//
// After any operation fails the communicator is failed: later operations
// fail at once with the first error. Destruction never waits on peers longer
// than a bounded flush.
#ifndef TPX_COMM_UCX_COMMUNICATOR_H_
#define TPX_COMM_UCX_COMMUNICATOR_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "comm/plugin_abi.h"
#include "comm_ucx/collectives.h"
#include "comm_ucx/fifo.h"
#include "comm_ucx/p2p.h"
#include "comm_ucx/status.h"
#include "comm_ucx/ucx_worker.h"

namespace tpx::ucx {

// Completion state of one posted operation; shared by the communicator and
// the request handle so that either may go first. Thread-safe.
// A blocked waiter sleeps on the done word itself (a futex): one is posted
// per operation, and a mutex and condition variable would cost every
// operation their set-up and tear-down for the rare waiter that blocks.
class OpState {
 public:
  bool done() const { return done_.load(std::memory_order_acquire) != 0; }
  // Valid once done().
  const Status& status() const { return status_; }
  void Complete(Status status);
  // Yields briefly, then blocks until done or `deadline`; false at the deadline.
  bool WaitUntil(Clock::time_point deadline, bool forever);

 private:
  std::atomic<uint32_t> done_{0};  // 1 once complete; the futex word
  Status status_;
  std::atomic<int> sleepers_{0};  // threads blocked (or about to) on done_
};

class Communicator {
 public:
  static Status Create(const tpx_comm_config_v1_t& config, std::unique_ptr<Communicator>* out);
  // Stops the executor; operations not yet finished fail with ABORTED.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Queues an operation (the host has validated `args`), which completes
  // `state`. The caller allocates the state, so that a request handle can
  // hold it in the same allocation.
  void Post(const tpx_coll_args_v1_t& args, std::shared_ptr<OpState> state);
  // Queues the collective `args` describes as rejected on this rank: it
  // takes its place in the sequence, and the peers' matching operation fails
  // with `reason` (abort_notices.h).
  void Reject(const tpx_coll_args_v1_t& args, std::string reason);
  // Waits for `op` up to `timeout_ms` (negative: no limit), running queued
  // operations on this thread when no other thread is. False if unfinished.
  bool Wait(OpState& op, int64_t timeout_ms);

 private:
  struct Queued {
    CollArgs args;
    std::shared_ptr<OpState> state;
    std::string rejected;  // non-empty: rejected on this rank, for this reason
  };
  // An operation that has started but whose completion is not yet reported
  // (send/recv still in flight, or an earlier one still is).
  struct InFlight {
    std::unique_ptr<OpIo> io;  // null once finished
    std::shared_ptr<OpState> state;
    Status result;
  };

  Communicator(const tpx_comm_config_v1_t& config, std::unique_ptr<Worker> worker);
  void ExecutorLoop();
  bool HasWork() const {
    return queued_.load(std::memory_order_acquire) > 0 ||
           in_flight_count_.load(std::memory_order_acquire) > 0 ||
           running_.load(std::memory_order_acquire) > 0;
  }
  // A few rounds of worker progress when nothing runs and nobody drives;
  // true if anything happened. A rank whose operations completed may still
  // owe its peers protocol messages (a rendezvous receive's acknowledgement
  // that found no room to go out at once); a peer's send waits for them,
  // so they must leave even while this rank's threads do something else.
  bool ProgressIdle();
  // False when every CPU this process may use has a runnable task besides
  // the calling thread (core/host_load.h); true when that cannot be read.
  static bool HostHasIdleCpu();
  // With drive_mu_ held: runs queued ops and progresses in-flight ones until
  // `target` is done (or, for null, until no work is left or stop).
  void Drive(const OpState* target);
  bool PopQueued(Queued* out);
  void Execute(Queued& op);
  // Completes `op` with `status` in post order.
  void Finish(Queued& op, Status status);
  // Tests in-flight operations and reports finished ones in order; true if
  // any finished.
  bool PollInFlight();
  void NoteFailure(const Status& status);

  std::string name_;
  int64_t timeout_ms_;
  std::unique_ptr<Worker> worker_;

  // Guards queue_ and stop_; cv_ wakes the executor.
  std::mutex mu_;
  std::condition_variable cv_;
  Fifo<Queued> queue_;
  std::atomic<size_t> queued_{0};
  bool stop_ = false;
  bool executor_sleeping_ = false;
  std::atomic<bool> stopping_{false};
  // The executor waits on cv_ while a waiting thread drives (watching) until
  // that thread leaves work behind (watch_ended_); both guarded by mu_.
  bool executor_watching_ = false;
  bool watch_ended_ = false;
  // Set by a thread that waits for an operation while it holds drive_mu_.
  std::atomic<bool> waiter_drives_{false};

  // Whoever holds drive_mu_ owns the worker and the state below.
  std::mutex drive_mu_;
  std::deque<InFlight> in_flight_;
  std::atomic<size_t> in_flight_count_{0};
  // Operations being executed (popped from the queue, not yet finished), and
  // when the latest one started (steady clock ticks): the executor keeps
  // progressing the worker for a quiet spell after activity.
  std::atomic<size_t> running_{0};
  std::atomic<int64_t> last_start_{0};
  Status failed_;
  Scratch scratch_;
  uint64_t coll_seq_ = 0;
  uint64_t p2p_seq_ = 0;

  std::thread executor_;
};

}  // namespace tpx::ucx

#endif  // TPX_COMM_UCX_COMMUNICATOR_H_
