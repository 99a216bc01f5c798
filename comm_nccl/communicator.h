// One NCCL communicator of the tpx NCCL backend (comm/plugin_abi.h).
//
// Operations run on the communicator's own CUDA stream, ordered after the
// caller's stream (an event recorded there); each ends with an event that
// test/wait poll (cudaEventQuery) and stream_wait hands to another stream.
// Host-memory operands are staged through device memory (staging.h).
// SEND/RECV use one two-rank NCCL communicator per (direction, peer, tag),
// made on first use and progressed without blocking the post: NCCL itself
// matches messages per peer in call order and has no tags.
// A watchdog thread turns NCCL asynchronous errors and operations older than
// the communicator timeout into ncclCommAbort plus an error on every pending
// operation; later posts fail fast with the same reason.
//
//   std::unique_ptr<Communicator> comm;
//   TPX_PLUGIN_RETURN_IF_ERROR(Communicator::Create(config, &comm));
//   std::shared_ptr<OpState> op;
//   TPX_PLUGIN_RETURN_IF_ERROR(comm->Post(args, &op));
//   Status s = comm->Wait(*op, /*timeout_ms=*/-1);
#ifndef TPX_COMM_NCCL_COMMUNICATOR_H_
#define TPX_COMM_NCCL_COMMUNICATOR_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/plugin_abi.h"
#include "comm/plugin_support.h"
#include "comm_nccl/staging.h"
#include "comm_nccl/status.h"

namespace tpx::nccl {

class Communicator;

// Makes `device` current for the scope and restores the caller's device:
// the host may call into the plugin from threads that use other GPUs.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// The state of one posted operation. Guarded by its communicator's mutex.
struct OpState {
  std::string what;  // "nccl all_reduce (seq 4) on rank 1 of world"
  std::chrono::steady_clock::time_point posted;
  cudaEvent_t done_event = nullptr;
  bool done = false;
  // False while a point-to-point op waits for its channel: done_event is
  // recorded only once the NCCL call is on the stream.
  bool issued = true;
  Status status;
  // Host-memory result: copied from `recv_pinned` to `recv_host` on completion.
  void* recv_host = nullptr;
  const void* recv_pinned = nullptr;
  size_t recv_bytes = 0;
  // Staging blocks returned to the pool on completion.
  std::vector<StagingPool::Block> blocks;
};

// A point-to-point op waiting for (or being handed to) its channel.
struct P2pOp {
  std::shared_ptr<OpState> op;
  const char* send = nullptr;  // device pointers (staged when the user's are host memory)
  char* recv = nullptr;
  size_t bytes = 0;
  void* recv_pinned = nullptr;  // staged recv: device -> pinned copy after the recv
};

// One direction between two ranks for one tag: a two-rank NCCL communicator
// with its own stream, created on first use. Separate channels let sends
// and receives (and different tags) progress independently, which NCCL's
// in-order matching on one communicator and stream cannot do.
struct P2pChannel {
  enum class State { kWaitingId, kConnecting, kReady, kIssuing, kFailed };
  int peer = 0;
  bool sending = false;
  std::string key;  // store key of the channel's ncclUniqueId
  State state = State::kWaitingId;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  std::deque<P2pOp> queue;  // the front is on the stream while kIssuing
};

class Communicator {
 public:
  // Collective over config.size ranks; the NCCL unique id goes through the
  // host's store under "<name>/nccl/unique_id".
  static Status Create(const tpx_comm_config_v1_t& config, std::unique_ptr<Communicator>* out);
  // Collective over the parent's members of the new communicator.
  static Status Split(Communicator& parent, int32_t color, int32_t key,
                      const tpx_comm_config_v1_t& config, std::unique_ptr<Communicator>* out);
  ~Communicator();

  Status Post(const tpx_coll_args_v1_t& args, std::shared_ptr<OpState>* out);
  // Polls the operation's event once; sets op.done when it finished.
  void Poll(OpState& op);
  // timeout_ms < 0: until done. DEADLINE_EXCEEDED when still running.
  Status Wait(OpState& op, int64_t timeout_ms);
  // Status of a finished op (done must be true).
  Status Result(OpState& op);
  bool Done(OpState& op);
  // Makes `stream` wait for the operation's device work.
  Status StreamWait(OpState& op, cudaStream_t stream);

 private:
  Communicator(const tpx_comm_config_v1_t& config, int device);
  Status InitDeviceState();
  // Waits for a non-blocking NCCL call to leave ncclInProgress, up to the
  // communicator timeout. Called with mu_ held.
  Status AwaitNccl(ncclComm_t comm, const std::string& what);
  Status EnqueueLocked(const tpx_coll_args_v1_t& args, OpState& op);
  // Copies host bytes to a staging device block on `stream` (blocks are
  // recorded in op.blocks).
  Status StageInLocked(const char* host, size_t bytes, cudaStream_t stream, OpState& op,
                       char** dev);
  void PollLocked(OpState& op);
  void FinishLocked(OpState& op, Status status);
  void AbortLocked(int code, const std::string& reason);
  void WatchdogLoop();
  // Point-to-point (p2p.cc).
  Status PostP2pLocked(const tpx_coll_args_v1_t& args, const std::shared_ptr<OpState>& op);
  Status ChannelLocked(int peer, bool sending, int32_t tag, P2pChannel** out);
  void ProgressChannelLocked(P2pChannel& channel);
  void ProgressAllChannelsLocked();
  void CloseChannelsLocked(bool clean);

  const int rank_;
  const int size_;
  const std::string name_;
  const int64_t timeout_ms_;
  const int device_;
  const tpx_store_v1_t* const store_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t caller_ready_ = nullptr;  // caller's stream -> comm stream
  void* barrier_word_ = nullptr;        // one device float for barrier()
  StagingPool staging_;

  std::mutex mu_;
  std::deque<std::shared_ptr<OpState>> pending_;  // post order
  std::map<std::tuple<int, bool, int32_t>, std::unique_ptr<P2pChannel>> channels_;
  bool aborted_ = false;
  Status abort_status_;
  bool stopping_ = false;
  std::condition_variable watchdog_cv_;
  std::thread watchdog_;
};

using ::tpx::plugin::ElementSize;

}  // namespace tpx::nccl

#endif  // TPX_COMM_NCCL_COMMUNICATOR_H_
