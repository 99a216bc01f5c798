#include "core/cuda/device_guard.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "core/cuda/cuda_status.h"

namespace tpx::cuda {

DeviceGuard::DeviceGuard(int device) {
  int current = 0;
  status_ = CudaStatus(cudaGetDevice(&current), "cudaGetDevice");
  if (!status_.ok() || current == device) return;
  status_ = CudaStatus(cudaSetDevice(device), absl::StrCat("cudaSetDevice(", device, ")"));
  if (status_.ok()) previous_ = current;
}

DeviceGuard::~DeviceGuard() {
  // Calls inside the scope only ever select the guarded device, so restoring
  // is needed exactly when the guard switched. A failure here could only mean
  // a broken context, which the next CUDA call reports.
  if (previous_ >= 0) cudaSetDevice(previous_);
}

}  // namespace tpx::cuda
