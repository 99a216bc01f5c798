#include "comm_nccl/status.h"

namespace tpx::nccl {

Status CudaCall(cudaError_t rc, const std::string& what) {
  if (rc == cudaSuccess) return Status();
  cudaGetLastError();  // clear the sticky-free error so later calls start clean
  const int code = rc == cudaErrorMemoryAllocation ? TPX_ERR_UNAVAILABLE : TPX_ERR_INTERNAL;
  return Status::Error(code, what + ": cuda error " + cudaGetErrorName(rc) + ": " +
                                 cudaGetErrorString(rc));
}

Status NcclCall(ncclResult_t rc, const std::string& what, ncclComm_t comm) {
  if (rc == ncclSuccess || rc == ncclInProgress) return Status();
  const int code = (rc == ncclRemoteError || rc == ncclSystemError) ? TPX_ERR_UNAVAILABLE
                                                                    : TPX_ERR_INTERNAL;
  std::string message = what + ": nccl error: " + ncclGetErrorString(rc);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') message += std::string(" (") + last + ")";
  return Status::Error(code, message);
}

}  // namespace tpx::nccl
