#include "bench/shm_exchange_floor.h"

#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>

#include <atomic>
#include <new>
#include <thread>

#include "absl/strings/str_cat.h"

namespace tpx::bench {
namespace {

constexpr int kMaxRanks = 64;
// Turns a rank spins waiting for a peer before it yields between looks:
// none where the ranks outnumber the cores (a spinning rank would hold the
// core its peer needs for a whole time slice).
uint32_t SpinsBeforeYield(int world) {
  return world > static_cast<int>(std::thread::hardware_concurrency()) ? 0 : 1 << 12;
}

// out = a + b and dst = src in the widest vectors the CPU has, as the
// plugin's kernels run (glibc's memcpy takes `rep movsb` from 2 KiB, slower
// for these sizes on some cores). Buffers do not overlap, except out == a.
__attribute__((target_clones("avx512f", "avx2", "default"))) void Add(const float* a,
                                                                       const float* __restrict b,
                                                                       float* out, int64_t n) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void Copy(
    float* __restrict dst, const float* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

size_t RoundUp(size_t bytes) { return (bytes + 4095) / 4096 * 4096; }

}  // namespace

// One flag per rank on its own cache line: the last operation it has
// copied its contribution for.
struct ShmExchangeFloor::Control {
  struct alignas(64) Flag {
    std::atomic<uint64_t> op{0};
  };
  Flag flags[kMaxRanks];
};

absl::StatusOr<std::unique_ptr<ShmExchangeFloor>> ShmExchangeFloor::Create(
    int world, int64_t max_bytes, std::chrono::milliseconds wait_limit) {
  if (world < 1 || world > kMaxRanks || max_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShmExchangeFloor: world ", world, " (1-", kMaxRanks, "), max_bytes ",
                     max_bytes));
  }
  // Two slots per rank: a rank may copy in for the next operation while a
  // slower peer still reads this one's.
  const size_t bytes = RoundUp(sizeof(Control)) + 2 * world * RoundUp(max_bytes);
  void* mapping = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("ShmExchangeFloor: cannot map ", bytes, " bytes of shared memory"));
  }
  return std::unique_ptr<ShmExchangeFloor>(
      new ShmExchangeFloor(world, max_bytes, wait_limit, mapping, bytes));
}

ShmExchangeFloor::ShmExchangeFloor(int world, int64_t max_bytes,
                                   std::chrono::milliseconds wait_limit, void* mapping,
                                   size_t mapping_bytes)
    : world_(world),
      max_bytes_(max_bytes),
      wait_limit_(wait_limit),
      mapping_(mapping),
      mapping_bytes_(mapping_bytes),
      control_(new (mapping) Control),
      spins_before_yield_(SpinsBeforeYield(world)) {}

ShmExchangeFloor::~ShmExchangeFloor() { munmap(mapping_, mapping_bytes_); }

float* ShmExchangeFloor::slot(int rank, uint64_t op) {
  char* slots = static_cast<char*>(mapping_) + RoundUp(sizeof(Control));
  return reinterpret_cast<float*>(slots + (2 * rank + (op & 1)) * RoundUp(max_bytes_));
}

bool ShmExchangeFloor::Covers(const std::string& op, int64_t bytes) const {
  if (bytes % (4 * world_) != 0) return false;
  if (op == "all_reduce" || op == "reduce_scatter") return bytes <= max_bytes_;
  if (op == "all_gather") return bytes / world_ <= max_bytes_;
  return false;
}

std::string ShmExchangeFloor::Exchange(int rank, uint64_t op) {
  control_->flags[rank].op.store(op, std::memory_order_release);
  for (int peer = 0; peer < world_; ++peer) {
    if (peer == rank) continue;
    const std::atomic<uint64_t>& flag = control_->flags[peer].op;
    // Spins, then yields the core between looks. The clock only every 2^12
    // turns; the limit counts from the first look.
    auto deadline = std::chrono::steady_clock::time_point::min();
    for (uint32_t spins = 1; flag.load(std::memory_order_acquire) < op; ++spins) {
      if (spins < spins_before_yield_) {
        _mm_pause();
        continue;
      }
      sched_yield();
      if (spins % (1 << 12) != 0) continue;
      const auto now = std::chrono::steady_clock::now();
      if (deadline == std::chrono::steady_clock::time_point::min()) {
        deadline = now + wait_limit_;
      } else if (now > deadline) {
        return absl::StrCat("shm floor: rank ", peer, " did not reach operation ", op, " within ",
                            wait_limit_.count(), " ms");
      }
    }
  }
  return "";
}

std::string ShmExchangeFloor::Barrier(int rank) { return Exchange(rank, ++ops_); }

std::string ShmExchangeFloor::Run(int rank, const std::string& op, int64_t bytes,
                                  const float* send, float* recv) {
  if (!Covers(op, bytes)) {
    return absl::StrCat("shm floor: ", op, " of ", bytes, " bytes is not covered");
  }
  const uint64_t id = ++ops_;
  const int64_t n = bytes / 4, block = n / world_;
  if (op == "all_reduce") {
    Copy(slot(rank, id), send, n);
    if (std::string e = Exchange(rank, id); !e.empty()) return e;
    // Ranks in order, the first two summed straight into recv.
    const float* first = rank == 0 ? send : slot(0, id);
    if (world_ == 1) {
      Copy(recv, first, n);
      return "";
    }
    Add(first, rank == 1 ? send : slot(1, id), recv, n);
    for (int r = 2; r < world_; ++r) Add(recv, r == rank ? send : slot(r, id), recv, n);
    return "";
  }
  if (op == "all_gather") {
    Copy(slot(rank, id), send, block);
    if (std::string e = Exchange(rank, id); !e.empty()) return e;
    for (int r = 0; r < world_; ++r) {
      Copy(recv + r * block, r == rank ? send : slot(r, id), block);
    }
    return "";
  }
  // reduce_scatter: every block but this rank's own goes to the peers.
  for (int r = 0; r < world_; ++r) {
    if (r != rank) Copy(slot(rank, id) + r * block, send + r * block, block);
  }
  if (std::string e = Exchange(rank, id); !e.empty()) return e;
  auto block_of = [&](int r) { return (r == rank ? send : slot(r, id)) + rank * block; };
  if (world_ == 1) {
    Copy(recv, send, block);
    return "";
  }
  Add(block_of(0), block_of(1), recv, block);
  for (int r = 2; r < world_; ++r) Add(recv, block_of(r), recv, block);
  return "";
}

}  // namespace tpx::bench
