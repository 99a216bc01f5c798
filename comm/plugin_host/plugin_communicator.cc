#include "comm/plugin_host/plugin_communicator.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/plugin_host/progress.h"
#include "comm/store/store_abi.h"
#include "core/device_kernels.h"
#include "core/status_macros.h"

namespace tpx::comm {

bool DebugChecksFromEnv() {
  const char* env = std::getenv("TPX_COMM_DEBUG");
  return env != nullptr && env[0] != '\0' && std::strcmp(env, "0") != 0;
}

namespace {

// DType, ReduceOp and CollectiveKind cross the ABI as their numbers (PostRaw).
#define TPX_SAME_NUMBER(abi, host) static_assert(static_cast<int>(abi) == static_cast<int>(host))
TPX_SAME_NUMBER(TPX_DTYPE_F32, DType::kF32);
TPX_SAME_NUMBER(TPX_DTYPE_BF16, DType::kBF16);
TPX_SAME_NUMBER(TPX_DTYPE_F16, DType::kF16);
TPX_SAME_NUMBER(TPX_DTYPE_I32, DType::kI32);
TPX_SAME_NUMBER(TPX_DTYPE_I64, DType::kI64);
TPX_SAME_NUMBER(TPX_DTYPE_BOOL, DType::kBool);
TPX_SAME_NUMBER(TPX_REDUCE_SUM, ReduceOp::kSum);
TPX_SAME_NUMBER(TPX_REDUCE_AVG, ReduceOp::kAvg);
TPX_SAME_NUMBER(TPX_REDUCE_MAX, ReduceOp::kMax);
TPX_SAME_NUMBER(TPX_REDUCE_MIN, ReduceOp::kMin);
TPX_SAME_NUMBER(TPX_REDUCE_PROD, ReduceOp::kProd);
TPX_SAME_NUMBER(TPX_COLL_ALL_REDUCE, CollectiveKind::kAllReduce);
TPX_SAME_NUMBER(TPX_COLL_BROADCAST, CollectiveKind::kBroadcast);
TPX_SAME_NUMBER(TPX_COLL_REDUCE, CollectiveKind::kReduce);
TPX_SAME_NUMBER(TPX_COLL_ALL_GATHER_V, CollectiveKind::kAllGatherV);
TPX_SAME_NUMBER(TPX_COLL_REDUCE_SCATTER_V, CollectiveKind::kReduceScatterV);
TPX_SAME_NUMBER(TPX_COLL_GATHER_V, CollectiveKind::kGatherV);
TPX_SAME_NUMBER(TPX_COLL_SCATTER_V, CollectiveKind::kScatterV);
TPX_SAME_NUMBER(TPX_COLL_ALL_TO_ALL_V, CollectiveKind::kAllToAllV);
TPX_SAME_NUMBER(TPX_COLL_SEND, CollectiveKind::kSend);
TPX_SAME_NUMBER(TPX_COLL_RECV, CollectiveKind::kRecv);
TPX_SAME_NUMBER(TPX_COLL_BARRIER, CollectiveKind::kBarrier);
#undef TPX_SAME_NUMBER

// Everything a communicator and its in-flight Work share; kept alive by
// both so a Work may outlive its communicator.
struct Shared {
  std::shared_ptr<const Plugin> plugin;
  std::shared_ptr<Store> store;
  std::shared_ptr<void> keep_alive;
  std::unique_ptr<StoreAbi> store_abi;
  std::unique_ptr<ProgressTracker> progress;
  CommOptions options;
  // World rank of each rank of this communicator (identity for the world).
  std::vector<int> world_ranks;
  tpx_comm_t handle = nullptr;

  // "rank 1 of world" or, in a split, "rank 1 (world rank 3) of world/split2/c1".
  std::string RankOf() const {
    const int r = options.rank;
    if (r < static_cast<int>(world_ranks.size()) && world_ranks[r] != r) {
      return absl::StrCat("rank ", r, " (world rank ", world_ranks[r], ") of ", options.name);
    }
    return absl::StrCat("rank ", r, " of ", options.name);
  }

