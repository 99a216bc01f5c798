// Host <-> device copies of pageable host memory through a reused pinned
// buffer (DMA needs pinned memory; without it CUDA stages through its own
// small buffer and blocks unpredictably). Both calls return once the data
// has arrived; work queued earlier on `stream` runs first.
//
//   TPX_RETURN_IF_ERROR(cuda::CopyToDevice(dev_ptr, host.data(), bytes, stream));
//   TPX_RETURN_IF_ERROR(cuda::CopyToHost(host.data(), dev_ptr, bytes, stream));
#ifndef TPX_CORE_CUDA_COPY_H_
#define TPX_CORE_CUDA_COPY_H_

#include <cstddef>

#include "absl/status/status.h"
#include "core/cuda/stream.h"

namespace tpx::cuda {

absl::Status CopyToDevice(void* device_dst, const void* host_src, size_t bytes, Stream& stream);
absl::Status CopyToHost(void* host_dst, const void* device_src, size_t bytes, Stream& stream);

}  // namespace tpx::cuda

#endif  // TPX_CORE_CUDA_COPY_H_
