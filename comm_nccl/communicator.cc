#include "comm_nccl/communicator.h"

#include <cstring>
#include <utility>

#include "comm_nccl/collectives.h"

namespace tpx::nccl {
namespace {

using Clock = std::chrono::steady_clock;

// How often the watchdog looks at pending operations and NCCL's async error.
constexpr auto kWatchdogPeriod = std::chrono::milliseconds(10);

std::string StoreError(int rc, const tpx_error_t& err, const std::string& what) {
  return what + ": store error " + std::to_string(rc) + ": " + err.message;
}

int64_t ElapsedMs(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

// Rank 0 makes the id and publishes it; the others wait for it.
Status ExchangeUniqueId(const tpx_comm_config_v1_t& config, ncclUniqueId* id) {
  const std::string key = std::string(config.name) + "/nccl/unique_id";
  const tpx_store_v1_t* store = config.store;
  tpx_error_t err{};
  if (config.rank == 0) {
    TPX_PLUGIN_RETURN_IF_ERROR(NcclCall(ncclGetUniqueId(id), "ncclGetUniqueId"));
    int rc = store->set(store->ctx, key.c_str(), id, sizeof(*id), &err);
    if (rc != TPX_OK) return Status::Error(rc, StoreError(rc, err, "publishing " + key));
    return Status();
  }
  size_t len = 0;
  int rc = store->get(store->ctx, key.c_str(), id, sizeof(*id), &len, config.timeout_ms, &err);
  if (rc != TPX_OK) {
    return Status::Error(rc, StoreError(rc, err, "rank " + std::to_string(config.rank) +
                                                     " waiting for rank 0's " + key));
  }
  if (len != sizeof(*id)) {
    return Status::Error(TPX_ERR_INTERNAL, key + " holds " + std::to_string(len) +
                                               " bytes, not an ncclUniqueId");
  }
  return Status();
}

Status PickDevice(const tpx_comm_config_v1_t& config, int* device) {
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count == 0) {
    cudaGetLastError();
    return Status::Error(TPX_ERR_FAILED_PRECONDITION,
                         "nccl: no CUDA device visible; use --tpx_comm_backend=ucx");
  }
  // Without an explicit device, ranks of one host spread over its GPUs.
  *device = config.device >= 0 ? config.device : config.rank % count;
  if (*device >= count) {
    return Status::Error(TPX_ERR_INVALID_ARGUMENT,
                         "nccl: rank " + std::to_string(config.rank) + " asked for CUDA device " +
                             std::to_string(*device) + " but only " + std::to_string(count) +
                             " are visible");
  }
  return Status();
}

}  // namespace

DeviceGuard::DeviceGuard(int device) {
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    cudaGetLastError();
    previous_ = -1;
  }
  if (previous_ != device) cudaSetDevice(device);
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

namespace {

ncclConfig_t NonBlockingConfig() {
  // Non-blocking: no NCCL call can hang the host on a dead peer; progress
  // is polled with ncclCommGetAsyncError under the communicator timeout.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

}  // namespace

Communicator::Communicator(const tpx_comm_config_v1_t& config, int device)
    : rank_(config.rank),
      size_(config.size),
      name_(config.name),
      timeout_ms_(config.timeout_ms),
      device_(device),
      store_(config.store) {}

Status Communicator::InitDeviceState() {
  TPX_PLUGIN_RETURN_IF_ERROR(CudaCall(cudaSetDevice(device_), "cudaSetDevice"));
  TPX_PLUGIN_RETURN_IF_ERROR(
      CudaCall(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
  TPX_PLUGIN_RETURN_IF_ERROR(CudaCall(
      cudaEventCreateWithFlags(&caller_ready_, cudaEventDisableTiming), "cudaEventCreate"));
  TPX_PLUGIN_RETURN_IF_ERROR(CudaCall(cudaMalloc(&barrier_word_, sizeof(float)), "cudaMalloc"));
  // On the communicator's stream: a non-blocking stream is not ordered
  // after the legacy default stream a plain cudaMemset would use.
  TPX_PLUGIN_RETURN_IF_ERROR(CudaCall(cudaMemsetAsync(barrier_word_, 0, sizeof(float), stream_),
                                      "cudaMemsetAsync (barrier word)"));
  watchdog_ = std::thread([this] { WatchdogLoop(); });
  return Status();
}

Status Communicator::AwaitNccl(ncclComm_t comm, const std::string& what) {
  const Clock::time_point start = Clock::now();
  while (true) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    if (rc != ncclSuccess) return NcclCall(rc, what + ": ncclCommGetAsyncError", comm);
    if (state == ncclSuccess) return Status();
    if (state != ncclInProgress) return NcclCall(state, what, comm);
    if (ElapsedMs(start) > timeout_ms_) {
      return Status::Error(TPX_ERR_DEADLINE_EXCEEDED,
                           what + ": not ready after " + std::to_string(timeout_ms_) +
                               " ms (a peer never joined)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

Status Communicator::Create(const tpx_comm_config_v1_t& config,
                            std::unique_ptr<Communicator>* out) {
  int device = 0;
  TPX_PLUGIN_RETURN_IF_ERROR(PickDevice(config, &device));
  std::unique_ptr<Communicator> comm(new Communicator(config, device));
  // The creating thread keeps the communicator's device current: a rank
  // process then allocates its tensors on its own GPU by default.
  TPX_PLUGIN_RETURN_IF_ERROR(CudaCall(cudaSetDevice(device), "cudaSetDevice"));
  ncclUniqueId id;
  TPX_PLUGIN_RETURN_IF_ERROR(ExchangeUniqueId(config, &id));
  ncclConfig_t nccl_config = NonBlockingConfig();
  const std::string what = "nccl comm_create '" + comm->name_ + "' (rank " +
                           std::to_string(config.rank) + " of " + std::to_string(config.size) +
                           ", device " + std::to_string(device) + ")";
  ncclResult_t rc =
      ncclCommInitRankConfig(&comm->comm_, config.size, id, config.rank, &nccl_config);
  TPX_PLUGIN_RETURN_IF_ERROR(NcclCall(rc, what + ": ncclCommInitRankConfig"));
  {
    std::lock_guard<std::mutex> lock(comm->mu_);
    Status ready = comm->AwaitNccl(comm->comm_, what);
    if (!ready.ok()) {
      ncclCommAbort(comm->comm_);
      comm->comm_ = nullptr;
      return ready;
    }
  }
  TPX_PLUGIN_RETURN_IF_ERROR(comm->InitDeviceState());
  *out = std::move(comm);
  return Status();
}

Status Communicator::Split(Communicator& parent, int32_t color, int32_t key,
                           const tpx_comm_config_v1_t& config,
                           std::unique_ptr<Communicator>* out) {
  std::unique_ptr<Communicator> comm(new Communicator(config, parent.device_));
  TPX_PLUGIN_RETURN_IF_ERROR(CudaCall(cudaSetDevice(parent.device_), "cudaSetDevice"));
  const std::string what = "nccl comm_split '" + comm->name_ + "' (color " +
                           std::to_string(color) + ", rank " + std::to_string(config.rank) +
                           " of " + std::to_string(config.size) + ")";
  ncclConfig_t nccl_config = NonBlockingConfig();
  if (config.size == parent.size_) {
    // Every parent rank is a member, so every parent rank is here:
    // ncclCommSplit (collective over the parent) can share its resources.
    std::lock_guard<std::mutex> lock(parent.mu_);
    if (parent.aborted_) {
      return Status::Error(TPX_ERR_UNAVAILABLE, what + ": parent was aborted earlier: " +
                                                    parent.abort_status_.message());
    }
    // A non-blocking communicator takes no new call while ncclInProgress.
    TPX_PLUGIN_RETURN_IF_ERROR(parent.AwaitNccl(parent.comm_, what + ": parent not ready"));
    // The host already ordered the members: its rank is the split key.
    (void)key;
    // Non-blocking split: NCCL returns ncclInProgress at once, runs the
    // split on its own thread, marks the *parent* ncclInProgress until done,
    // and only then stores the child handle through the pointer passed here.
    // The slot is on the heap so that a store arriving after a failure
    // below never hits freed memory (it is leaked then, 8 bytes).
    auto slot = std::make_unique<ncclComm_t>(nullptr);
    ncclResult_t rc = ncclCommSplit(parent.comm_, color, config.rank, slot.get(), &nccl_config);
    Status split = NcclCall(rc, what + ": ncclCommSplit", parent.comm_);
    if (split.ok()) split = parent.AwaitNccl(parent.comm_, what);
    if (!split.ok()) {
      // The parent is stuck or broken: abort it (ncclCommAbort also joins
      // NCCL's split thread) and fail its pending ops.
      slot.release();
      parent.AbortLocked(split.code(), split.message());
      return split;
    }
    comm->comm_ = *slot;
    if (comm->comm_ != nullptr) {
      Status ready = parent.AwaitNccl(comm->comm_, what);
      if (!ready.ok()) {
        ncclCommAbort(comm->comm_);
        comm->comm_ = nullptr;
        return ready;
      }
    }
  } else {
    // Ranks with color < 0 do not take part in comm_split (host contract),
    // and ncclCommSplit would wait for them: build the child from a fresh
    // unique id among its members, exchanged under the child's own name.
    ncclUniqueId id;
    TPX_PLUGIN_RETURN_IF_ERROR(ExchangeUniqueId(config, &id));
    ncclResult_t rc =
        ncclCommInitRankConfig(&comm->comm_, config.size, id, config.rank, &nccl_config);
    TPX_PLUGIN_RETURN_IF_ERROR(NcclCall(rc, what + ": ncclCommInitRankConfig"));
    std::lock_guard<std::mutex> lock(comm->mu_);
    Status ready = comm->AwaitNccl(comm->comm_, what);
    if (!ready.ok()) {
      ncclCommAbort(comm->comm_);
      comm->comm_ = nullptr;
      return ready;
    }
  }
  if (comm->comm_ == nullptr) {
    return Status::Error(TPX_ERR_INTERNAL, what + ": NCCL returned no communicator");
  }
  TPX_PLUGIN_RETURN_IF_ERROR(comm->InitDeviceState());
  *out = std::move(comm);
  return Status();
}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  watchdog_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  DeviceGuard device(device_);
  std::lock_guard<std::mutex> lock(mu_);
  // Device resources are only released when no NCCL kernel can still use
  // them: after a clean finalize, or when NCCL never started any.
  bool release = comm_ == nullptr && !aborted_;
  CloseChannelsLocked(/*clean=*/!aborted_ && pending_.empty());
  if (comm_ != nullptr) {
    // Finalize flushes outstanding work (non-blocking: poll until it left
    // ncclInProgress, bounded by the timeout); only a finalized
    // communicator is destroyed, anything else is aborted. Never both:
    // ncclCommDestroy frees the communicator, even when it reports an error.
    bool finalized = false;
    if (pending_.empty()) {
      ncclResult_t rc = ncclCommFinalize(comm_);
      finalized = (rc == ncclSuccess || rc == ncclInProgress) &&
                  AwaitNccl(comm_, "nccl comm_destroy '" + name_ + "'").ok();
    }
    if (finalized) {
      release = ncclCommDestroy(comm_) == ncclSuccess;
    } else {
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  if (release) {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (barrier_word_ != nullptr) cudaFree(barrier_word_);
    if (caller_ready_ != nullptr) cudaEventDestroy(caller_ready_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
}

Status Communicator::Post(const tpx_coll_args_v1_t& args, std::shared_ptr<OpState>* out) {
  auto op = std::make_shared<OpState>();
  op->what = std::string("nccl ") + plugin::CollKindName(args.kind) + " (seq " +
             std::to_string(args.seq) + ") on rank " + std::to_string(rank_) + " of " + name_;
  op->posted = Clock::now();
  *out = op;
  std::lock_guard<std::mutex> lock(mu_);
  DeviceGuard device(device_);
  if (aborted_) {
    op->done = true;
    op->status = Status::Error(abort_status_.code(),
                               op->what + ": communicator was aborted earlier: " +
                                   abort_status_.message());
    return Status();
  }
  const bool p2p = args.kind == TPX_COLL_SEND || args.kind == TPX_COLL_RECV;
  Status s = p2p ? PostP2pLocked(args, op) : EnqueueLocked(args, *op);
  if (s.ok() && p2p) return Status();  // PostP2pLocked queued (or finished) it
  if (!s.ok()) {
    // Copies may already be queued on the stream: the blocks are dropped.
    op->blocks.clear();
    if (op->done_event != nullptr) cudaEventDestroy(op->done_event);
    op->done_event = nullptr;
    op->done = true;
    op->status = Status::Error(s.code(), op->what + ": " + s.message());
    // A failed enqueue may leave NCCL mid-group: nothing later can be trusted.
    AbortLocked(s.code(), s.message());
    return Status();
  }
  pending_.push_back(op);
  watchdog_cv_.notify_all();
  return Status();
}

Status Communicator::EnqueueLocked(const tpx_coll_args_v1_t& args, OpState& op) {
  const Operands operands = OperandsOf(args, rank_, size_);
  const char* send = static_cast<const char*>(args.send);
  char* recv = static_cast<char*>(args.recv);
  if (operands.send_bytes == 0) send = nullptr;
  if (operands.recv_bytes == 0) recv = nullptr;
  const bool stage_send = send != nullptr && !IsDeviceAccessible(send);
  const bool stage_recv = recv != nullptr && !IsDeviceAccessible(recv);

  // The operation starts after the caller's queued work (stream NULL: the
  // legacy default stream).
  cudaStream_t caller = static_cast<cudaStream_t>(args.stream);
  TPX_PLUGIN_RETURN_IF_ERROR(CudaCall(cudaEventRecord(caller_ready_, caller), "cudaEventRecord"));
  TPX_PLUGIN_RETURN_IF_ERROR(
      CudaCall(cudaStreamWaitEvent(stream_, caller_ready_, 0), "cudaStreamWaitEvent"));

  // Host operands: one device block per distinct host range. In-place
  // variants overlap send and recv; they share one block covering both.
  const char* dev_send = send;
  char* dev_recv = recv;
  auto stage_in = [&](const char* host, size_t bytes, char** dev) {
    return StageInLocked(host, bytes, stream_, op, dev);
  };
  char* recv_block = nullptr;
  if (stage_send && stage_recv &&
      send < recv + operands.recv_bytes && recv < send + operands.send_bytes) {
    const char* lo = std::min<const char*>(send, recv);
    const char* hi = std::max<const char*>(send + operands.send_bytes, recv + operands.recv_bytes);
    char* block = nullptr;
    TPX_PLUGIN_RETURN_IF_ERROR(stage_in(lo, hi - lo, &block));
    dev_send = block + (send - lo);
    dev_recv = block + (recv - lo);
    recv_block = dev_recv;
  } else {
    if (stage_send) {
      char* block = nullptr;
      TPX_PLUGIN_RETURN_IF_ERROR(stage_in(send, operands.send_bytes, &block));
      dev_send = block;
    }
    if (stage_recv) {
      // BROADCAST reads recv at the root: copy it in as well.
      if (args.kind == TPX_COLL_BROADCAST && args.peer == rank_) {
        TPX_PLUGIN_RETURN_IF_ERROR(stage_in(recv, operands.recv_bytes, &recv_block));
      } else {
        StagingPool::Block device;
        TPX_PLUGIN_RETURN_IF_ERROR(staging_.AcquireDevice(operands.recv_bytes, &device));
        op.blocks.push_back(device);
        recv_block = static_cast<char*>(device.ptr);
      }
      dev_recv = recv_block;
    }
  }

  ncclResult_t group_result = ncclSuccess;
  TPX_PLUGIN_RETURN_IF_ERROR(EnqueueCollective(args, dev_send, dev_recv, rank_, size_, comm_,
                                             stream_, barrier_word_, &group_result));
  if (group_result == ncclInProgress) TPX_PLUGIN_RETURN_IF_ERROR(AwaitNccl(comm_, op.what));

  if (stage_recv) {
    StagingPool::Block pinned;
    TPX_PLUGIN_RETURN_IF_ERROR(staging_.AcquirePinned(operands.recv_bytes, &pinned));
    op.blocks.push_back(pinned);
    TPX_PLUGIN_RETURN_IF_ERROR(CudaCall(cudaMemcpyAsync(pinned.ptr, recv_block, operands.recv_bytes,
                                                      cudaMemcpyDeviceToHost, stream_),
                                      "staging copy to host"));
    op.recv_host = recv;
    op.recv_pinned = pinned.ptr;
    op.recv_bytes = operands.recv_bytes;
  }
  TPX_PLUGIN_RETURN_IF_ERROR(
      CudaCall(cudaEventCreateWithFlags(&op.done_event, cudaEventDisableTiming),
               "cudaEventCreate"));
  return CudaCall(cudaEventRecord(op.done_event, stream_), "cudaEventRecord");
}

Status Communicator::StageInLocked(const char* host, size_t bytes, cudaStream_t stream,
                                   OpState& op, char** dev) {
  StagingPool::Block pinned, device;
  TPX_PLUGIN_RETURN_IF_ERROR(staging_.AcquirePinned(bytes, &pinned));
  op.blocks.push_back(pinned);
  TPX_PLUGIN_RETURN_IF_ERROR(staging_.AcquireDevice(bytes, &device));
  op.blocks.push_back(device);
  std::memcpy(pinned.ptr, host, bytes);
  TPX_PLUGIN_RETURN_IF_ERROR(
      CudaCall(cudaMemcpyAsync(device.ptr, pinned.ptr, bytes, cudaMemcpyHostToDevice, stream),
               "staging copy to device"));
  *dev = static_cast<char*>(device.ptr);
  return Status();
}

void Communicator::FinishLocked(OpState& op, Status status) {
  if (op.done) return;
  if (status.ok() && op.recv_bytes > 0) std::memcpy(op.recv_host, op.recv_pinned, op.recv_bytes);
  if (status.ok()) {
    for (const auto& block : op.blocks) staging_.Release(block);
  }
  // On failure the aborted stream may still touch the blocks: they are
  // dropped rather than reused.
  op.blocks.clear();
  // Destroying a recorded event is fine even if the stream has not reached it.
  if (op.done_event != nullptr) cudaEventDestroy(op.done_event);
  op.done_event = nullptr;
  op.done = true;
  op.status = std::move(status);
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (it->get() == &op) {
      pending_.erase(it);
      break;
    }
  }
}

void Communicator::PollLocked(OpState& op) {
  if (op.done) return;
  DeviceGuard device(device_);
  if (!op.issued) {
    ProgressAllChannelsLocked();
    if (!op.issued || op.done) return;
  }
  cudaError_t rc = cudaEventQuery(op.done_event);
  if (rc == cudaErrorNotReady) return;
  if (rc == cudaSuccess) {
    FinishLocked(op, Status());
    return;
  }
  Status error = CudaCall(rc, op.what);
  AbortLocked(error.code(), error.message());
}

void Communicator::AbortLocked(int code, const std::string& reason) {
  if (!aborted_) {
    aborted_ = true;
    abort_status_ = Status::Error(code, reason);
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    CloseChannelsLocked(/*clean=*/false);
  }
  while (!pending_.empty()) {
    std::shared_ptr<OpState> op = pending_.front();
    FinishLocked(*op, Status::Error(code, op->what + " failed: " + reason +
                                              " (communicator aborted)"));
  }
}

void Communicator::Poll(OpState& op) {
  std::lock_guard<std::mutex> lock(mu_);
  PollLocked(op);
}

bool Communicator::Done(OpState& op) {
  std::lock_guard<std::mutex> lock(mu_);
  PollLocked(op);
  return op.done;
}

Status Communicator::Result(OpState& op) {
  std::lock_guard<std::mutex> lock(mu_);
  return op.status;
}

Status Communicator::Wait(OpState& op, int64_t timeout_ms) {
  const Clock::time_point start = Clock::now();
  auto sleep = std::chrono::microseconds(20);
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      PollLocked(op);
      if (op.done) return op.status;
    }
    if (timeout_ms >= 0 && ElapsedMs(start) >= timeout_ms) {
      return Status::Error(TPX_ERR_DEADLINE_EXCEEDED,
                           op.what + ": still running after " + std::to_string(timeout_ms) +
                               " ms of waiting");
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
  }
}

Status Communicator::StreamWait(OpState& op, cudaStream_t stream) {
  std::unique_lock<std::mutex> lock(mu_);
  DeviceGuard device(device_);
  // A point-to-point op whose channel is still being set up has no event on
  // a stream yet: wait (bounded by the watchdog's timeout) until it has.
  while (!op.issued && !op.done) {
    ProgressAllChannelsLocked();
    if (op.issued || op.done) break;
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    lock.lock();
  }
  if (op.done) return op.status;
  return CudaCall(cudaStreamWaitEvent(stream, op.done_event, 0), op.what + ": stream_wait");
}

void Communicator::WatchdogLoop() {
  cudaSetDevice(device_);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    watchdog_cv_.wait_for(lock, kWatchdogPeriod);
    if (stopping_ || aborted_ || pending_.empty()) continue;
    ncclResult_t async_error = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &async_error) == ncclSuccess &&
        async_error != ncclSuccess && async_error != ncclInProgress) {
      Status s = NcclCall(async_error, "nccl asynchronous error", comm_);
      AbortLocked(s.code(), s.message());
      continue;
    }
    ProgressAllChannelsLocked();
    // Point-to-point channels complete independently of the main stream, so
    // every pending op is looked at (copies: FinishLocked edits pending_).
    std::vector<std::shared_ptr<OpState>> ops(pending_.begin(), pending_.end());
    bool overdue = false;
    for (const auto& op : ops) {
      PollLocked(*op);
      if (!op->done && ElapsedMs(op->posted) > timeout_ms_) overdue = true;
    }
    if (overdue && !aborted_) {
      AbortLocked(TPX_ERR_DEADLINE_EXCEEDED,
                  "not complete after " + std::to_string(timeout_ms_) +
                      " ms (communicator timeout); a peer is stalled or gone");
    }
  }
}

}  // namespace tpx::nccl
