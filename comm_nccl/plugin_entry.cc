// The plugin's one exported symbol and the C ABI functions behind it
// (comm/plugin_abi.h). Everything else in the plugin has hidden visibility.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <memory>
#include <string>

#include "comm/plugin_abi.h"
#include "comm/plugin_support.h"
#include "comm_nccl/communicator.h"
#include "comm_nccl/status.h"

struct tpx_comm_s {
  std::unique_ptr<tpx::nccl::Communicator> comm;
};
struct tpx_request_s {
  // The host waits for its requests before destroying their communicator.
  tpx::nccl::Communicator* comm;
  std::shared_ptr<tpx::nccl::OpState> state;
};

namespace tpx::nccl {
namespace {

int Report(const Status& s, tpx_error_t* err) { return plugin::ReportStatus(s, err); }

int Init(tpx_error_t* err) {
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count == 0) {
    const std::string why = rc != cudaSuccess ? std::string(cudaGetErrorName(rc)) + ": " +
                                                    cudaGetErrorString(rc)
                                              : "the driver reports 0 devices";
    cudaGetLastError();
    return Report(Status::Error(TPX_ERR_FAILED_PRECONDITION,
                                "no CUDA device visible; use --tpx_comm_backend=ucx (cuda: " +
                                    why + ")"),
                  err);
  }
  return TPX_OK;
}

int CommCreate(const tpx_comm_config_v1_t* config, tpx_comm_t* out, tpx_error_t* err) {
  auto handle = std::make_unique<tpx_comm_s>();
  Status s = Communicator::Create(*config, &handle->comm);
  if (!s.ok()) return Report(s, err);
  *out = handle.release();
  return TPX_OK;
}

int CommSplit(tpx_comm_t parent, int32_t color, int32_t key, const int32_t*,
              const tpx_comm_config_v1_t* config, tpx_comm_t* out, tpx_error_t* err) {
  auto handle = std::make_unique<tpx_comm_s>();
  Status s = Communicator::Split(*parent->comm, color, key, *config, &handle->comm);
  if (!s.ok()) return Report(s, err);
  *out = handle.release();
  return TPX_OK;
}

int CommDestroy(tpx_comm_t comm, tpx_error_t*) {
  delete comm;
  return TPX_OK;
}

int Post(tpx_comm_t comm, const tpx_coll_args_v1_t* args, tpx_request_t* out, tpx_error_t* err) {
  std::shared_ptr<OpState> state;
  Status s = comm->comm->Post(*args, &state);
  if (!s.ok()) return Report(s, err);
  *out = new tpx_request_s{comm->comm.get(), std::move(state)};
  return TPX_OK;
}

int Test(tpx_request_t request, int* done, tpx_error_t* err) {
  *done = request->comm->Done(*request->state) ? 1 : 0;
  return *done ? Report(request->comm->Result(*request->state), err) : TPX_OK;
}

int Wait(tpx_request_t request, int64_t timeout_ms, tpx_error_t* err) {
  return Report(request->comm->Wait(*request->state, timeout_ms), err);
}

int StreamWait(tpx_request_t request, void* stream, tpx_error_t* err) {
  return Report(request->comm->StreamWait(*request->state, static_cast<cudaStream_t>(stream)),
                err);
}

void RequestFree(tpx_request_t request) { delete request; }

#define TPX_NCCL_STR2(x) #x
#define TPX_NCCL_STR(x) TPX_NCCL_STR2(x)
constexpr const char* kVersion =
    "tpx-nccl 1.0 (built against NCCL " TPX_NCCL_STR(NCCL_MAJOR) "." TPX_NCCL_STR(NCCL_MINOR) ")";

const tpx_comm_plugin_v1_t kPlugin = {
    plugin::Header<tpx_comm_plugin_v1_t>("nccl", kVersion),
    &Init,
    &CommCreate,
    &CommSplit,
    &CommDestroy,
    &Post,
    &Test,
    &Wait,
    &StreamWait,
    &RequestFree,
};

}  // namespace
}  // namespace tpx::nccl

TPX_COMM_PLUGIN_EXPORT(tpx::nccl::kPlugin)