  ~Shared() {
    progress.reset();
    if (handle != nullptr) {
      tpx_error_t err{};
      plugin->api().comm_destroy(handle, &err);
    }
  }
};

class PluginWork : public WorkImpl {
 public:
  // `device`: where the op's buffers live; a CUDA device makes the op
  // device-ordered (Work::Wait() waits on that device's current stream).
  PluginWork(std::shared_ptr<Shared> shared, tpx_request_t request, uint64_t seq, OpSummary op,
             Device device)
      : shared_(std::move(shared)), request_(request), seq_(seq), op_(op), device_(device) {}
  ~PluginWork() override { shared_->plugin->api().request_free(request_); }

  bool device_ordered() const override { return device_.is_cuda(); }

  absl::Status WaitOnStream() override {
    // The stream ops on the device are queued on now (it may differ from
    // the one the op was issued after).
    absl::StatusOr<DeviceKernels*> kernels = KernelsFor(device_, "Work::Wait");
    if (!kernels.ok()) return kernels.status();
    tpx_error_t err{};
    int rc = shared_->plugin->api().stream_wait(
        request_, (*kernels)->CurrentStream(device_.index), &err);
    if (rc == TPX_OK) return absl::OkStatus();
    return Explain(PluginCodeToStatus(rc, err, shared_->plugin->name()));
  }

  bool Wait(absl::Duration timeout, absl::Status* status) override {
    const tpx_comm_plugin_v1_t& api = shared_->plugin->api();
    tpx_error_t err;
    err.message[0] = '\0';  // a plugin fills it on failure; not 1 KiB of zeros per op
    int done = 0;
    int rc;
    if (timeout == absl::ZeroDuration()) {
      rc = api.test(request_, &done, &err);
      if (!done) return false;
    } else if (timeout == absl::InfiniteDuration()) {
      rc = WaitBounded(&err);
      if (rc == kHostTimeout) {
        *status = Explain(absl::DeadlineExceededError(absl::StrCat(
            "the backend did not finish it within 2x the communicator timeout (",
            absl::FormatDuration(shared_->options.timeout), ")")));
        return true;
      }
    } else {
      rc = api.wait(request_, absl::ToInt64Milliseconds(timeout), &err);
      if (rc == TPX_ERR_DEADLINE_EXCEEDED) {
        // Distinguish "still running" from "failed with a timeout".
        int finished = 0;
        tpx_error_t test_err{};
        int test_rc = api.test(request_, &finished, &test_err);
        if (!finished) return false;
        rc = test_rc;
        err = test_err;
      }
    }
    if (rc == TPX_OK) {
      if (seq_ > 0) shared_->progress->Completed(seq_);
      *status = absl::OkStatus();
    } else {
      *status = Explain(PluginCodeToStatus(rc, err, shared_->plugin->name()));
    }
    return true;
  }

 private:
  static constexpr int kHostTimeout = -1;

  // Waits until done, but no longer than twice the communicator timeout: a
  // backend that breaks its own timeout promise must not hang the program.
  // The clock is read only once a wait has timed out (which took a whole
  // timeout), not on every operation.
  int WaitBounded(tpx_error_t* err) {
    const tpx_comm_plugin_v1_t& api = shared_->plugin->api();
    const absl::Duration timeout = shared_->options.timeout;
    absl::Time give_up = absl::InfiniteFuture();
    while (true) {
      int rc = api.wait(request_, absl::ToInt64Milliseconds(timeout), err);
      if (rc != TPX_ERR_DEADLINE_EXCEEDED) return rc;
      int finished = 0;
      rc = api.test(request_, &finished, err);
      if (finished) return rc;
      const absl::Time now = absl::Now();
      if (give_up == absl::InfiniteFuture()) give_up = now + timeout;
      if (now >= give_up) return kHostTimeout;
    }
  }

