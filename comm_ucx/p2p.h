// Tagged point-to-point messages of one operation, with deadline and peer
// failure handling. Every collective algorithm talks through an OpIo.
//
//   OpIo io(worker, scratch, "all_reduce", seq, deadline);
//   size_t r = io.Recv(left, Sub(kPhaseRs, step, c), tmp, bytes);
//   io.Send(right, Sub(kPhaseRs, step, c), data, bytes);
//   TPX_PLUGIN_RETURN_IF_ERROR(io.Wait(r));
//   TPX_PLUGIN_RETURN_IF_ERROR(io.WaitAll());
//
// Tags: bit 63 = user send/recv; bit 62 = abort notices (abort_notices.h);
// otherwise bits 40..61 the collective's sequence number, 16..39 a sub-id
// (phase, step, chunk) and 0..15 the source rank, so that early messages of
// a later collective never match this one.
// Every receive checks the length that arrived against the length posted: a
// peer that disagrees on a size is an error, never a half-filled buffer.
// On failure (size mismatch, timeout, dead peer, UCX error, a peer's abort
// notice) the remaining requests are cancelled, the peers are notified, and
// the error names the operation and the peers still pending.
#ifndef TPX_COMM_UCX_P2P_H_
#define TPX_COMM_UCX_P2P_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm_ucx/status.h"
#include "comm_ucx/ucx_worker.h"

namespace tpx::ucx {

// `a` modulo the world size `n`, in [0, n): rank arithmetic on a ring.
inline int RankMod(int a, int n) { return ((a % n) + n) % n; }

// Sub-id of a message within one collective: 2 bits phase, 22 bits index.
inline uint32_t Sub(uint32_t phase, uint64_t index) {
  return (phase << 22) | static_cast<uint32_t>(index & ((1u << 22) - 1));
}

// Staging buffers reused across the operations of one communicator, so
// that large collectives do not pay for fresh pages on every call.
class Scratch {
 public:
  enum Slot { kTmp = 0, kAcc = 1, kOut = 2, kNumSlots = 3 };
  // At least `bytes` of uninitialised memory, stable until the next Get of
  // the same slot.
  char* Get(Slot slot, size_t bytes);

 private:
  std::unique_ptr<char[]> buffers_[kNumSlots];
  size_t sizes_[kNumSlots] = {};
};

class OpIo {
 public:
  // `seq` scopes the collective tags (send/recv: the user tag space);
  // `public_seq` is the host's number of the collective, for messages;
  // `deadline` bounds every wait.
  // `op_name` is a string literal (CollName).
  OpIo(Worker& worker, Scratch& scratch, const char* op_name, uint64_t seq, uint64_t public_seq,
       bool collective, Clock::time_point deadline);
  ~OpIo();
  OpIo(const OpIo&) = delete;
  OpIo& operator=(const OpIo&) = delete;

  int rank() const { return worker_.rank(); }
  int size() const { return worker_.size(); }
  char* scratch(Scratch::Slot slot, size_t bytes) { return scratch_.Get(slot, bytes); }
  // The communicator's collective number (tag scope) and its shared-memory
  // segment (null unless every rank is on this host).
  uint64_t seq() const { return seq_; }
  SharedSegment* shm() const { return worker_.shm(); }

  // Start a message; the returned index is passed to Wait.
  size_t Send(int peer, uint32_t sub, const void* buf, size_t bytes);
  size_t Recv(int peer, uint32_t sub, void* buf, size_t bytes);
  // The user send/recv tag space.
  size_t SendTagged(int peer, int32_t tag, const void* buf, size_t bytes);
  size_t RecvTagged(int peer, int32_t tag, void* buf, size_t bytes);

  Status Wait(size_t index);
  Status WaitAll();
  // Non-blocking: one round of progress; *done once every message completed.
  Status Test(bool* done);

  // Shared-memory operations (shm_collectives.h): waits until every peer's
  // stage on the segment reached `stage`, checking peers' notices, dead
  // peers and the deadline as Wait() does.
  Status WaitStage(uint64_t stage);
  // Fails the operation (peers are told) with `why`.
  Status Fail(int code, const std::string& why);

 private:
  struct Pending {
    void* request;  // nullptr once complete
    int peer;
    bool is_recv;
    size_t bytes;
  };
  size_t Start(int peer, uint64_t tag, const void* buf, size_t bytes, bool is_recv);
  uint64_t CollTag(uint32_t sub, int src) const;
  Status CheckHealth();
  // Error unless a receive from `peer` delivered exactly `bytes`.
  Status CheckLength(const Pending& p, ucs_status_t status, size_t received);
  // Whether rank `peer` still has to reach what this operation waits for:
  // an incomplete request, or a shared-memory stage.
  bool Awaited(int peer) const;
  // Cancels and releases every incomplete request (bounded wait).
  void Abandon();

  Worker& worker_;
  Scratch& scratch_;
  const char* op_name_;
  uint64_t seq_;
  uint64_t public_seq_;
  bool collective_;
  Clock::time_point deadline_;
  std::vector<Pending> pending_;
  size_t first_incomplete_ = 0;
  uint64_t awaited_stage_ = 0;  // WaitStage's target while it waits
  Status error_;
};

}  // namespace tpx::ucx

#endif  // TPX_COMM_UCX_P2P_H_
