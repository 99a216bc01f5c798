// The NCCL plugin as built where no CUDA toolkit was found: it loads, and
// init() says why it cannot run, so selecting the backend gives a clear
// error instead of a missing file.
#include <cstdio>

#include "comm/plugin_abi.h"
#include "comm/plugin_support.h"

namespace {

constexpr char kWhy[] =
    "this tpx was built without a CUDA toolkit (no NCCL); use --tpx_comm_backend=ucx";

int Fail(tpx_error_t* err) {
  if (err != nullptr) std::snprintf(err->message, sizeof(err->message), "%s", kWhy);
  return TPX_ERR_FAILED_PRECONDITION;
}

int Init(tpx_error_t* err) { return Fail(err); }
int CommCreate(const tpx_comm_config_v1_t*, tpx_comm_t*, tpx_error_t* err) { return Fail(err); }
int CommSplit(tpx_comm_t, int32_t, int32_t, const int32_t*, const tpx_comm_config_v1_t*,
              tpx_comm_t*, tpx_error_t* err) {
  return Fail(err);
}
int CommDestroy(tpx_comm_t, tpx_error_t*) { return TPX_OK; }
int Post(tpx_comm_t, const tpx_coll_args_v1_t*, tpx_request_t*, tpx_error_t* err) {
  return Fail(err);
}
int Test(tpx_request_t, int* done, tpx_error_t* err) {
  *done = 1;
  return Fail(err);
}
int Wait(tpx_request_t, int64_t, tpx_error_t* err) { return Fail(err); }
int StreamWait(tpx_request_t, void*, tpx_error_t* err) { return Fail(err); }
void RequestFree(tpx_request_t) {}

const tpx_comm_plugin_v1_t kPlugin = {
    tpx::plugin::Header<tpx_comm_plugin_v1_t>("nccl", "tpx-nccl 1.0 (built without CUDA)"),
    &Init, &CommCreate, &CommSplit, &CommDestroy, &Post, &Test, &Wait, &StreamWait, &RequestFree,
};

}  // namespace

TPX_COMM_PLUGIN_EXPORT(kPlugin)
