#include "comm_ucx/ucx_worker.h"

#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "comm_ucx/tunables.h"

namespace tpx::ucx {
namespace {

// UCX settings this plugin prefers; each applies only when the user has not
// set the matching UCX_* environment variable. Measured on a 2-core VM:
// shared-memory eager wins for small messages, but the ring's 1 MiB chunks
// move faster by CMA rendezvous (one copy instead of two). The memory type
// cache only serves GPU memory, which this host-memory backend never sees.
struct DefaultSetting {
  const char* name;  // without the UCX_ prefix
  const char* value;
};
constexpr DefaultSetting kDefaults[] = {
    {"RNDV_THRESH", "128kb"},
    {"MEMTYPE_CACHE", "n"},
    {"WARN_UNUSED_ENV_VARS", "n"},
};

std::string UcsError(ucs_status_t s) { return ucs_status_string(s); }

// This host's identity: processes with equal ids can share memory.
std::string HostId() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string id = host;
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char boot[64] = {};
    if (std::fgets(boot, sizeof(boot), f) != nullptr) id += std::string("/") + boot;
    std::fclose(f);
  }
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  // Emulated hosts (network namespaces) may share the kernel: ranks in
  // different namespaces are never treated as local.
  char ns[128] = {};
  if (readlink("/proc/self/ns/net", ns, sizeof(ns) - 1) > 0) id += std::string("/") + ns;
  return id;
}

// State and start time of process `pid` from /proc; false if it is gone.
// The start time tells a reused pid apart.
bool ReadProcess(int pid, char* state, uint64_t* start_time) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  char buf[1024];
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');  // the command name may hold spaces
  if (p == nullptr) return false;
  unsigned long long start = 0;
  // Fields after the name: state is field 3, starttime field 22.
  if (std::sscanf(p + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
                  state, &start) != 2) {
    return false;
  }
  *start_time = start;
  return true;
}

// The blob each rank publishes: host id, pid, start time, CMA probe address
// and value (shm_segment.h), then the UCX address.
std::string EncodeIdentity(const std::string& host, int pid, uint64_t start_time,
                           const CmaProbe& probe, const void* address, size_t len) {
  std::string out = host + '\n' + std::to_string(pid) + '\n' + std::to_string(start_time) +
                    '\n' + std::to_string(probe.address) + '\n' + std::to_string(probe.value) +
                    '\n';
  out.append(static_cast<const char*>(address), len);
  return out;
}
bool DecodeIdentity(const std::string& blob, std::string* host, int* pid, uint64_t* start_time,
                    CmaProbe* probe, std::string* address) {
  size_t at[5];
  size_t from = 0;
  for (size_t& p : at) {
    p = blob.find('\n', from);
    if (p == std::string::npos) return false;
    from = p + 1;
  }
  auto field = [&](int i) {
    const size_t begin = i == 0 ? 0 : at[i - 1] + 1;
    return blob.substr(begin, at[i] - begin);
  };
  *host = field(0);
  *pid = std::atoi(field(1).c_str());
  *start_time = std::strtoull(field(2).c_str(), nullptr, 10);
  probe->address = std::strtoull(field(3).c_str(), nullptr, 10);
  probe->value = std::strtoull(field(4).c_str(), nullptr, 10);
  *address = blob.substr(at[4] + 1);
  return true;
}

bool ForcePeerErrorMode() {
  const char* v = std::getenv("TPX_UCX_PEER_ERR_MODE");
  return v != nullptr && std::string(v) == "1";
}

