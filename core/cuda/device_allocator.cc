#include "core/cuda/device_allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>

#include "core/cuda/device_guard.h"

namespace tpx::cuda {
namespace {

constexpr size_t kSmallStep = 512;
constexpr size_t kSmallLimit = size_t{1} << 20;
constexpr size_t kLargeStep = size_t{2} << 20;

size_t RoundUp(size_t value, size_t step) { return (value + step - 1) / step * step; }

}  // namespace

size_t RoundAllocationSize(size_t bytes) {
  if (bytes == 0) return kSmallStep;
  return bytes <= kSmallLimit ? RoundUp(bytes, kSmallStep) : RoundUp(bytes, kLargeStep);
}

CudaCachingAllocator::~CudaCachingAllocator() { EmptyCache(); }

void* CudaCachingAllocator::Allocate(size_t bytes) {
  const size_t size = RoundAllocationSize(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* ptr = nullptr;
  auto it = cache_.find(size);
  if (it != cache_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
  } else {
    DeviceGuard guard(device_);  // the caller's current device is left alone
    if (!guard.status().ok()) return nullptr;
    cudaError_t rc = cudaMalloc(&ptr, size);
    if (rc == cudaErrorMemoryAllocation) {
      // Cached blocks of other sizes may be what fills the device.
      cudaGetLastError();
      for (auto& [cached_size, blocks] : cache_) {
        for (void* block : blocks) cudaFree(block);
        stats_.reserved_bytes -= static_cast<int64_t>(cached_size * blocks.size());
        blocks.clear();
      }
      rc = cudaMalloc(&ptr, size);
    }
    if (rc != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    ++stats_.device_mallocs;
    stats_.reserved_bytes += static_cast<int64_t>(size);
  }
  stats_.allocated_bytes += static_cast<int64_t>(size);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return ptr;
}

void CudaCachingAllocator::Deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  const size_t size = RoundAllocationSize(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  cache_[size].push_back(ptr);
  stats_.allocated_bytes -= static_cast<int64_t>(size);
}

void CudaCachingAllocator::EmptyCache() {
  std::lock_guard<std::mutex> lock(mu_);
  if (cache_.empty()) return;
  DeviceGuard guard(device_);
  for (auto& [size, blocks] : cache_) {
    for (void* block : blocks) cudaFree(block);
    stats_.reserved_bytes -= static_cast<int64_t>(size * blocks.size());
  }
  cache_.clear();
}

CudaCachingAllocator::Stats CudaCachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

CudaCachingAllocator& GetCudaAllocator(int device) {
  static std::mutex mu;
  // Never destroyed: blocks may be freed during static destruction.
  static auto* allocators = new std::map<int, std::unique_ptr<CudaCachingAllocator>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*allocators)[device];
  if (!slot) slot = std::make_unique<CudaCachingAllocator>(device);
  return *slot;
}

}  // namespace tpx::cuda
