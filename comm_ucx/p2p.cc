#include "comm_ucx/p2p.h"

#include "comm_ucx/tunables.h"

#include <sched.h>

#include <algorithm>
#include <set>

namespace tpx::ucx {
namespace {

constexpr uint64_t kUserTagBit = 1ull << 63;
constexpr uint64_t kFullMask = ~0ull;

void SendDone(void*, ucs_status_t, void*) {}
void RecvDone(void*, ucs_status_t, const ucp_tag_recv_info_t*, void*) {}

std::string RankList(const std::set<int>& ranks) {
  std::string out = "[";
  for (int r : ranks) out += (out.size() > 1 ? ", " : "") + std::to_string(r);
  return out + "]";
}

}  // namespace

char* Scratch::Get(Slot slot, size_t bytes) {
  if (sizes_[slot] < bytes) {
    buffers_[slot].reset();
    buffers_[slot].reset(new char[bytes]);
    sizes_[slot] = bytes;
  }
  return buffers_[slot].get();
}

OpIo::OpIo(Worker& worker, Scratch& scratch, const char* op_name, uint64_t seq,
           uint64_t public_seq, bool collective, Clock::time_point deadline)
    : worker_(worker),
      scratch_(scratch),
      op_name_(op_name),
      seq_(seq),
      public_seq_(public_seq),
      collective_(collective),
      deadline_(deadline) {}

OpIo::~OpIo() { Abandon(); }

uint64_t OpIo::CollTag(uint32_t sub, int src) const {
  return ((seq_ & ((1ull << 22) - 1)) << 40) | (static_cast<uint64_t>(sub & 0xFFFFFF) << 16) |
         static_cast<uint64_t>(src & 0xFFFF);
}

size_t OpIo::Send(int peer, uint32_t sub, const void* buf, size_t bytes) {
  return Start(peer, CollTag(sub, rank()), buf, bytes, false);
}
size_t OpIo::Recv(int peer, uint32_t sub, void* buf, size_t bytes) {
  return Start(peer, CollTag(sub, peer), buf, bytes, true);
}
size_t OpIo::SendTagged(int peer, int32_t tag, const void* buf, size_t bytes) {
  uint64_t t = kUserTagBit | (static_cast<uint64_t>(static_cast<uint32_t>(tag)) << 16) |
               static_cast<uint64_t>(rank() & 0xFFFF);
  return Start(peer, t, buf, bytes, false);
}
size_t OpIo::RecvTagged(int peer, int32_t tag, void* buf, size_t bytes) {
  uint64_t t = kUserTagBit | (static_cast<uint64_t>(static_cast<uint32_t>(tag)) << 16) |
               static_cast<uint64_t>(peer & 0xFFFF);
  return Start(peer, t, buf, bytes, true);
}

size_t OpIo::Start(int peer, uint64_t tag, const void* buf, size_t bytes, bool is_recv) {
  size_t index = pending_.size();
  if (index == 0) pending_.reserve(8);  // not in the constructor: shared-memory ops send nothing
  pending_.push_back(Pending{nullptr, peer, is_recv, bytes});
  if (!error_.ok()) return index;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
  void* req;
  if (is_recv) {
    param.cb.recv = &RecvDone;
    // Always a request, so that Wait() can read the length that arrived.
    if (GetTunables().check_lengths) param.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    req = ucp_tag_recv_nbx(worker_.handle(), const_cast<void*>(buf), bytes, tag, kFullMask, &param);
  } else {
    param.cb.send = &SendDone;
    req = ucp_tag_send_nbx(worker_.endpoint(peer), buf, bytes, tag, &param);
  }
  if (UCS_PTR_IS_ERR(req)) {
    Fail(TPX_ERR_UNAVAILABLE, std::string(is_recv ? "receiving from" : "sending to") + " rank " +
                                  std::to_string(peer) + " failed: " +
                                  ucs_status_string(UCS_PTR_STATUS(req)));
  } else {
    pending_[index].request = req;
  }
  return index;
}

Status OpIo::CheckLength(const Pending& p, ucs_status_t status, size_t received) {
  if (status == UCS_ERR_MESSAGE_TRUNCATED) {
    return Status::Error(TPX_ERR_FAILED_PRECONDITION,
                         "size mismatch: rank " + std::to_string(p.peer) + " sent more than the " +
                             std::to_string(p.bytes) + " bytes rank " + std::to_string(rank()) +
                             " expected from it (the ranks disagree on a count or shape)");
  }
  if (status == UCS_OK && received != p.bytes) {
    return Status::Error(TPX_ERR_FAILED_PRECONDITION,
                         "size mismatch: rank " + std::to_string(p.peer) + " sent " +
                             std::to_string(received) + " bytes where rank " +
                             std::to_string(rank()) + " expected " + std::to_string(p.bytes) +
                             " (the ranks disagree on a count or shape)");
  }
  return Status();
}

Status OpIo::CheckHealth() {
  {
    Status notice = worker_.CheckNotices();
    if (!notice.ok()) return Fail(notice.code(), notice.message());
  }
  // Only peers this op still waits on matter: a rank that finished and left
  // must not fail operations it takes no part in.
  const int failures_before = worker_.failure_count();
  worker_.CheckLocalPeers();
  if (worker_.failure_count() != failures_before) {
    // A peer that exited may have delivered its last messages (or the
    // acknowledgement of ours) just before: take in everything that
    // arrived, so that only what it never sent counts against it.
    for (int i = 0; i < 1000 && worker_.Progress(); ++i) {
    }
  }
  if (worker_.failure_count() != 0) {
    std::set<int> failed;
    for (int peer = 0; peer < size(); ++peer) {
      if (worker_.peer_status(peer) != UCS_OK && Awaited(peer)) failed.insert(peer);
    }
    if (!failed.empty()) {
      std::string what;
      for (int peer : failed) {
        if (!what.empty()) what += "; ";
        what += "rank " + std::to_string(peer) + " (" + worker_.peer_failure(peer) + ")";
      }
      return Fail(TPX_ERR_UNAVAILABLE, "peer unreachable: " + what);
    }
  }
  if (SharedSegment* shm = worker_.shm(); shm != nullptr && collective_ && awaited_stage_ == 0) {
    // A peer that runs this collective through shared memory while this
    // rank exchanges messages has been given other sizes.
    for (int peer = 0; peer < size(); ++peer) {
      if (peer != rank() &&
          shm->control(peer).last_coll.load(std::memory_order_acquire) == seq_ + 1) {
        return Fail(TPX_ERR_FAILED_PRECONDITION,
                    "size mismatch: rank " + std::to_string(peer) +
                        " runs this collective through shared memory with sizes for which rank " +
                        std::to_string(rank()) +
                        " exchanges messages (the ranks disagree on a count or shape)");
      }
    }
  }
  if (Clock::now() >= deadline_) return Fail(TPX_ERR_DEADLINE_EXCEEDED, "timed out");
  return Status();
}

bool OpIo::Awaited(int peer) const {
  if (awaited_stage_ != 0) {
    return peer != rank() &&
           worker_.shm()->control(peer).stage_for(awaited_stage_).load(std::memory_order_acquire) <
               awaited_stage_;
  }
  // Completed requests not yet reaped do not count: a peer may finish its
  // part and leave before this rank processed the last message.
  for (size_t i = first_incomplete_; i < pending_.size(); ++i) {
    const Pending& p = pending_[i];
    if (p.peer == peer && p.request != nullptr &&
        ucp_request_check_status(p.request) == UCS_INPROGRESS) {
      return true;
    }
  }
  return false;
}

Status OpIo::WaitStage(uint64_t stage) {
  if (!error_.ok()) return error_;
  SharedSegment& shm = *worker_.shm();
  const int n = size(), r = rank();
  auto reached = [&] {
    for (int peer = 0; peer < n; ++peer) {
      if (peer != r && shm.control(peer).stage_for(stage).load(std::memory_order_acquire) < stage) {
        return false;
      }
    }
    return true;
  };
  if (reached()) return Status();
  awaited_stage_ = stage;
  Backoff backoff;
  uint32_t rounds = 0;
  bool yielded = false;
  while (!reached()) {
    // Peers' notices arrive through UCX: progress it now and then. The
    // clock and /proc are read as rarely as in Wait().
    if ((++rounds & 15) == 0 || !backoff.spinning()) {
      worker_.Progress();
      Status s = CheckHealth();
      if (!s.ok()) return s;
    }
    backoff.Idle(worker_);
    yielded = yielded || !backoff.spinning();
  }
  awaited_stage_ = 0;
  worker_.NoteWaitEnded(!yielded);
  return Status();
}

Status OpIo::Wait(size_t index) {
  if (!error_.ok()) return error_;
  Pending& p = pending_[index];
  Backoff backoff;
  uint32_t busy_rounds = 0, idle_rounds = 0;
  bool idled = false, yielded = false;
  while (p.request != nullptr) {
    ucp_tag_recv_info_t info{};
    ucs_status_t s = p.is_recv ? ucp_tag_recv_request_test(p.request, &info)
                               : ucp_request_check_status(p.request);
    if (s != UCS_INPROGRESS) {
      ucp_request_free(p.request);
      p.request = nullptr;
      if (p.is_recv && GetTunables().check_lengths) {
        Status length = CheckLength(p, s, info.length);
        if (!length.ok()) return Fail(length.code(), length.message());
      }
      if (s != UCS_OK) {
        return Fail(TPX_ERR_UNAVAILABLE,
                    std::string(p.is_recv ? "receive from" : "send to") + " rank " +
                        std::to_string(p.peer) + " failed: " + ucs_status_string(s));
      }
      break;
    }
    if (worker_.Progress() && (++busy_rounds & 1023) != 0) {
      backoff.Reset();
      continue;
    }
    // While busy-polling, peers' notices, dead peers and the deadline are
    // looked at every 16th idle round: each look reads the clock, which
    // would otherwise dominate a microsecond-scale wait.
    if ((++idle_rounds & 15) == 0 || !backoff.spinning()) {
      TPX_PLUGIN_RETURN_IF_ERROR(CheckHealth());
    }
    backoff.Idle(worker_);
    idled = true;
    yielded = yielded || !backoff.spinning();
  }
  if (idled) worker_.NoteWaitEnded(!yielded);
  return Status();
}

Status OpIo::WaitAll() {
  for (; first_incomplete_ < pending_.size(); ++first_incomplete_) {
    TPX_PLUGIN_RETURN_IF_ERROR(Wait(first_incomplete_));
  }
  return error_;
}

Status OpIo::Test(bool* done) {
  *done = false;
  if (!error_.ok()) return error_;
  worker_.Progress();
  for (; first_incomplete_ < pending_.size(); ++first_incomplete_) {
    Pending& p = pending_[first_incomplete_];
    if (p.request == nullptr) continue;
    if (ucp_request_check_status(p.request) == UCS_INPROGRESS) return CheckHealth();
    TPX_PLUGIN_RETURN_IF_ERROR(Wait(first_incomplete_));  // completed: frees, reports errors
  }
  *done = true;
  return Status();
}

Status OpIo::Fail(int code, const std::string& why) {
  if (!error_.ok()) return error_;
  std::set<int> waiting;
  for (const Pending& p : pending_) {
    if (p.request != nullptr && ucp_request_check_status(p.request) == UCS_INPROGRESS) {
      waiting.insert(p.peer);
    }
  }
  for (int peer = 0; awaited_stage_ != 0 && peer < size(); ++peer) {
    if (Awaited(peer)) waiting.insert(peer);
  }
  // The host prefixes the op's public number (#N); seq_ here is the plugin's
  // own tag scope and would only confuse.
  std::string msg =
      std::string("ucx ") + op_name_ + " on rank " + std::to_string(rank()) + ": " + why;
  if (!waiting.empty()) msg += "; still waiting on ranks " + RankList(waiting);
  error_ = Status::Error(code, msg);
  // Peers learn now, not at their timeout: the communicator is failed.
  worker_.AnnounceFailure(code, std::string(op_name_) + ": " + why, collective_ ? &seq_ : nullptr,
                          public_seq_);
  Abandon();
  return error_;
}

void OpIo::Abandon() {
  // The common case, every request reaped: nothing to cancel, no clock read.
  if (std::all_of(pending_.begin(), pending_.end(),
                  [](const Pending& p) { return p.request == nullptr; })) {
    return;
  }
  bool sends_pending = false;
  for (Pending& p : pending_) {
    if (p.request == nullptr) continue;
    if (ucp_request_check_status(p.request) != UCS_INPROGRESS) {
      ucp_request_free(p.request);
      p.request = nullptr;
    } else if (p.is_recv) {
      ucp_request_cancel(worker_.handle(), p.request);
    } else {
      sends_pending = true;
    }
  }
  // Sends cannot be cancelled; closing the endpoints forcibly completes them,
  // so that no buffer of the caller stays referenced after the op returns.
  // The communicator is failed afterwards anyway.
  if (sends_pending && !worker_.closed()) {
    worker_.CloseEndpoints(Clock::now() + std::chrono::milliseconds(100), /*force=*/true);
  }
  // Requests to a dead peer may never complete; freeing them anyway lets
  // UCX release them when the worker goes away.
  auto until = Clock::now() + std::chrono::milliseconds(200);
  for (Pending& p : pending_) {
    if (p.request == nullptr) continue;
    while (ucp_request_check_status(p.request) == UCS_INPROGRESS && Clock::now() < until) {
      if (!worker_.Progress()) sched_yield();
    }
    ucp_request_free(p.request);
    p.request = nullptr;
  }
}

}  // namespace tpx::ucx