  absl::Status Explain(const absl::Status& backend) {
    const bool is_timeout = backend.code() == absl::StatusCode::kDeadlineExceeded;
    std::string out = absl::StrCat(DescribeCollective(op_, seq_), " on ", shared_->RankOf());
    if (is_timeout) {
      absl::StrAppend(&out, " timed out after ", absl::FormatDuration(shared_->options.timeout));
    } else {
      absl::StrAppend(&out, " failed");
    }
    if (seq_ > 0 && shared_->options.size > 1) {
      absl::StrAppend(&out, ": ", shared_->progress->Explain(seq_));
    }
    absl::StrAppend(&out, " [", backend.message(), "]");
    return absl::Status(backend.code(), out);
  }

  std::shared_ptr<Shared> shared_;
  tpx_request_t request_;
  uint64_t seq_;
  OpSummary op_;  // the message is only built on failure
  Device device_;
};

// What every rank must agree on for one collective (TPX_COMM_DEBUG).
constexpr int kDescriptorLen = 6;

uint64_t HashCounts(const PerRankCounts& v) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t x : v) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull;
  return h;
}

void MakeDescriptor(const CollectiveArgs& a, int64_t out[kDescriptorLen]) {
  out[0] = static_cast<int64_t>(a.kind);
  out[1] = static_cast<int64_t>(a.dtype);
  out[2] = IsReduction(a.kind) ? static_cast<int64_t>(a.op) : -1;
  out[3] = HasRoot(a.kind) ? a.peer : -1;
  // Per-rank sizes legitimately differ for gather/scatter/all_to_all.
  switch (a.kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kReduce:
      out[4] = a.count;
      out[5] = 0;
      break;
    case CollectiveKind::kAllGatherV:
      out[4] = -1;
      out[5] = static_cast<int64_t>(HashCounts(a.recv_counts));
      break;
    case CollectiveKind::kReduceScatterV:
      out[4] = -1;
      out[5] = static_cast<int64_t>(HashCounts(a.send_counts));
      break;
    default:
      out[4] = -1;
      out[5] = 0;
  }
}

std::string FormatDescriptor(const int64_t d[kDescriptorLen]) {
  std::string out(CollectiveKindName(static_cast<CollectiveKind>(d[0])));
  absl::StrAppend(&out, "(", std::string(DTypeName(static_cast<DType>(d[1]))));
  if (d[2] >= 0) absl::StrAppend(&out, ", ", ReduceOpName(static_cast<ReduceOp>(d[2])));
  if (d[3] >= 0) absl::StrAppend(&out, ", root ", d[3]);
  if (d[4] >= 0) absl::StrAppend(&out, ", count ", d[4]);
  if (d[5] != 0) absl::StrAppend(&out, ", per-rank counts hash ", static_cast<uint64_t>(d[5]));
  absl::StrAppend(&out, ")");
  return out;
}

class PluginCommunicatorImpl : public Communicator {
 public:
  explicit PluginCommunicatorImpl(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}

  int rank() const override { return shared_->options.rank; }
  int size() const override { return shared_->options.size; }
  const std::string& name() const override { return shared_->options.name; }
  const std::string& backend() const override { return shared_->plugin->name(); }
  bool device_memory() const override { return shared_->plugin->device_memory(); }
  int device() const override { return shared_->options.device; }

 protected:
  Work Post(const CollectiveArgs& args) override {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t seq = last_seq_;
    if (!IsPointToPoint(args.kind)) {
      seq = ++last_seq_;
      if (shared_->options.debug_checks && size() > 1) {
        absl::Status same = CheckSameCollective(args, seq);
        if (!same.ok()) return Work(std::move(same));
      }
      shared_->progress->Entered(seq);
    }
    tpx_request_t request = nullptr;
    tpx_error_t err;
    err.message[0] = '\0';  // a plugin fills it on failure; not 1 KiB of zeros per op
    int rc = PostRaw(args, seq, &request, &err);
    const uint64_t numbered = IsPointToPoint(args.kind) ? 0 : seq;
    if (rc != TPX_OK) {
      return Work(PluginCodeToStatus(
          rc, err,
          absl::StrCat(DescribeCollective(args, rank(), numbered), " on rank ", rank(),
                       ": backend rejected it")));
    }
    return Work(std::make_shared<PluginWork>(shared_, request, numbered, Summarize(args, rank()),
                                             args.device));
  }

