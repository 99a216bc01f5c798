// A caching allocator for CUDA device memory: blocks go back to a per-size
// cache on Deallocate and are handed out again, so steady-state training
// steps make no cudaMalloc/cudaFree calls.
//
//   CudaCachingAllocator& alloc = GetCudaAllocator(/*device=*/0);
//   void* p = alloc.Allocate(bytes);       // nullptr when the device is full
//   ...
//   alloc.Deallocate(p, bytes);            // cached, not freed
//   alloc.EmptyCache();                    // really frees cached blocks
//
// Sizes are rounded to a size class (RoundAllocationSize): 512-byte steps up
// to 1 MiB, then 2 MiB steps, so nearby sizes share blocks. Reuse is
// immediate: memory freed here may be handed out while a kernel queued on
// another stream still uses it; callers that use several streams order the
// free after that work (record/wait an event) before deallocating.
#ifndef TPX_CORE_CUDA_DEVICE_ALLOCATOR_H_
#define TPX_CORE_CUDA_DEVICE_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"

namespace tpx::cuda {

// The size class a request of `bytes` is served from (>= bytes, > 0).
size_t RoundAllocationSize(size_t bytes);

// Thread-safe.
class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int device) : device_(device) {}
  ~CudaCachingAllocator() override;

  void* Allocate(size_t bytes) override;
  void Deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return Device::CUDA(device_); }

  // Frees every cached (unused) block.
  void EmptyCache();

  struct Stats {
    int64_t allocated_bytes = 0;       // in use by callers (size classes)
    int64_t reserved_bytes = 0;        // allocated + cached
    int64_t peak_allocated_bytes = 0;
    int64_t device_mallocs = 0;        // cudaMalloc calls so far
  };
  Stats stats() const;

 private:
  const int device_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> cache_;  // size class -> free blocks
  Stats stats_;
};

// The process-wide allocator for `device` (created on first use).
CudaCachingAllocator& GetCudaAllocator(int device);

}  // namespace tpx::cuda

#endif  // TPX_CORE_CUDA_DEVICE_ALLOCATOR_H_
