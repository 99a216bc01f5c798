#include "comm_ucx/abort_notices.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace tpx::ucx {
namespace {

constexpr uint64_t kNoticeMask = (1ull << 63) | kNoticeTagBit;
constexpr size_t kRejectedKept = 4096;

void SendDone(void*, ucs_status_t, void*) {}
void RecvDone(void*, ucs_status_t, const ucp_tag_recv_info_t*, void*) {}

const char* KindVerb(uint32_t kind) {
  return kind == AbortNotices::kRejected ? "rejected" : "failed";
}

}  // namespace

Status AbortNotices::AsError(const Wire& w) {
  std::string reason(w.reason, strnlen(w.reason, sizeof(w.reason)));
  const std::string what =
      w.public_seq > 0 ? "collective #" + std::to_string(w.public_seq) : "an operation";
  return Status::Error(w.code, "rank " + std::to_string(w.from) + " " + KindVerb(w.kind) + " " +
                                   what + ": " + reason);
}

Status AbortNotices::Start(ucp_worker_h worker) {
  if (size_ > 1) PostReceive(worker);
  return Status();
}

void AbortNotices::PostReceive(ucp_worker_h worker) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
  param.cb.recv = &RecvDone;
  void* req = ucp_tag_recv_nbx(worker, &incoming_, sizeof(incoming_), kNoticeTagBit, kNoticeMask,
                               &param);
  receiving_ = !UCS_PTR_IS_ERR(req);
  recv_request_ = UCS_PTR_IS_PTR(req) ? req : nullptr;
  // A null request means a notice was already there: handled by Check().
}

void AbortNotices::Broadcast(const std::vector<ucp_ep_h>& eps, const Notice& notice) {
  Wire w{};
  w.kind = notice.kind;
  w.from = rank_;
  w.code = notice.code;
  w.seq = notice.seq;
  w.public_seq = notice.public_seq;
  std::snprintf(w.reason, sizeof(w.reason), "%s", notice.reason.c_str());
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_ || eps[peer] == nullptr) continue;
    outgoing_.push_back(w);
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
    param.cb.send = &SendDone;
    void* req = ucp_tag_send_nbx(eps[peer], &outgoing_.back(), sizeof(Wire),
                                 kNoticeTagBit | static_cast<uint64_t>(rank_ & 0xFFFF), &param);
    if (UCS_PTR_IS_PTR(req)) send_requests_.push_back(req);
  }
}

void AbortNotices::Flush(ucp_worker_h worker, int64_t budget_us) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(budget_us);
  for (void*& req : send_requests_) {
    while (ucp_request_check_status(req) == UCS_INPROGRESS &&
           std::chrono::steady_clock::now() < until) {
      if (ucp_worker_progress(worker) == 0) sched_yield();
    }
  }
}

void AbortNotices::Stop(ucp_worker_h worker) {
  if (recv_request_ != nullptr) {
    if (ucp_request_check_status(recv_request_) == UCS_INPROGRESS) {
      ucp_request_cancel(worker, recv_request_);
    }
    ucp_request_free(recv_request_);
    recv_request_ = nullptr;
  }
  receiving_ = false;
  // Unfinished sends are completed (with an error) by the forced endpoint
  // close that precedes this; freeing lets UCX release them.
  for (void* req : send_requests_) ucp_request_free(req);
  send_requests_.clear();
  outgoing_.clear();
}

void AbortNotices::NoteRejected(uint64_t seq) {
  rejected_.push_back(seq);
  if (rejected_.size() > kRejectedKept) rejected_.pop_front();
}

bool AbortNotices::RejectedHere(uint64_t seq) const {
  return std::find(rejected_.begin(), rejected_.end(), seq) != rejected_.end();
}

void AbortNotices::Handle(const Wire& w, uint64_t next_seq, bool in_collective,
                          Status* running_error) {
  if (in_collective && w.seq + 1 == next_seq) {
    if (running_error->ok()) *running_error = AsError(w);
    return;
  }
  if (w.seq >= next_seq) {
    later_.emplace(w.seq, w);  // the first notice for a collective wins
    return;
  }
  // This rank's part of collective w.seq is over.
  if (w.kind == kRejected && RejectedHere(w.seq)) return;
  if (failed_.ok()) failed_ = AsError(w);
}

Status AbortNotices::Check(ucp_worker_h worker, uint64_t next_seq, bool in_collective) {
  Status running_error;
  // Release finished notice sends, keeping their buffers' order.
  while (!send_requests_.empty() &&
         ucp_request_check_status(send_requests_.front()) != UCS_INPROGRESS) {
    ucp_request_free(send_requests_.front());
    send_requests_.erase(send_requests_.begin());
  }
  if (send_requests_.empty()) outgoing_.clear();
  while (receiving_) {
    if (recv_request_ != nullptr) {
      if (ucp_request_check_status(recv_request_) == UCS_INPROGRESS) break;
      ucp_request_free(recv_request_);
      recv_request_ = nullptr;
    }
    const Wire w = incoming_;
    PostReceive(worker);
    Handle(w, next_seq, in_collective, &running_error);
  }
  if (!running_error.ok()) return running_error;
  return failed_;
}

Status AbortNotices::Take(uint64_t seq, bool rejected_here) {
  auto it = later_.find(seq);
  if (it == later_.end()) return failed_;
  const Wire w = it->second;
  later_.erase(later_.begin(), std::next(it));
  if (rejected_here && w.kind == kRejected) return failed_;
  return AsError(w);
}

}  // namespace tpx::ucx