Status CreateContext(ucp_context_h* out) {
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return Status::Error(TPX_ERR_INTERNAL, "ucp_config_read: " + UcsError(s));
  for (const DefaultSetting& d : kDefaults) {
    std::string env = std::string("UCX_") + d.name;
    if (std::getenv(env.c_str()) == nullptr) ucp_config_modify(config, d.name, d.value);
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 1;
  s = ucp_init(&params, config, out);
  ucp_config_release(config);
  if (s != UCS_OK) return Status::Error(TPX_ERR_UNAVAILABLE, "ucp_init: " + UcsError(s));
  return Status();
}

std::string AddressKey(const tpx_comm_config_v1_t& config, int rank) {
  return std::string(config.name) + "/ucx/addr/" + std::to_string(rank);
}

Status StoreGet(const tpx_store_v1_t& store, const std::string& key, int64_t timeout_ms,
                std::string* value) {
  tpx_error_t err{};
  size_t len = 0;
  value->resize(4096);
  int code = store.get(store.ctx, key.c_str(), value->data(), value->size(), &len, timeout_ms, &err);
  if (code == TPX_ERR_FAILED_PRECONDITION && len > value->size()) {
    value->resize(len);
    code = store.get(store.ctx, key.c_str(), value->data(), value->size(), &len, timeout_ms, &err);
  }
  if (code != TPX_OK) {
    return Status::Error(code, "reading UCX address '" + key + "' from the store: " + err.message);
  }
  value->resize(len);
  return Status();
}

// Every rank publishes that its endpoints exist, then waits for all others.
Status ConnectedBarrier(const tpx_comm_config_v1_t& config) {
  if (config.size == 1) return Status();
  const tpx_store_v1_t& store = *config.store;
  const std::string prefix = std::string(config.name) + "/ucx/connected/";
  tpx_error_t err{};
  const char one = '1';
  int code = store.set(store.ctx, (prefix + std::to_string(config.rank)).c_str(), &one, 1, &err);
  if (code != TPX_OK) {
    return Status::Error(code, std::string("publishing that rank ") +
                                   std::to_string(config.rank) + " connected: " + err.message);
  }
  for (int i = 1; i < config.size; ++i) {
    const int peer = (config.rank + i) % config.size;
    char value;
    size_t len = 0;
    code = store.get(store.ctx, (prefix + std::to_string(peer)).c_str(), &value, 1, &len,
                     config.timeout_ms, &err);
    if (code != TPX_OK) {
      return Status::Error(code, "waiting for rank " + std::to_string(peer) +
                                     " to connect its endpoints: " + err.message);
    }
  }
  return Status();
}

}  // namespace

Status GetContext(ucp_context_h* out) {
  static std::mutex mu;
  static ucp_context_h context = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (context == nullptr) TPX_PLUGIN_RETURN_IF_ERROR(CreateContext(&context));
  *out = context;
  return Status();
}