  Work Reject(absl::string_view op, absl::Status why) override {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t seq = ++last_seq_;  // the peers number this collective too
    shared_->progress->Entered(seq);
    const tpx_comm_plugin_v2_t* v2 = shared_->plugin->api_v2();
    if (v2 != nullptr && size() > 1) {
      tpx_coll_args_v1_t c{};
      c.struct_size = sizeof(c);
      c.kind = TPX_COLL_BARRIER;
      for (int k = 0; k <= static_cast<int>(CollectiveKind::kBarrier); ++k) {
        if (CollectiveKindName(static_cast<CollectiveKind>(k)) == op) {
          c.kind = static_cast<tpx_coll_kind_t>(k);
        }
      }
      c.seq = seq;
      tpx_error_t err{};
      // Only the notification can fail; the caller gets `why` either way.
      v2->reject(shared_->handle, &c, std::string(why.message()).c_str(), &err);
    }
    return Work(std::move(why));
  }

  absl::StatusOr<std::unique_ptr<Communicator>> SplitGrouped(int color, int key,
                                                             std::vector<int32_t> members,
                                                             int new_rank,
                                                             std::string child_name) override {
    auto child = std::make_shared<Shared>();
    child->plugin = shared_->plugin;
    child->store = shared_->store;
    child->keep_alive = shared_->keep_alive;
    child->store_abi = std::make_unique<StoreAbi>(child->store.get());
    child->options = shared_->options;
    child->options.rank = new_rank;
    child->options.size = static_cast<int>(members.size());
    child->options.name = std::move(child_name);
    for (int32_t m : members) child->world_ranks.push_back(shared_->world_ranks[m]);
    tpx_comm_config_v1_t config = MakeConfig(*child);
    tpx_error_t err{};
    std::lock_guard<std::mutex> lock(mu_);
    int rc = shared_->plugin->api().comm_split(shared_->handle, color, key, members.data(),
                                               &config, &child->handle, &err);
    if (rc != TPX_OK) {
      return PluginCodeToStatus(rc, err,
                                absl::StrCat("split of ", name(), " (color ", color, ", key ",
                                             key, ") on rank ", rank()));
    }
    StartProgress(*child);
    return std::unique_ptr<Communicator>(new PluginCommunicatorImpl(std::move(child)));
  }

 public:
  static tpx_comm_config_v1_t MakeConfig(const Shared& s) {
    tpx_comm_config_v1_t config{};
    config.struct_size = sizeof(config);
    config.rank = s.options.rank;
    config.size = s.options.size;
    config.name = s.options.name.c_str();
    config.timeout_ms = absl::ToInt64Milliseconds(s.options.timeout);
    config.device = s.options.device;
    config.store = s.store_abi->get();
    return config;
  }

  static void StartProgress(Shared& s) {
    s.progress = std::make_unique<ProgressTracker>(s.store.get(), s.options.name, s.options.rank,
                                                   s.options.size, s.options.heartbeat_period);
    s.progress->SetWorldRanks(s.world_ranks);
  }

 private:
  int PostRaw(const CollectiveArgs& a, uint64_t seq, tpx_request_t* request, tpx_error_t* err) {
    tpx_coll_args_v1_t c{};
    c.struct_size = sizeof(c);
    c.kind = static_cast<tpx_coll_kind_t>(a.kind);
    c.dtype = static_cast<tpx_dtype_t>(a.dtype);
    c.op = static_cast<tpx_reduce_op_t>(a.op);
    c.peer = a.peer;
    c.tag = a.tag;
    c.send = a.send;
    c.recv = a.recv;
    c.count = a.count;
    c.send_counts = a.send_counts.empty() ? nullptr : a.send_counts.data();
    c.send_displs = a.send_displs.empty() ? nullptr : a.send_displs.data();
    c.recv_counts = a.recv_counts.empty() ? nullptr : a.recv_counts.data();
    c.recv_displs = a.recv_displs.empty() ? nullptr : a.recv_displs.data();
    c.seq = seq;
    c.stream = a.stream;  // NULL for host memory
    return shared_->plugin->api().post(shared_->handle, &c, request, err);
  }

