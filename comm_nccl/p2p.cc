// Point-to-point operations of the NCCL communicator: one lazily created
// two-rank channel per (direction, peer, tag), progressed without blocking
// (channel setup and NCCL enqueue are polled by Wait/Test and the watchdog),
// so posts never wait for the peer to post.
#include <cstring>
#include <string>

#include "comm_nccl/communicator.h"

namespace tpx::nccl {
namespace {

ncclConfig_t NonBlocking() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

}  // namespace

Status Communicator::ChannelLocked(int peer, bool sending, int32_t tag, P2pChannel** out) {
  const auto key = std::make_tuple(peer, sending, tag);
  auto it = channels_.find(key);
  if (it != channels_.end()) {
    *out = it->second.get();
    return Status();
  }
  auto channel = std::make_unique<P2pChannel>();
  channel->peer = peer;
  channel->sending = sending;
  const int src = sending ? rank_ : peer, dst = sending ? peer : rank_;
  channel->key = name_ + "/nccl/p2p/" + std::to_string(src) + "-" + std::to_string(dst) +
                 "/tag" + std::to_string(tag);
  TPX_PLUGIN_RETURN_IF_ERROR(
      CudaCall(cudaStreamCreateWithFlags(&channel->stream, cudaStreamNonBlocking),
               "cudaStreamCreate (p2p channel " + channel->key + ")"));
  if (sending) {
    // The sending side makes the channel's id; the receiver polls for it.
    ncclUniqueId id;
    TPX_PLUGIN_RETURN_IF_ERROR(NcclCall(ncclGetUniqueId(&id), "ncclGetUniqueId"));
    tpx_error_t err{};
    int rc = store_->set(store_->ctx, channel->key.c_str(), &id, sizeof(id), &err);
    if (rc != TPX_OK) {
      return Status::Error(rc, "publishing " + channel->key + ": " + err.message);
    }
    ncclConfig_t config = NonBlocking();
    TPX_PLUGIN_RETURN_IF_ERROR(NcclCall(ncclCommInitRankConfig(&channel->comm, 2, id, 0, &config),
                                      "ncclCommInitRankConfig (" + channel->key + ")"));
    channel->state = P2pChannel::State::kConnecting;
  }
  *out = channel.get();
  channels_.emplace(key, std::move(channel));
  return Status();
}

Status Communicator::PostP2pLocked(const tpx_coll_args_v1_t& args,
                                   const std::shared_ptr<OpState>& op) {
  const bool sending = args.kind == TPX_COLL_SEND;
  const size_t bytes = static_cast<size_t>(args.count) * ElementSize(args.dtype);
  if (bytes == 0) {
    op->done = true;  // nothing moves; no channel needed
    return Status();
  }
  P2pChannel* channel = nullptr;
  TPX_PLUGIN_RETURN_IF_ERROR(ChannelLocked(args.peer, sending, args.tag, &channel));
  cudaStream_t caller = static_cast<cudaStream_t>(args.stream);
  TPX_PLUGIN_RETURN_IF_ERROR(CudaCall(cudaEventRecord(caller_ready_, caller), "cudaEventRecord"));
  TPX_PLUGIN_RETURN_IF_ERROR(CudaCall(cudaStreamWaitEvent(channel->stream, caller_ready_, 0),
                                    "cudaStreamWaitEvent"));
  P2pOp p2p;
  p2p.op = op;
  p2p.bytes = bytes;
  if (sending) {
    p2p.send = static_cast<const char*>(args.send);
    if (!IsDeviceAccessible(args.send)) {
      char* dev = nullptr;
      TPX_PLUGIN_RETURN_IF_ERROR(StageInLocked(p2p.send, bytes, channel->stream, *op, &dev));
      p2p.send = dev;
    }
  } else {
    p2p.recv = static_cast<char*>(args.recv);
    if (!IsDeviceAccessible(args.recv)) {
      StagingPool::Block device, pinned;
      TPX_PLUGIN_RETURN_IF_ERROR(staging_.AcquireDevice(bytes, &device));
      op->blocks.push_back(device);
      TPX_PLUGIN_RETURN_IF_ERROR(staging_.AcquirePinned(bytes, &pinned));
      op->blocks.push_back(pinned);
      p2p.recv = static_cast<char*>(device.ptr);
      p2p.recv_pinned = pinned.ptr;
      op->recv_host = args.recv;
      op->recv_pinned = pinned.ptr;
      op->recv_bytes = bytes;
    }
  }
  TPX_PLUGIN_RETURN_IF_ERROR(CudaCall(
      cudaEventCreateWithFlags(&op->done_event, cudaEventDisableTiming), "cudaEventCreate"));
  op->issued = false;
  channel->queue.push_back(p2p);
  pending_.push_back(op);
  ProgressChannelLocked(*channel);
  return Status();
}

void Communicator::ProgressAllChannelsLocked() {
  // Channels are never removed while the communicator lives, so the
  // pointers stay valid even if a failure aborts everything midway.
  for (auto& [key, channel] : channels_) {
    if (aborted_) return;
    ProgressChannelLocked(*channel);
  }
}

void Communicator::ProgressChannelLocked(P2pChannel& ch) {
  using State = P2pChannel::State;
  auto fail = [&](const Status& s) {
    ch.state = State::kFailed;
    AbortLocked(s.code(), s.message());
  };
  while (!aborted_) {
    switch (ch.state) {
      case State::kFailed:
        return;
      case State::kWaitingId: {
        if (ch.queue.empty()) return;
        ncclUniqueId id;
        size_t len = 0;
        tpx_error_t err{};
        int rc = store_->get(store_->ctx, ch.key.c_str(), &id, sizeof(id), &len,
                             /*timeout_ms=*/0, &err);
        if (rc == TPX_ERR_DEADLINE_EXCEEDED) return;  // the sender has not posted yet
        if (rc != TPX_OK || len != sizeof(id)) {
          fail(Status::Error(rc == TPX_OK ? TPX_ERR_INTERNAL : rc,
                             "reading " + ch.key + ": " + err.message));
          return;
        }
        ncclConfig_t config = NonBlocking();
        Status s = NcclCall(ncclCommInitRankConfig(&ch.comm, 2, id, 1, &config),
                            "ncclCommInitRankConfig (" + ch.key + ")");
        if (!s.ok()) return fail(s);
        ch.state = State::kConnecting;
        break;
      }
      case State::kConnecting:
      case State::kIssuing: {
        ncclResult_t state = ncclSuccess;
        Status s = NcclCall(ncclCommGetAsyncError(ch.comm, &state), ch.key, ch.comm);
        if (s.ok()) s = NcclCall(state, "nccl p2p channel " + ch.key, ch.comm);
        if (!s.ok()) return fail(s);
        if (state == ncclInProgress) return;
        if (ch.state == State::kIssuing) {
          // The front op's NCCL call is on the stream: copy out, then mark.
          P2pOp& front = ch.queue.front();
          if (front.recv_pinned != nullptr) {
            s = CudaCall(cudaMemcpyAsync(front.recv_pinned, front.recv, front.bytes,
                                         cudaMemcpyDeviceToHost, ch.stream),
                         "staging copy to host");
          }
          if (s.ok())
            s = CudaCall(cudaEventRecord(front.op->done_event, ch.stream), "cudaEventRecord");
          if (!s.ok()) return fail(s);
          front.op->issued = true;
          ch.queue.pop_front();
        }
        ch.state = State::kReady;
        break;
      }
      case State::kReady: {
        if (ch.queue.empty()) return;
        P2pOp& front = ch.queue.front();
        if (front.op->done) {  // failed meanwhile
          ch.queue.pop_front();
          break;
        }
        const int other = ch.sending ? 1 : 0;
        ncclResult_t rc =
            ch.sending ? ncclSend(front.send, front.bytes, ncclUint8, other, ch.comm, ch.stream)
                       : ncclRecv(front.recv, front.bytes, ncclUint8, other, ch.comm, ch.stream);
        Status s = NcclCall(rc, front.op->what, ch.comm);
        if (!s.ok()) return fail(s);
        ch.state = State::kIssuing;
        break;
      }
    }
  }
}

void Communicator::CloseChannelsLocked(bool clean) {
  for (auto& [key, ch] : channels_) {
    if (ch->comm == nullptr) continue;
    // Destroy only after a completed finalize, abort otherwise; never both
    // (ncclCommDestroy frees the communicator even when it fails).
    bool finalized = false;
    if (clean && ch->state == P2pChannel::State::kReady && ch->queue.empty()) {
      ncclResult_t rc = ncclCommFinalize(ch->comm);
      finalized = (rc == ncclSuccess || rc == ncclInProgress) &&
                  AwaitNccl(ch->comm, "closing " + ch->key).ok();
    }
    bool closed = false;
    if (finalized) {
      closed = ncclCommDestroy(ch->comm) == ncclSuccess;
    } else {
      ncclCommAbort(ch->comm);
    }
    ch->comm = nullptr;
    ch->state = P2pChannel::State::kFailed;
    // Streams are left to the process: after an abort they may still run.
    if (closed && ch->stream != nullptr) {
      cudaStreamSynchronize(ch->stream);
      cudaStreamDestroy(ch->stream);
      ch->stream = nullptr;
    }
  }
}

}  // namespace tpx::nccl
