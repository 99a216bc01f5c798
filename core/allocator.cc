#include "core/allocator.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace tpx {
namespace {

// The size a block of `bytes` is allocated and cached as: whole pages for
// cached sizes (so nearby sizes share blocks), whole alignment units below.
size_t RoundedSize(size_t bytes) {
  if (bytes >= CpuAllocator::kMinCachedBytes) {
    return (bytes + CpuAllocator::kMinCachedBytes - 1) / CpuAllocator::kMinCachedBytes *
           CpuAllocator::kMinCachedBytes;
  }
  // aligned_alloc needs a size that is a multiple of the alignment (and > 0).
  const size_t rounded =
      (bytes + CpuAllocator::kAlignment - 1) / CpuAllocator::kAlignment * CpuAllocator::kAlignment;
  return rounded == 0 ? CpuAllocator::kAlignment : rounded;
}

// Whether a block of this rounded size is mapped on its own
// (MapHugePageAligned).
bool IsLarge(size_t rounded) {
  return CpuAllocator::kMapsLargeBlocks && rounded >= CpuAllocator::kHugePageBytes;
}

bool HugePagesFromEnv() {
  const char* on = std::getenv("TPX_CPU_ALLOCATOR_HUGE_PAGES");
  return on == nullptr || std::strcmp(on, "0") != 0;
}

size_t CacheLimitFromEnv() {
  const char* on = std::getenv("TPX_CPU_ALLOCATOR_CACHE");
  if (on != nullptr && std::strcmp(on, "0") == 0) return 0;
  if (const char* mb = std::getenv("TPX_CPU_ALLOCATOR_CACHE_MB")) {
    char* end = nullptr;
    const long long v = std::strtoll(mb, &end, 10);
    if (end != mb && *end == '\0' && v >= 0) return static_cast<size_t>(v) << 20;
  }
  return CpuAllocator::kDefaultCacheLimitBytes;
}

}  // namespace

CpuAllocator::~CpuAllocator() { ReleaseCache(); }

bool CpuAllocator::FromSlabs(size_t rounded) const {
  return kMapsLargeBlocks && huge_pages_ && HugePageSlabs::Fits(rounded);
}

void CpuAllocator::Release(void* ptr, size_t rounded) {
  if (IsLarge(rounded)) {
    UnmapBlock(ptr, rounded);
  } else if (FromSlabs(rounded)) {
    std::lock_guard<std::mutex> lock(mu_);
    slabs_.Give(ptr);
  } else {
    std::free(ptr);
  }
}

void* CpuAllocator::Allocate(size_t bytes) {
  const size_t rounded = RoundedSize(bytes);
  void* ptr = nullptr;
  if (cache_limit_ > 0 && rounded >= kMinCachedBytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_blocks_.find(rounded);
    if (it != free_blocks_.end() && !it->second.empty()) {
      ptr = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= rounded;
    }
  }
  if (ptr == nullptr) {
    if (IsLarge(rounded)) {
      ptr = MapHugePageAligned(rounded, huge_pages_);
    } else if (FromSlabs(rounded)) {
      std::lock_guard<std::mutex> lock(mu_);
      ptr = slabs_.Take(rounded);
    } else {
      ptr = std::aligned_alloc(kAlignment, rounded);
    }
  }
  if (ptr == nullptr) return nullptr;
  int64_t now = current_.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed) +
                static_cast<int64_t>(bytes);
  int64_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return ptr;
}

void CpuAllocator::Deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  current_.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  const size_t rounded = RoundedSize(bytes);
  if (cache_limit_ > 0 && rounded >= kMinCachedBytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_bytes_ + rounded <= cache_limit_) {
      free_blocks_[rounded].push_back(ptr);
      cached_bytes_ += rounded;
      return;
    }
  }
  Release(ptr, rounded);
}

void CpuAllocator::ResetPeak() { peak_.store(CurrentBytes(), std::memory_order_relaxed); }

int64_t CpuAllocator::CachedBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(cached_bytes_);
}

void CpuAllocator::ReleaseCache() {
  std::unordered_map<size_t, std::vector<void*>> blocks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks.swap(free_blocks_);
    cached_bytes_ = 0;
  }
  for (auto& [size, list] : blocks) {
    for (void* p : list) Release(p, size);
  }
}

CpuAllocator& GetCpuAllocator() {
  // Never destroyed: outlives all tensors.
  static CpuAllocator* allocator = new CpuAllocator(CacheLimitFromEnv(), HugePagesFromEnv());
  return *allocator;
}

}  // namespace tpx
