// Abort notices: how one rank's failure of a collective reaches every other
// rank of the communicator in microseconds instead of after the timeout.
//
// A rank sends a notice to every peer when
//  - a collective fails on it (size mismatch, dead peer, timeout, UCX error):
//    kFailed, sent once per communicator (it is failed from then on), or
//  - the host rejected a collective's arguments on this rank, so it will
//    never take part in it: kRejected for that sequence number.
// Notices travel on their own tag space over the communicator's endpoints;
// one receive is always posted for them. On arrival a notice for
//  - the collective this rank is running fails it with the notice's reason;
//  - a later collective is kept and fails that one as soon as it starts;
//  - an earlier collective (this rank's part already finished) fails the
//    communicator: the next operation reports it. A kRejected notice for a
//    collective this rank rejected too is dropped, so a call rejected on
//    every rank alike (the same bad arguments everywhere) keeps the
//    communicator usable.
// So a collective either succeeds on every rank or every rank learns of the
// failure: at once when it waits on the failed rank, else at its next call.
//
//   AbortNotices notices(rank, size);
//   notices.Start(worker);                     // posts the receive
//   notices.Broadcast(worker, eps, {kFailed, seq, public_seq, "size mismatch ..."});
//   Status s = notices.Check(worker, next_seq, /*in_collective=*/true);
#ifndef TPX_COMM_UCX_ABORT_NOTICES_H_
#define TPX_COMM_UCX_ABORT_NOTICES_H_

#include <ucp/api/ucp.h>

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "comm_ucx/status.h"

namespace tpx::ucx {

// Tag bit of notices; collective tags keep bits 40..61 for the sequence.
inline constexpr uint64_t kNoticeTagBit = 1ull << 62;

class AbortNotices {
 public:
  enum Kind : uint32_t { kFailed = 1, kRejected = 2 };
  struct Notice {
    Kind kind;
    int code;             // status code peers report (the failure's own code)
    uint64_t seq;         // the plugin's collective sequence number
    uint64_t public_seq;  // the host's number (#N in messages)
    std::string reason;
  };

  AbortNotices(int rank, int size) : rank_(rank), size_(size) {}
  AbortNotices(const AbortNotices&) = delete;
  AbortNotices& operator=(const AbortNotices&) = delete;

  // Posts the receive for notices; call once the worker exists.
  Status Start(ucp_worker_h worker);
  // Sends `notice` from this rank to every other rank (non-blocking).
  void Broadcast(const std::vector<ucp_ep_h>& eps, const Notice& notice);
  // Progresses the worker for up to `budget` until every notice send
  // completed (called before endpoints are force-closed).
  void Flush(ucp_worker_h worker, int64_t budget_us);
  // Cancels the receive and releases every request (before worker destroy).
  void Stop(ucp_worker_h worker);

  // Remembers that this rank rejected collective `seq`.
  void NoteRejected(uint64_t seq);
  // Drains arrived notices. `next_seq` is the number the next collective
  // will get; with `in_collective`, collective next_seq - 1 is running and a
  // notice for it returns its error. Notices for earlier collectives fail
  // the communicator (sticky: returned from every later call); notices for
  // later ones are kept for Take().
  Status Check(ucp_worker_h worker, uint64_t next_seq, bool in_collective);
  // A notice kept for collective `seq`, if any, as the error that fails it
  // at its start. `rejected_here`: this rank rejects `seq` itself.
  Status Take(uint64_t seq, bool rejected_here);

  // The failure learned from a peer's notice for an earlier collective.
  const Status& failed() const { return failed_; }

 private:
  // On the wire: fixed header then the reason (truncated to fit).
  struct Wire {
    uint32_t kind;
    int32_t from;
    int32_t code;
    int32_t reserved;
    uint64_t seq;
    uint64_t public_seq;
    char reason[480];
  };
  static Status AsError(const Wire& w);
  void PostReceive(ucp_worker_h worker);
  bool RejectedHere(uint64_t seq) const;
  void Handle(const Wire& w, uint64_t next_seq, bool in_collective, Status* running_error);

  int rank_, size_;
  Wire incoming_{};
  void* recv_request_ = nullptr;
  bool receiving_ = false;
  std::deque<Wire> outgoing_;  // buffers of sends in flight (stable addresses)
  std::vector<void*> send_requests_;
  std::map<uint64_t, Wire> later_;  // notices for collectives not yet started
  std::deque<uint64_t> rejected_;   // recent collectives this rank rejected
  Status failed_;
};

}  // namespace tpx::ucx

#endif  // TPX_COMM_UCX_ABORT_NOTICES_H_
