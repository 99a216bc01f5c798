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
#ifndef TPX_CORE_ALLOCATOR_H_
#define TPX_CORE_ALLOCATOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/device.h"

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

  void* Allocate(size_t bytes) override;
  void Deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return Device::CPU(); }

  // Bytes currently allocated (requested sizes, not rounded).
  int64_t CurrentBytes() const { return current_.load(std::memory_order_relaxed); }
  // Highest CurrentBytes() since construction or the last ResetPeak().
  int64_t PeakBytes() const { return peak_.load(std::memory_order_relaxed); }
  // Sets the peak to the current value.
  void ResetPeak();

 private:
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
};

// The process-wide CPU allocator used by all CPU tensors.
CpuAllocator& GetCpuAllocator();

}  // namespace tpx

#endif  // TPX_CORE_ALLOCATOR_H_
