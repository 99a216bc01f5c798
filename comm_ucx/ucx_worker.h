// One UCX worker with endpoints to every rank of a communicator, plus the
// process-wide UCP context they share.
//
//   std::unique_ptr<Worker> w;
//   Status s = Worker::Create(config, &w);   // exchanges addresses via the store
//   ucp_ep_h ep = w->endpoint(peer);
//   while (!done) { if (!w->Progress()) backoff.Idle(*w); }
//
// A Worker is used by one thread at a time (whichever holds the owning
// communicator's drive lock); endpoint error callbacks run inside Progress()
// and record the failed peer.
//
// Peer failure detection: UCX 1.13's shared-memory transports cannot run in
// UCP_ERR_HANDLING_MODE_PEER (UCX would fall back to TCP, several times
// slower). So endpoints to ranks on this host use no UCX error handling and
// the worker watches those processes itself (/proc/<pid>/stat), while
// endpoints to other hosts use peer error handling with error callbacks.
// TPX_UCX_PEER_ERR_MODE=1 forces peer error handling everywhere.
// "This host" means the same hostname, boot id and network namespace; when
// every rank of a communicator is local, the worker also sets up the
// communicator's shared-memory segment (shm_segment.h).
#ifndef TPX_COMM_UCX_UCX_WORKER_H_
#define TPX_COMM_UCX_UCX_WORKER_H_

#include <time.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/plugin_abi.h"
#include "comm_ucx/abort_notices.h"
#include "comm_ucx/shm_segment.h"
#include "comm_ucx/status.h"

namespace tpx::ucx {

using Clock = std::chrono::steady_clock;

// Clock::now() at the kernel tick's resolution (at most a tick behind): the
// tick count is read without asking the clock source, a fraction of the
// cost. For per-operation timestamps that only feed timeouts of seconds and
// the executor's quiet spell.
inline Clock::time_point CoarseNow() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);  // steady_clock's clock, coarse
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(
      std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
}

// How far CoarseNow() may be behind Clock::now(): its tick.
inline Clock::duration CoarseTick() {
  static const Clock::duration tick = [] {
    timespec res{};
    clock_getres(CLOCK_MONOTONIC_COARSE, &res);
    return std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(res.tv_sec) +
                                                       std::chrono::nanoseconds(res.tv_nsec));
  }();
  return tick;
}

// The process-wide UCP context, created on first use with this plugin's
// defaults for settings the user did not set in the environment.
Status GetContext(ucp_context_h* out);

class Worker {
 public:
  // Creates a worker, publishes its address under `<name>/ucx/addr/<rank>`,
  // reads every peer's address and connects endpoints (peer error mode).
  static Status Create(const tpx_comm_config_v1_t& config, std::unique_ptr<Worker>* out);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  ucp_worker_h handle() const { return worker_; }
  ucp_ep_h endpoint(int peer) const { return eps_[peer]; }
  // The shared-memory segment when every rank runs on this host (and could
  // map it), else null.
  SharedSegment* shm() const { return shm_.get(); }

  // Runs one round of UCX progress; true if anything happened.
  bool Progress() { return ucp_worker_progress(worker_) != 0; }
  // Sleeps until UCX has events or `max_sleep` passed (whichever first).
  void Sleep(std::chrono::microseconds max_sleep);

  // How long a wait busy-polls before it yields (Backoff), adapted to how
  // waits end: doubled (up to TPX_UCX_SPIN_US) after a wait that ended
  // while polling, halved (down to 1 us) after one that ended only once
  // this rank yielded, as when the peer shares this core and cannot run
  // while this rank spins (a busy 2-core host).
  int64_t spin_us() const { return spin_us_; }
  void NoteWaitEnded(bool while_polling);

  // Peer failures reported by UCX: a counter that changes on each new one,
  // and the status per peer (UCS_OK while healthy).
  int failure_count() const { return failure_count_.load(std::memory_order_acquire); }
  ucs_status_t peer_status(int peer) const { return peer_status_[peer]; }
  // Why `peer` is considered failed ("" while healthy).
  const std::string& peer_failure(int peer) const { return peer_failure_[peer]; }
  // Checks (at most every few ms) whether local peer processes still exist.
  void CheckLocalPeers();

  // Abort notices (abort_notices.h). The communicator says which collective
  // runs; CheckNotices() applies what peers announced to it.
  void SetCollective(uint64_t next_seq, bool in_collective) {
    next_collective_ = next_seq;
    in_collective_ = in_collective;
  }
  Status CheckNotices() {
    return notices_.Check(worker_, next_collective_, in_collective_);
  }
  AbortNotices& notices() { return notices_; }
  // Tells every peer that this rank failed (once per worker): collective
  // `seq` if given, else the communicator as a whole (a send/recv).
  void AnnounceFailure(int code, const std::string& why, const uint64_t* seq,
                       uint64_t public_seq);
  // Tells every peer that this rank will not take part in collective `seq`.
  void AnnounceRejected(const std::string& why, uint64_t seq, uint64_t public_seq);

  // Closes every endpoint, flushing pending sends to healthy peers until
  // `deadline` unless `force` (which also completes in-flight sends with an
  // error, releasing their buffers).
  void CloseEndpoints(Clock::time_point deadline, bool force);
  bool closed() const { return closed_; }

 private:
  struct ErrArg {
    Worker* worker;
    int peer;
  };
  // Identity of a rank's process, published with its UCX address.
  struct PeerProcess {
    bool local = false;
    int pid = 0;
    uint64_t start_time = 0;
  };
  Worker(int rank, int size);
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  void MarkFailed(int peer, ucs_status_t status, std::string why);

  int rank_;
  int size_;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  bool closed_ = false;
  std::vector<ucp_ep_h> eps_;
  std::vector<ErrArg> err_args_;
  std::vector<ucs_status_t> peer_status_;
  std::vector<std::string> peer_failure_;
  std::vector<PeerProcess> peers_;
  Clock::time_point next_liveness_check_{};
  std::atomic<int> failure_count_{0};
  AbortNotices notices_;
  uint64_t next_collective_ = 0;
  bool in_collective_ = false;
  bool failure_announced_ = false;
  int64_t spin_us_;
  std::unique_ptr<SharedSegment> shm_;
};

// Adaptive waiting while an operation waits for peers: busy-polls first
// (for worker.spin_us(): a cross-process wake-up costs tens of
// microseconds), then yields the CPU, then sleeps on the worker's event fd
// in short slices. Reset() after progress was made.
class Backoff {
 public:
  void Reset() {
    idle_since_valid_ = false;
    yielding_ = false;
  }
  void Idle(Worker& worker);
  // True while still busy-polling (before the first yield).
  bool spinning() const { return !yielding_; }

 private:
  bool idle_since_valid_ = false;
  Clock::time_point idle_since_;
  int spins_ = 0;
  bool yielding_ = false;
};

}  // namespace tpx::ucx

#endif  // TPX_COMM_UCX_UCX_WORKER_H_
