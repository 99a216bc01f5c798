// The NCCL plugin's status (the shared plugin status, comm/plugin_status.h)
// and the checks that turn CUDA and NCCL return codes into it.
//
//   TPX_PLUGIN_RETURN_IF_ERROR(CudaCall(cudaSetDevice(1), "cudaSetDevice(1)"));
#ifndef TPX_COMM_NCCL_STATUS_H_
#define TPX_COMM_NCCL_STATUS_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "comm/plugin_status.h"

namespace tpx::nccl {

using Status = ::tpx::plugin::Status;

// "what: cuda error <name>: <description>"; out-of-memory is UNAVAILABLE
// (the caller may free memory and retry), everything else INTERNAL.
Status CudaCall(cudaError_t rc, const std::string& what);

// NCCL failures: remote and system errors (a peer or the network went away)
// are UNAVAILABLE, the rest INTERNAL. `comm` may be null; when set, NCCL's
// last error text for it is appended.
Status NcclCall(ncclResult_t rc, const std::string& what, ncclComm_t comm = nullptr);

}  // namespace tpx::nccl

#endif  // TPX_COMM_NCCL_STATUS_H_
