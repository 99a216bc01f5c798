// The NCCL plugin's internal status: a plugin status code
// (comm/plugin_abi.h) plus a message, and the checks that turn CUDA and NCCL
// return codes into it. The plugin links neither Abseil nor the host, so it
// keeps this minimal type; plugin_entry.cc copies it into tpx_error_t.
//
//   TPX_NCCL_RETURN_IF_ERROR(CudaCall(cudaSetDevice(1), "cudaSetDevice(1)"));
#ifndef TPX_COMM_NCCL_STATUS_H_
#define TPX_COMM_NCCL_STATUS_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>
#include <utility>

#include "comm/plugin_abi.h"

namespace tpx::nccl {

class Status {
 public:
  Status() = default;
  static Status Error(int code, std::string message) { return Status(code, std::move(message)); }

  bool ok() const { return code_ == TPX_OK; }
  int code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Status(int code, std::string message) : code_(code), message_(std::move(message)) {}
  int code_ = TPX_OK;
  std::string message_;
};

#define TPX_NCCL_RETURN_IF_ERROR(expr) \
  do {                                 \
    ::tpx::nccl::Status _st = (expr);  \
    if (!_st.ok()) return _st;         \
  } while (0)

// "what: cuda error <name>: <description>"; out-of-memory is UNAVAILABLE
// (the caller may free memory and retry), everything else INTERNAL.
Status CudaCall(cudaError_t rc, const std::string& what);

// NCCL failures: remote and system errors (a peer or the network went away)
// are UNAVAILABLE, the rest INTERNAL. `comm` may be null; when set, NCCL's
// last error text for it is appended.
Status NcclCall(ncclResult_t rc, const std::string& what, ncclComm_t comm = nullptr);

}  // namespace tpx::nccl

#endif  // TPX_COMM_NCCL_STATUS_H_
