// Memory allocators behind tensor storage.
//
// The CPU allocator returns 64-byte aligned blocks (one cache line, one
// AVX-512 register) and counts live and peak bytes, so a program can show
// how much activation memory a technique such as recomputation saves:
//
//   CpuAllocator& alloc = GetCpuAllocator();
//   alloc.ResetPeak();
//   RunForward();
//   int64_t peak = alloc.PeakBytes();
//
// It also keeps freed blocks of 4 KiB and more for reuse by a later
// allocation of the same rounded size. A training step allocates the same
// activation and gradient sizes every time, so from the second step on it
// gets warm, already-mapped memory instead of fresh pages from the kernel
// (each a page fault on first touch). The cache is bounded; past the bound
// freed blocks go back to the system.
//
// Blocks of 2 MiB and more are mapped on their own at a 2 MiB boundary and
// marked for transparent huge pages (where the kernel offers them, also in
// its "madvise" mode), and blocks of 128 KiB to 2 MiB whose size fills a
// huge page well share huge pages (core/huge_pages.h): one page-table entry
// and one fault per 2 MiB instead of 512, fewer TLB misses in the kernels
// that stream them, and a peer that reads such a tensor with
// process_vm_readv (the UCX plugin's single-copy path) pins one page
// instead of 512.
//
// Environment of the process-wide allocator: TPX_CPU_ALLOCATOR_CACHE=0
// turns the cache off; TPX_CPU_ALLOCATOR_CACHE_MB sets the bound (default
// 2048); TPX_CPU_ALLOCATOR_HUGE_PAGES=0 leaves all blocks on normal pages.
#ifndef TPX_CORE_ALLOCATOR_H_
#define TPX_CORE_ALLOCATOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/device.h"
#include "core/huge_pages.h"

namespace tpx {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns nullptr when memory is exhausted. Allocate(0) returns a valid
  // (non-null) pointer that must still be passed to Deallocate.
  virtual void* Allocate(size_t bytes) = 0;
  // `bytes` must be the size given to Allocate.
  virtual void Deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;
};

// Thread-safe.
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  // Blocks below this go straight to malloc/free (whose own free lists
  // already reuse them without page faults).
  static constexpr size_t kMinCachedBytes = 4096;
  static constexpr size_t kDefaultCacheLimitBytes = size_t{2048} << 20;
  // Blocks from this size on are mapped on their own, aligned to it (the
  // x86-64 huge page).
  static constexpr size_t kHugePageBytes = tpx::kHugePageBytes;
  // Whether blocks ever leave malloc (large ones mapped on their own,
  // mid-sized ones from HugePageSlabs): not under AddressSanitizer, whose
  // checks cover malloc's blocks only.
#if defined(__SANITIZE_ADDRESS__)
  static constexpr bool kMapsLargeBlocks = false;
#elif defined(__has_feature)
  static constexpr bool kMapsLargeBlocks = !__has_feature(address_sanitizer);
#else
  static constexpr bool kMapsLargeBlocks = true;
#endif

  // cache_limit_bytes = 0: no cache. huge_pages: whether blocks of
  // kHugePageBytes and more ask for transparent huge pages (they are mapped
  // on their own either way) and smaller ones share them (HugePageSlabs).
  explicit CpuAllocator(size_t cache_limit_bytes = kDefaultCacheLimitBytes, bool huge_pages = true)
      : cache_limit_(cache_limit_bytes), huge_pages_(huge_pages) {}
  ~CpuAllocator() override;

  void* Allocate(size_t bytes) override;
  void Deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return Device::CPU(); }
  // Whether blocks ask for transparent huge pages (see the constructor).
  bool huge_pages() const { return huge_pages_; }

  // Bytes currently allocated (requested sizes, not rounded; cached blocks
  // do not count).
  int64_t CurrentBytes() const { return current_.load(std::memory_order_relaxed); }
  // Highest CurrentBytes() since construction or the last ResetPeak().
  int64_t PeakBytes() const { return peak_.load(std::memory_order_relaxed); }
  // Sets the peak to the current value.
  void ResetPeak();

  // Bytes held in the cache of freed blocks (<= the limit).
  int64_t CachedBytes() const;
  // Returns every cached block to the system.
  void ReleaseCache();

 private:
  // Whether blocks of this rounded size come from slabs_.
  bool FromSlabs(size_t rounded) const;
  // Returns a block that is not kept in the cache to where it came from.
  void Release(void* ptr, size_t rounded);

  const size_t cache_limit_;
  const bool huge_pages_;
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_blocks_;  // by rounded size
  size_t cached_bytes_ = 0;
  HugePageSlabs slabs_;  // under mu_
};

// The process-wide CPU allocator used by all CPU tensors (cache settings
// from the environment, read once).
CpuAllocator& GetCpuAllocator();

}  // namespace tpx

#endif  // TPX_CORE_ALLOCATOR_H_
