// The plugin's one exported symbol and the C ABI functions behind it
// (comm/plugin_abi.h). Everything else in the plugin has hidden visibility.
#include <cstdio>
#include <cstring>
#include <memory>

#include "comm/plugin_abi.h"
#include "comm/plugin_log.h"
#include "comm/plugin_support.h"
#include "comm_ucx/communicator.h"
#include "comm_ucx/status.h"
#include "comm_ucx/ucx_worker.h"

struct tpx_comm_s {
  std::unique_ptr<tpx::ucx::Communicator> comm;
};
// A request and its operation's state in one allocation (one per
// operation): the communicator holds the state through a shared_ptr that
// aliases the request, and the handle's own reference is `self`, dropped by
// RequestFree, so that either may let go first.
struct tpx_request_s {
  // The communicator outlives its requests' waits (the host waits before
  // destroying); once destroyed, every state is complete and it is unused.
  tpx::ucx::Communicator* comm = nullptr;
  tpx::ucx::OpState state;
  std::shared_ptr<tpx_request_s> self;
};

namespace tpx::ucx {
namespace {

int Report(const Status& s, tpx_error_t* err) { return plugin::ReportStatus(s, err); }

int Init(tpx_error_t* err) {
  ucp_context_h context;
  return Report(GetContext(&context), err);
}

int InitWithHost(const tpx_host_v1_t* host, tpx_error_t* err) {
  plugin::SetHost(host);
  return Init(err);
}

int CommCreate(const tpx_comm_config_v1_t* config, tpx_comm_t* out, tpx_error_t* err) {
  auto handle = std::make_unique<tpx_comm_s>();
  Status s = Communicator::Create(*config, &handle->comm);
  if (!s.ok()) return Report(s, err);
  *out = handle.release();
  return TPX_OK;
}

int CommSplit(tpx_comm_t, int32_t, int32_t, const int32_t*, const tpx_comm_config_v1_t* config,
              tpx_comm_t* out, tpx_error_t* err) {
  // A split communicator gets its own worker and endpoints; its addresses go
  // through the store under the new communicator's unique name.
  return CommCreate(config, out, err);
}

int CommDestroy(tpx_comm_t comm, tpx_error_t*) {
  delete comm;
  return TPX_OK;
}

int Post(tpx_comm_t comm, const tpx_coll_args_v1_t* args, tpx_request_t* out, tpx_error_t*) {
  auto request = std::make_shared<tpx_request_s>();
  tpx_request_s* r = request.get();
  r->comm = comm->comm.get();
  std::shared_ptr<tpx::ucx::OpState> state(request, &r->state);
  r->self = std::move(request);
  comm->comm->Post(*args, std::move(state));
  *out = r;
  return TPX_OK;
}

int Test(tpx_request_t request, int* done, tpx_error_t* err) {
  *done = request->state.done() ? 1 : 0;
  return *done ? Report(request->state.status(), err) : TPX_OK;
}

int Wait(tpx_request_t request, int64_t timeout_ms, tpx_error_t* err) {
  if (!request->state.done() && !request->comm->Wait(request->state, timeout_ms)) {
    return Report(Status::Error(TPX_ERR_DEADLINE_EXCEEDED,
                                "ucx: operation still running after " +
                                    std::to_string(timeout_ms) + " ms of waiting"),
                  err);
  }
  return Report(request->state.status(), err);
}

void RequestFree(tpx_request_t request) {
  // Moved out first: the request may go with this last reference.
  std::shared_ptr<tpx_request_s> handle = std::move(request->self);
}

int Reject(tpx_comm_t comm, const tpx_coll_args_v1_t* args, const char* reason, tpx_error_t*) {
  comm->comm->Reject(*args, reason != nullptr && reason[0] != '\0' ? reason : "rejected");
  return TPX_OK;
}

const tpx_comm_plugin_v3_t kPlugin = {
    {
        {
            plugin::Header<tpx_comm_plugin_v3_t>("ucx", "tpx-ucx 1.2 (UCX API 1.13)"),
            &Init,
            &CommCreate,
            &CommSplit,
            &CommDestroy,
            &Post,
            &Test,
            &Wait,
            /*stream_wait=*/nullptr,
            &RequestFree,
        },
        &Reject,
    },
    &InitWithHost,
};

}  // namespace
}  // namespace tpx::ucx

TPX_COMM_PLUGIN_EXPORT(tpx::ucx::kPlugin)
