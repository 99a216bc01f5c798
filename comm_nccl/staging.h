// Device and pinned-host buffers that stage host-memory operands of NCCL
// operations. tpx's host communicator works on CPU tensors; NCCL only reads
// device memory, so such operands are copied host -> pinned -> device before
// the operation and device -> pinned -> host after it. Blocks are cached by
// size: an operation never calls cudaMalloc/cudaMallocHost once the pool has
// warmed up.
//
//   StagingPool pool;
//   StagingPool::Block dev;
//   TPX_PLUGIN_RETURN_IF_ERROR(pool.AcquireDevice(bytes, &dev));
//   ...
//   pool.Release(dev);
#ifndef TPX_COMM_NCCL_STAGING_H_
#define TPX_COMM_NCCL_STAGING_H_

#include <cstddef>
#include <map>
#include <mutex>

#include "comm_nccl/status.h"

namespace tpx::nccl {

// Thread-safe. The owner sets the CUDA device before calling.
class StagingPool {
 public:
  struct Block {
    void* ptr = nullptr;
    size_t bytes = 0;
    bool pinned = false;  // cudaMallocHost memory (else cudaMalloc)
  };

  StagingPool() = default;
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;
  ~StagingPool();  // frees cached blocks; blocks still out are the caller's

  Status AcquireDevice(size_t bytes, Block* out) { return Acquire(bytes, false, out); }
  Status AcquirePinned(size_t bytes, Block* out) { return Acquire(bytes, true, out); }
  void Release(const Block& block);

 private:
  Status Acquire(size_t bytes, bool pinned, Block* out);
  std::mutex mu_;
  std::multimap<size_t, void*> free_device_, free_pinned_;
};

// True when `ptr` is memory a CUDA kernel can read directly (device or
// managed memory). Null counts as device memory: there is nothing to stage.
bool IsDeviceAccessible(const void* ptr);

}  // namespace tpx::nccl

#endif  // TPX_COMM_NCCL_STAGING_H_
