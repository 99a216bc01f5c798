#include "comm_ucx/shm_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <thread>

#include "comm/plugin_log.h"
#include "comm_ucx/tunables.h"

namespace tpx::ucx {
namespace {

constexpr uint64_t kMagic = 0x7470785f73686d31ull;  // "tpx_shm1"

// The first bytes of the segment; control blocks follow.
struct alignas(128) SegmentHead {
  uint64_t magic;
  uint64_t nonce;
  uint64_t size;
  uint64_t slot_bytes;
  std::atomic<uint64_t> mapped;  // ranks that mapped it; the last unlinks
};

constexpr size_t RoundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

size_t Layout(int size, size_t slot_bytes, size_t* controls_at, size_t* data_at) {
  *controls_at = RoundUp(sizeof(SegmentHead), 128);
  *data_at = RoundUp(*controls_at + size * sizeof(ShmControl), 4096);
  return *data_at + static_cast<size_t>(size) * 2 * slot_bytes;
}

uint64_t Random64() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), 0) != sizeof(v)) {
    // No entropy source: unique enough for a name, which O_EXCL guards.
    v = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
        (static_cast<uint64_t>(getpid()) << 40);
  }
  return v;
}

Status StoreSet(const tpx_store_v1_t& store, const std::string& key, const std::string& value) {
  tpx_error_t err{};
  int code = store.set(store.ctx, key.c_str(), value.data(), value.size(), &err);
  if (code != TPX_OK) {
    return Status::Error(code, "writing '" + key + "' to the store: " + err.message);
  }
  return Status();
}

Status StoreGet(const tpx_store_v1_t& store, const std::string& key, int64_t timeout_ms,
                std::string* value) {
  tpx_error_t err{};
  char buf[512];
  size_t len = 0;
  int code = store.get(store.ctx, key.c_str(), buf, sizeof(buf), &len, timeout_ms, &err);
  if (code != TPX_OK) {
    return Status::Error(code, "reading '" + key + "' from the store: " + err.message);
  }
  value->assign(buf, std::min(len, sizeof(buf)));
  return Status();
}

}  // namespace

CmaProbe OwnCmaProbe() {
  static const uint64_t word = Random64() | 1;
  return CmaProbe{reinterpret_cast<uint64_t>(&word), word};
}

bool CmaWorks(int pid, const CmaProbe& probe) {
  uint64_t got = 0;
  iovec local{&got, sizeof(got)};
  iovec remote{reinterpret_cast<void*>(probe.address), sizeof(got)};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == sizeof(got) && got == probe.value;
}

