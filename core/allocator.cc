#include "core/allocator.h"

#include <cstdlib>

namespace tpx {

void* CpuAllocator::Allocate(size_t bytes) {
  // aligned_alloc needs a size that is a multiple of the alignment (and > 0).
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded == 0) rounded = kAlignment;
  void* ptr = std::aligned_alloc(kAlignment, rounded);
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
  std::free(ptr);
  current_.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
}

void CpuAllocator::ResetPeak() { peak_.store(CurrentBytes(), std::memory_order_relaxed); }

CpuAllocator& GetCpuAllocator() {
  static CpuAllocator* allocator = new CpuAllocator();  // never destroyed: outlives all tensors
  return *allocator;
}

}  // namespace tpx