  // All-gathers this collective's descriptor through the backend itself and
  // names the first rank whose call differs from rank 0's.
  absl::Status CheckSameCollective(const CollectiveArgs& args, uint64_t seq) {
    int64_t mine[kDescriptorLen];
    MakeDescriptor(args, mine);
    std::vector<int64_t> all(kDescriptorLen * size());
    CollectiveArgs exchange;
    exchange.kind = CollectiveKind::kAllGatherV;
    exchange.name = "debug_check";
    exchange.dtype = DType::kI64;
    exchange.send = mine;
    exchange.recv = all.data();
    exchange.count = kDescriptorLen;
    exchange.recv_counts.assign(size(), kDescriptorLen);
    for (int r = 0; r < size(); ++r) exchange.recv_displs.push_back(r * kDescriptorLen);
    tpx_request_t request = nullptr;
    tpx_error_t err{};
    int rc = PostRaw(exchange, seq, &request, &err);
    std::string what = DescribeCollective(args, rank(), seq);
    if (rc == TPX_OK) {
      rc = shared_->plugin->api().wait(request, -1, &err);
      shared_->plugin->api().request_free(request);
    }
    if (rc != TPX_OK) {
      return PluginCodeToStatus(rc, err, absl::StrCat("TPX_COMM_DEBUG check before ", what,
                                                      " on rank ", rank()));
    }
    for (int r = 1; r < size(); ++r) {
      if (std::memcmp(&all[r * kDescriptorLen], &all[0], sizeof(int64_t) * kDescriptorLen) != 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "TPX_COMM_DEBUG: collective #", seq, " on ", name(), " differs between ranks: rank 0 "
            "issued ", FormatDescriptor(&all[0]), " but rank ", r, " issued ",
            FormatDescriptor(&all[r * kDescriptorLen]), " (seen on rank ", rank(), ")"));
      }
    }
    return absl::OkStatus();
  }

  std::shared_ptr<Shared> shared_;
  std::mutex mu_;  // serialises posts (the plugin contract)
  uint64_t last_seq_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> PluginCommunicator::Create(
    std::shared_ptr<const Plugin> plugin, const CommOptions& options,
    std::shared_ptr<Store> store, std::shared_ptr<void> keep_alive) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat("communicator '", options.name, "': rank ",
                                                   options.rank, " of size ", options.size,
                                                   " is out of range"));
  }
  auto shared = std::make_shared<Shared>();
  shared->plugin = std::move(plugin);
  shared->store = std::move(store);
  shared->keep_alive = std::move(keep_alive);
  shared->store_abi = std::make_unique<StoreAbi>(shared->store.get());
  shared->options = options;
  for (int r = 0; r < options.size; ++r) shared->world_ranks.push_back(r);
  tpx_comm_config_v1_t config = PluginCommunicatorImpl::MakeConfig(*shared);
  tpx_error_t err{};
  int rc = shared->plugin->api().comm_create(&config, &shared->handle, &err);
  if (rc != TPX_OK) {
    shared->handle = nullptr;
    return PluginCodeToStatus(rc, err,
                              absl::StrCat("creating communicator '", options.name, "' (rank ",
                                           options.rank, " of ", options.size, ", backend ",
                                           shared->plugin->name(), ")"));
  }
  PluginCommunicatorImpl::StartProgress(*shared);
  return std::unique_ptr<Communicator>(new PluginCommunicatorImpl(std::move(shared)));
}

}  // namespace tpx::comm
