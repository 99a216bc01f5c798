#include "comm_nccl/staging.h"

#include <cuda_runtime_api.h>

namespace tpx::nccl {
namespace {

// Rounding keeps slightly different sizes on the same cached block.
constexpr size_t kGranule = size_t{64} << 10;

size_t RoundUp(size_t bytes) { return (bytes + kGranule - 1) / kGranule * kGranule; }

}  // namespace

StagingPool::~StagingPool() {
  for (auto& [bytes, ptr] : free_device_) cudaFree(ptr);
  for (auto& [bytes, ptr] : free_pinned_) cudaFreeHost(ptr);
}

Status StagingPool::Acquire(size_t bytes, bool pinned, Block* out) {
  const size_t rounded = RoundUp(bytes == 0 ? 1 : bytes);
  auto& free_list = pinned ? free_pinned_ : free_device_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Smallest cached block that fits, but not one more than twice as large:
    // a huge block should not be tied up by a tiny operation.
    auto it = free_list.lower_bound(rounded);
    if (it != free_list.end() && it->first <= 2 * rounded) {
      *out = Block{it->second, it->first, pinned};
      free_list.erase(it);
      return Status();
    }
  }
  void* ptr = nullptr;
  const std::string what = std::string(pinned ? "cudaMallocHost" : "cudaMalloc") + "(" +
                           std::to_string(rounded) + " bytes) for nccl staging";
  TPX_PLUGIN_RETURN_IF_ERROR(
      CudaCall(pinned ? cudaMallocHost(&ptr, rounded) : cudaMalloc(&ptr, rounded), what));
  *out = Block{ptr, rounded, pinned};
  return Status();
}

void StagingPool::Release(const Block& block) {
  if (block.ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  (block.pinned ? free_pinned_ : free_device_).emplace(block.bytes, block.ptr);
}

bool IsDeviceAccessible(const void* ptr) {
  if (ptr == nullptr) return true;
  cudaPointerAttributes attrs{};
  if (cudaPointerGetAttributes(&attrs, ptr) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attrs.type == cudaMemoryTypeDevice || attrs.type == cudaMemoryTypeManaged;
}

}  // namespace tpx::nccl