Status Worker::Create(const tpx_comm_config_v1_t& config, std::unique_ptr<Worker>* out) {
  ucp_context_h context;
  TPX_PLUGIN_RETURN_IF_ERROR(GetContext(&context));
  std::unique_ptr<Worker> w(new Worker(config.rank, config.size));
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // Several threads take turns (serialised by the communicator's lock).
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucs_status_t s = ucp_worker_create(context, &wp, &w->worker_);
  if (s != UCS_OK) return Status::Error(TPX_ERR_UNAVAILABLE, "ucp_worker_create: " + UcsError(s));
  if (ucp_worker_get_efd(w->worker_, &w->efd_) != UCS_OK) w->efd_ = -1;

  ucp_address_t* address = nullptr;
  size_t address_len = 0;
  s = ucp_worker_get_address(w->worker_, &address, &address_len);
  if (s != UCS_OK) return Status::Error(TPX_ERR_INTERNAL, "ucp_worker_get_address: " + UcsError(s));
  const std::string host = HostId();
  char state;
  uint64_t my_start = 0;
  ReadProcess(getpid(), &state, &my_start);
  const std::string identity =
      EncodeIdentity(host, getpid(), my_start, OwnCmaProbe(), address, address_len);
  ucp_worker_release_address(w->worker_, address);
  tpx_error_t err{};
  const tpx_store_v1_t& store = *config.store;
  int code = store.set(store.ctx, AddressKey(config, config.rank).c_str(), identity.data(),
                       identity.size(), &err);
  if (code != TPX_OK) {
    return Status::Error(code, std::string("publishing the UCX address: ") + err.message);
  }

  w->eps_.assign(config.size, nullptr);
  w->peer_status_.assign(config.size, UCS_OK);
  w->peer_failure_.assign(config.size, "");
  w->peers_.assign(config.size, PeerProcess{});
  const bool force_peer_mode = ForcePeerErrorMode();
  std::vector<CmaProbe> probes(config.size);
  w->err_args_.resize(config.size);
  for (int i = 0; i < config.size; ++i) {
    // Connect in a rotated order so that ranks do not all wait on rank 0;
    // i == 0 is this rank itself (UCX's loopback transport).
    int peer = (config.rank + i) % config.size;
    std::string blob, peer_host, peer_address;
    TPX_PLUGIN_RETURN_IF_ERROR(StoreGet(store, AddressKey(config, peer), config.timeout_ms, &blob));
    PeerProcess& proc = w->peers_[peer];
    if (!DecodeIdentity(blob, &peer_host, &proc.pid, &proc.start_time, &probes[peer],
                        &peer_address)) {
      return Status::Error(TPX_ERR_INTERNAL, "malformed UCX address of rank " +
                                                 std::to_string(peer) + " in the store");
    }
    proc.local = peer_host == host;
    w->err_args_[peer] = ErrArg{w.get(), peer};
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
    ep.err_mode = proc.local && !force_peer_mode ? UCP_ERR_HANDLING_MODE_NONE
                                                 : UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &Worker::OnEndpointError;
    ep.err_handler.arg = &w->err_args_[peer];
    s = ucp_ep_create(w->worker_, &ep, &w->eps_[peer]);
    if (s != UCS_OK) {
      return Status::Error(TPX_ERR_UNAVAILABLE, "connecting to rank " + std::to_string(peer) +
                                                    ": ucp_ep_create: " + UcsError(s));
    }
  }
  // Shared-memory endpoints attach the peer's segment when created; a peer
  // that tore its worker down before then (a short-lived communicator, a
  // quick Split) leaves an id that no longer exists ("shmat ... Invalid
  // argument"). So nobody proceeds until every rank has connected.
  TPX_PLUGIN_RETURN_IF_ERROR(ConnectedBarrier(config));
  // Every rank sees the same identities, so all or none set up the segment.
  bool all_local = config.size > 1;
  for (const PeerProcess& p : w->peers_) all_local = all_local && p.local;
  if (all_local) {
    bool cma = true;
    std::vector<int> pids(config.size);
    for (int peer = 0; peer < config.size; ++peer) {
      pids[peer] = w->peers_[peer].pid;
      if (peer != config.rank) cma = cma && CmaWorks(pids[peer], probes[peer]);
    }
    TPX_PLUGIN_RETURN_IF_ERROR(SharedSegment::Create(config, pids, cma, &w->shm_));
  }
  TPX_PLUGIN_RETURN_IF_ERROR(w->notices_.Start(w->worker_));
  *out = std::move(w);
  return Status();
}

Worker::Worker(int rank, int size)
    : rank_(rank), size_(size), notices_(rank, size), spin_us_(GetTunables().spin_us) {}

void Worker::NoteWaitEnded(bool while_polling) {
  const int64_t max = GetTunables().spin_us;
  spin_us_ = while_polling ? std::min(max, std::max<int64_t>(1, spin_us_ * 2))
                           : std::max<int64_t>(1, spin_us_ / 2);
}

void Worker::AnnounceFailure(int code, const std::string& why, const uint64_t* seq,
                             uint64_t public_seq) {
  if (failure_announced_ || closed_ || size_ == 1) return;
  failure_announced_ = true;
  // A send/recv failure fails the communicator: peers see it as a failure
  // of the collective before their next one.
  const uint64_t at = seq != nullptr ? *seq : (next_collective_ > 0 ? next_collective_ - 1 : 0);
  notices_.Broadcast(eps_, {AbortNotices::kFailed, code, at, public_seq, why});
}

void Worker::AnnounceRejected(const std::string& why, uint64_t seq, uint64_t public_seq) {
  if (closed_ || size_ == 1) return;
  notices_.Broadcast(eps_, {AbortNotices::kRejected, TPX_ERR_ABORTED, seq, public_seq, why});
}

