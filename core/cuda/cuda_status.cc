#include "core/cuda/cuda_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace tpx::cuda {

absl::Status CudaStatus(cudaError_t rc, absl::string_view what) {
  if (rc == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // a non-sticky error must not leak into the next call
  std::string message =
      absl::StrCat(what, ": CUDA error ", cudaGetErrorName(rc), ": ", cudaGetErrorString(rc));
  switch (rc) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status CublasStatus(cublasStatus_t rc, absl::string_view what) {
  if (rc == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  std::string message = absl::StrCat(what, ": cuBLAS error ", cublasGetStatusName(rc), ": ",
                                     cublasGetStatusString(rc));
  switch (rc) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(message);
    case CUBLAS_STATUS_INVALID_VALUE:
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return absl::InvalidArgumentError(message);
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

int DeviceCount(std::string* why) {
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    if (why != nullptr) *why = absl::StrCat(cudaGetErrorName(rc), ": ", cudaGetErrorString(rc));
    cudaGetLastError();
    return 0;
  }
  if (count == 0 && why != nullptr) *why = "the driver reports 0 devices";
  return count;
}

}  // namespace tpx::cuda
