// CUDA and cuBLAS return codes as absl::Status, with what was being done.
//
//   TPX_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&p, bytes), "cudaMalloc(4096 bytes)"));
#ifndef TPX_CORE_CUDA_CUDA_STATUS_H_
#define TPX_CORE_CUDA_CUDA_STATUS_H_

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tpx::cuda {

// OK for cudaSuccess. Out of memory is ResourceExhausted, a missing driver or
// device FailedPrecondition, everything else Internal.
absl::Status CudaStatus(cudaError_t rc, absl::string_view what);
absl::Status CublasStatus(cublasStatus_t rc, absl::string_view what);

// Number of visible CUDA devices; 0 (never an error) when there is no driver
// or device. `why` (optional) says why there are none.
int DeviceCount(std::string* why = nullptr);

}  // namespace tpx::cuda

#endif  // TPX_CORE_CUDA_CUDA_STATUS_H_