void Worker::OnEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* a = static_cast<ErrArg*>(arg);
  a->worker->MarkFailed(a->peer, status, UcsError(status));
}

void Worker::MarkFailed(int peer, ucs_status_t status, std::string why) {
  if (peer_status_[peer] != UCS_OK) return;
  peer_status_[peer] = status;
  peer_failure_[peer] = std::move(why);
  failure_count_.fetch_add(1, std::memory_order_release);
}

void Worker::CheckLocalPeers() {
  const auto now = Clock::now();
  if (now < next_liveness_check_) return;
  next_liveness_check_ = now + std::chrono::milliseconds(20);
  for (int peer = 0; peer < size_; ++peer) {
    const PeerProcess& p = peers_[peer];
    if (!p.local || peer == rank_ || peer_status_[peer] != UCS_OK) continue;
    char state = '?';
    uint64_t start = 0;
    if (!ReadProcess(p.pid, &state, &start) || state == 'Z' || state == 'X' ||
        start != p.start_time) {
      MarkFailed(peer, UCS_ERR_CONNECTION_RESET,
                 "process " + std::to_string(p.pid) + " on this host has exited");
    }
  }
}

void Worker::Sleep(std::chrono::microseconds max_sleep) {
  if (efd_ < 0) {
    std::this_thread::sleep_for(max_sleep);
    return;
  }
  // Arming fails with BUSY when events are already pending: then just return.
  if (ucp_worker_arm(worker_) != UCS_OK) return;
  pollfd pfd{efd_, POLLIN, 0};
  timespec ts{static_cast<time_t>(max_sleep.count() / 1000000),
              static_cast<long>((max_sleep.count() % 1000000) * 1000)};
  ppoll(&pfd, 1, &ts, nullptr);
}

void Worker::CloseEndpoints(Clock::time_point deadline, bool force) {
  // Notices go out before a forced close could drop them.
  notices_.Flush(worker_, 50000);
  closed_ = true;
  std::vector<void*> pending;
  // eps_ is empty when Create failed before connecting (e.g. the store was gone).
  for (int peer = 0; peer < static_cast<int>(eps_.size()); ++peer) {
    if (eps_[peer] == nullptr) continue;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    // A failed peer cannot acknowledge a flush.
    param.flags = (force || peer_status_[peer] != UCS_OK) ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    void* req = ucp_ep_close_nbx(eps_[peer], &param);
    if (UCS_PTR_IS_PTR(req)) pending.push_back(req);
    eps_[peer] = nullptr;
  }
  for (void* req : pending) {
    while (ucp_request_check_status(req) == UCS_INPROGRESS && Clock::now() < deadline) {
      if (!Progress()) std::this_thread::yield();
    }
    // A close still in flight at the deadline is finished by worker destroy.
    ucp_request_free(req);
  }
}

Worker::~Worker() {
  if (worker_ == nullptr) return;
  if (!closed_) CloseEndpoints(Clock::now() + std::chrono::seconds(1), /*force=*/false);
  notices_.Stop(worker_);
  ucp_worker_destroy(worker_);
}

void Backoff::Idle(Worker& worker) {
  // Busy-poll for spin_us (a message usually arrives within microseconds),
  // then yield the core on every idle round so that oversubscribed ranks
  // (more ranks than cores) still run, then sleep on the worker's events.
  const Tunables& t = GetTunables();
  if (!idle_since_valid_) {
    idle_since_valid_ = true;
    idle_since_ = Clock::now();
    spins_ = 0;
  }
  if ((++spins_ & 15) != 0 && !yielding_) {
    __builtin_ia32_pause();
    return;
  }
  auto idle = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - idle_since_);
  if (idle.count() < worker.spin_us()) {
    __builtin_ia32_pause();
    return;
  }
  yielding_ = true;
  if (idle.count() < worker.spin_us() + t.yield_us) {
    sched_yield();
    return;
  }
  worker.Sleep(std::chrono::microseconds(500));
}

}  // namespace tpx::ucx
