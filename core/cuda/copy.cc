#include "core/cuda/copy.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "core/cuda/cuda_status.h"
#include "core/cuda/device_guard.h"
#include "core/status_macros.h"

namespace tpx::cuda {
namespace {

// Two halves of one pinned block: while the DMA engine moves one chunk the
// host fills (or drains) the other.
constexpr size_t kChunk = size_t{4} << 20;

struct PinnedBuffer {
  std::mutex mu;
  char* data = nullptr;  // 2 * kChunk bytes, allocated on first use, kept
};

// Locks the process-wide buffer (allocating it once) for one copy.
absl::StatusOr<std::unique_lock<std::mutex>> LockPinned(char** data) {
  static auto* buffer = new PinnedBuffer();
  std::unique_lock<std::mutex> lock(buffer->mu);
  if (buffer->data == nullptr) {
    void* ptr = nullptr;
    TPX_RETURN_IF_ERROR(CudaStatus(cudaHostAlloc(&ptr, 2 * kChunk, cudaHostAllocPortable),
                                   "cudaHostAlloc (copy staging)"));
    buffer->data = static_cast<char*>(ptr);
  }
  *data = buffer->data;
  return lock;
}

}  // namespace

absl::Status CopyToDevice(void* device_dst, const void* host_src, size_t bytes, Stream& stream) {
  if (bytes == 0) return absl::OkStatus();
  DeviceGuard guard(stream.device());  // the caller's current device is restored
  TPX_RETURN_IF_ERROR(guard.status());
  char* pinned = nullptr;
  TPX_ASSIGN_OR_RETURN(std::unique_lock<std::mutex> lock, LockPinned(&pinned));
  TPX_ASSIGN_OR_RETURN(Event half0, Event::Create(stream.device()));
  TPX_ASSIGN_OR_RETURN(Event half1, Event::Create(stream.device()));
  Event* half_done[2] = {&half0, &half1};
  const char* src = static_cast<const char*>(host_src);
  char* dst = static_cast<char*>(device_dst);
  for (size_t offset = 0, i = 0; offset < bytes; offset += kChunk, ++i) {
    const size_t n = std::min(kChunk, bytes - offset);
    char* half = pinned + (i % 2) * kChunk;
    // The DMA that last read this half must be done before it is refilled.
    if (i >= 2) TPX_RETURN_IF_ERROR(half_done[i % 2]->Synchronize());
    std::memcpy(half, src + offset, n);
    TPX_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(dst + offset, half, n, cudaMemcpyHostToDevice, stream.get()),
        "cudaMemcpyAsync (host to device)"));
    TPX_RETURN_IF_ERROR(half_done[i % 2]->Record(stream));
  }
  return stream.Synchronize();
}

absl::Status CopyToHost(void* host_dst, const void* device_src, size_t bytes, Stream& stream) {
  if (bytes == 0) return absl::OkStatus();
  DeviceGuard guard(stream.device());  // the caller's current device is restored
  TPX_RETURN_IF_ERROR(guard.status());
  char* pinned = nullptr;
  TPX_ASSIGN_OR_RETURN(std::unique_lock<std::mutex> lock, LockPinned(&pinned));
  TPX_ASSIGN_OR_RETURN(Event half0, Event::Create(stream.device()));
  TPX_ASSIGN_OR_RETURN(Event half1, Event::Create(stream.device()));
  Event* half_done[2] = {&half0, &half1};
  const char* src = static_cast<const char*>(device_src);
  char* dst = static_cast<char*>(host_dst);
  const size_t chunks = (bytes + kChunk - 1) / kChunk;
  auto enqueue = [&](size_t i) -> absl::Status {
    const size_t offset = i * kChunk, n = std::min(kChunk, bytes - offset);
    TPX_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(pinned + (i % 2) * kChunk, src + offset, n,
                                                   cudaMemcpyDeviceToHost, stream.get()),
                                   "cudaMemcpyAsync (device to host)"));
    return half_done[i % 2]->Record(stream);
  };
  TPX_RETURN_IF_ERROR(enqueue(0));
  for (size_t i = 0; i < chunks; ++i) {
    // The other half was drained in the previous iteration: refill it now.
    if (i + 1 < chunks) TPX_RETURN_IF_ERROR(enqueue(i + 1));
    TPX_RETURN_IF_ERROR(half_done[i % 2]->Synchronize());
    const size_t offset = i * kChunk, n = std::min(kChunk, bytes - offset);
    std::memcpy(dst + offset, pinned + (i % 2) * kChunk, n);
  }
  return absl::OkStatus();
}

}  // namespace tpx::cuda