Status SharedSegment::Create(const tpx_comm_config_v1_t& config, const std::vector<int>& pids,
                             bool cma_ok, std::unique_ptr<SharedSegment>* out) {
  out->reset();
  const Tunables& t = GetTunables();
  const tpx_store_v1_t& store = *config.store;
  const std::string prefix = std::string(config.name) + "/ucx/shm";
  const int n = config.size, r = config.rank;
  std::unique_ptr<SharedSegment> seg(new SharedSegment());
  seg->rank_ = r;
  seg->size_ = n;
  seg->slot_bytes_ = RoundUp(std::max<size_t>(t.shm_bytes, 4096), 4096);
  seg->pids_ = pids;
  size_t controls_at = 0, data_at = 0;
  seg->map_bytes_ = Layout(n, seg->slot_bytes_, &controls_at, &data_at);

  // Rank 0 creates, sizes and maps the object, writes its head, then
  // publishes "<name> <nonce>" (or "-"); the others map it and check the head.
  std::string name;
  uint64_t nonce = 0;
  bool ok = false;
  auto map_it = [&](int fd) {
    void* map = mmap(nullptr, seg->map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return false;
    seg->map_ = map;
    seg->controls_ = reinterpret_cast<ShmControl*>(static_cast<char*>(map) + controls_at);
    seg->data_ = static_cast<char*>(map) + data_at;
    return true;
  };
  if (r == 0) {
    std::string published = "-";
    if (t.shm) {
      nonce = Random64();
      char buf[96];
      std::snprintf(buf, sizeof(buf), "/tpx-ucx-%d-%016llx", static_cast<int>(getpid()),
                    static_cast<unsigned long long>(Random64()));
      name = buf;
      int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
      // Reserve the pages now: a tmpfs that runs out later would kill the
      // process with SIGBUS on first touch instead of returning an error.
      if (fd >= 0 && (ftruncate(fd, seg->map_bytes_) != 0 ||
                      posix_fallocate(fd, 0, seg->map_bytes_) != 0)) {
        TPX_PLUGIN_LOG(WARNING) << "ucx: cannot size shared memory segment " << name << " ("
                                << seg->map_bytes_ << " bytes): " << std::strerror(errno)
                                << "; using UCX only";
        close(fd);
        fd = -1;
      }
      if (fd >= 0 && map_it(fd)) {
        auto* head = static_cast<SegmentHead*>(seg->map_);
        head->nonce = nonce;
        head->size = n;
        head->slot_bytes = seg->slot_bytes_;
        head->magic = kMagic;
        head->mapped.store(1);
        ok = true;
        published = name + " " + std::to_string(nonce);
      } else if (fd >= 0 || errno != EEXIST) {
        shm_unlink(name.c_str());
      }
    }
    Status s = StoreSet(store, prefix, published);
    if (!s.ok()) {
      if (ok) shm_unlink(name.c_str());
      return s;
    }
  } else {
    std::string published;
    TPX_PLUGIN_RETURN_IF_ERROR(StoreGet(store, prefix, config.timeout_ms, &published));
    const size_t space = published.find(' ');
    if (t.shm && space != std::string::npos) {
      name = published.substr(0, space);
      nonce = std::strtoull(published.c_str() + space + 1, nullptr, 10);
      int fd = shm_open(name.c_str(), O_RDWR, 0);
      struct stat st{};
      if (fd >= 0 && (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != seg->map_bytes_)) {
        close(fd);
        fd = -1;
      }
      if (fd >= 0 && map_it(fd)) {
        auto* head = static_cast<SegmentHead*>(seg->map_);
        // Written by rank 0 before it published the name.
        ok = head->magic == kMagic && head->nonce == nonce &&
             head->size == static_cast<uint64_t>(n) && head->slot_bytes == seg->slot_bytes_;
        if (ok && head->mapped.fetch_add(1) + 1 == static_cast<uint64_t>(n)) {
          shm_unlink(name.c_str());
        }
      }
    }
  }
  // Every rank says whether it mapped the segment and can read every peer,
  // and how it would take mid-size all-gather blocks (rank 0's decides).
  const std::string answer = std::string(ok ? "1" : "0") + (cma_ok && t.cma ? "1" : "0") +
                             static_cast<char>('0' + t.shm_mid_allgather);
  Status s = StoreSet(store, prefix + "/ok/" + std::to_string(r), answer);
  bool all_ok = ok, all_cma = cma_ok && t.cma;
  char rank0_mode = '0';
  for (int i = 0; i < n && s.ok(); ++i) {
    std::string v;
    s = StoreGet(store, prefix + "/ok/" + std::to_string(i), config.timeout_ms, &v);
    all_ok = all_ok && v.size() == 3 && v[0] == '1';
    all_cma = all_cma && v.size() == 3 && v[1] == '1';
    if (i == 0 && v.size() == 3) rank0_mode = v[2];
  }
  // Every rank has answered (or the store failed): nobody maps it any more.
  if (r == 0 && ok) shm_unlink(name.c_str());
  TPX_PLUGIN_RETURN_IF_ERROR(s);
  if (!all_ok) {
    if (t.shm && r == 0) {
      TPX_PLUGIN_LOG(INFO) << "ucx: communicator '" << config.name
                           << "': not every rank could map the shared memory segment; "
                              "using UCX only";
    }
    return Status();  // seg's destructor unmaps
  }
  // A fresh segment is all zero: stage 0, nothing posted.
  seg->cma_ = all_cma;
  seg->largest_slot_block_ = t.shm_bytes / 4;
  if (n == 2 && all_cma) {
    TPX_PLUGIN_RETURN_IF_ERROR(seg->ChooseAllGatherPaths(config, prefix, rank0_mode));
  }
  *out = std::move(seg);
  return Status();
}

bool SharedSegment::MeasureBlockPaths(size_t bytes, int64_t* via_slots_ns, int64_t* direct_ns) {
  using Clock = std::chrono::steady_clock;
  constexpr int kRounds = 8;
  const int peer = 1 - rank_;
  ShmControl& own = control(rank_);
  ShmControl& other = control(peer);
  // The block as its producer just wrote it, and the slot path's copy.
  char* produced = slot(rank_, 1);
  char* staged = slot(rank_, 0);
  own.setup_block_addr = reinterpret_cast<uint64_t>(produced);
  std::vector<char> out(bytes);
  uint64_t step = 0;
  // Both ranks at the same step, or false after a second (a peer that is
  // gone or descheduled; the choice then falls back for both).
  auto meet = [&] {
    own.setup_step.store(++step, std::memory_order_release);
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(1);
    while (other.setup_step.load(std::memory_order_acquire) < step) {
      if (Clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  };
  auto ns_since = [](Clock::time_point t0) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  };
  *via_slots_ns = *direct_ns = std::numeric_limits<int64_t>::max();
  for (int round = 0; round < kRounds; ++round) {
    std::memset(produced, round + 1, bytes);
    Clock::time_point t0 = Clock::now();
    std::memcpy(staged, produced, bytes);
    const int64_t copy_in = ns_since(t0);
    if (!meet()) return false;
    int64_t copy_out = 0, direct = 0;
    // Either way first, by turns: the second read finds the peer's lines
    // already moving.
    for (int way = 0; way < 2; ++way) {
      t0 = Clock::now();
      if ((way + round) % 2 == 0) {
        std::memcpy(out.data(), slot(peer, 0), bytes);
        copy_out = ns_since(t0);
      } else {
        iovec local{out.data(), bytes};
        iovec remote{reinterpret_cast<void*>(other.setup_block_addr), bytes};
        if (process_vm_readv(pids_[peer], &local, 1, &remote, 1, 0) !=
            static_cast<ssize_t>(bytes)) {
          return false;
        }
        direct = ns_since(t0);
      }
    }
    // The peer has read this rank's block before the next round rewrites it.
    if (!meet()) return false;
    *via_slots_ns = std::min(*via_slots_ns, copy_in + copy_out);
    *direct_ns = std::min(*direct_ns, direct);
  }
  return true;
}

Status SharedSegment::ChooseAllGatherPaths(const tpx_comm_config_v1_t& config,
                                           const std::string& prefix, char rank0_mode) {
  // TPX_UCX_SHM_BYTES, which the slots hold (rounded up to pages).
  const size_t slot_limit = GetTunables().shm_bytes;
  if (rank0_mode == '1') {
    largest_slot_block_ = slot_limit;
    return Status();
  }
  if (rank0_mode != '0' || slot_limit < 64) return Status();
  // Blocks from a quarter of a slot to all of it: two copies through the
  // slots (the second of lines the peer's core just wrote), or one system
  // call that pins the peer's pages and one copy. Which is faster depends
  // on where the ranks run: 32 KiB blocks took 2.2 us through the slots
  // and 4.3 us read directly where the two cores shared a cache, 7.3 and
  // 4.9 us on another host. Measured at half a slot.
  int64_t slots_ns = 0, direct_ns = 0;
  const bool measured = MeasureBlockPaths(slot_limit / 2, &slots_ns, &direct_ns);
  const tpx_store_v1_t& store = *config.store;
  TPX_PLUGIN_RETURN_IF_ERROR(StoreSet(
      store, prefix + "/mid/" + std::to_string(rank_),
      measured ? std::to_string(slots_ns) + " " + std::to_string(direct_ns) : std::string("-")));
  int64_t slots_total = 0, direct_total = 0;
  bool all_measured = true;
  for (int i = 0; i < size_; ++i) {
    std::string v;
    TPX_PLUGIN_RETURN_IF_ERROR(
        StoreGet(store, prefix + "/mid/" + std::to_string(i), config.timeout_ms, &v));
    long long s = 0, d = 0;
    if (std::sscanf(v.c_str(), "%lld %lld", &s, &d) != 2) {
      all_measured = false;
      continue;
    }
    slots_total += s;
    direct_total += d;
  }
  // The probe times the copies alone, but in the operation the slots also
  // cost a post and a wait between the two copies: on a host where the probe
  // read both ways as even (32 KiB blocks: 4.5-5.6 us either way) direct
  // reads took all-gathers of 64 and 128 KiB 1.3x faster (7.2 against 9.5-10
  // us, 10.5 against 13-13.5). So the slots must win the copies clearly.
  constexpr int64_t kSlotsMarginPercent = 80;
  if (all_measured && slots_total * 100 < direct_total * kSlotsMarginPercent) {
    largest_slot_block_ = slot_limit;
  }
  if (rank_ == 0) {
    TPX_PLUGIN_LOG(INFO) << "ucx: communicator '" << config.name << "': all-gather blocks of up to "
                         << largest_slot_block_ << " bytes go through shared memory"
                         << (all_measured
                                 ? " (measured at " + std::to_string(slot_limit / 2) +
                                       " bytes: " + std::to_string(slots_total / 2) +
                                       " ns that way, " + std::to_string(direct_total / 2) +
                                       " ns read directly, per rank)"
                                 : " (not measured: a rank did not keep pace)");
  }
  return Status();
}

SharedSegment::~SharedSegment() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

Status SharedSegment::ReadPeer(int peer, uint64_t remote, void* local, size_t bytes) const {
  char* dst = static_cast<char*>(local);
  while (bytes > 0) {
    iovec l{dst, bytes};
    iovec rv{reinterpret_cast<void*>(remote), bytes};
    const ssize_t got = process_vm_readv(pids_[peer], &l, 1, &rv, 1, 0);
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      return Status::Error(TPX_ERR_UNAVAILABLE, "reading rank " + std::to_string(peer) +
                                                    "'s buffer (process " +
                                                    std::to_string(pids_[peer]) + ") failed: " +
                                                    (got < 0 ? std::strerror(errno) : "no data"));
    }
    dst += got;
    remote += got;
    bytes -= got;
  }
  return Status();
}

}  // namespace tpx::ucx
