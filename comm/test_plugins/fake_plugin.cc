// A single-rank plugin used to test the host side (loader, validation,
// Work, numbering) without a real transport. Every operation on one rank is
// a local copy. Exports tpx_fake_post_count() so tests can check that
// rejected calls never reached the backend.
//
// Built four times: libtpx_comm_fake.so implements ABI version 1;
// libtpx_comm_fakev2.so (-DTPX_FAKE_V2) version 2 (rejections are accepted
// and dropped); libtpx_comm_fakelog.so (-DTPX_FAKE_LOGS) version 3, logging
// through the host's services at init and at comm_create;
// libtpx_comm_fakestuck.so (-DTPX_FAKE_STUCK) version 1 whose operations
// never finish: wait() returns DEADLINE_EXCEEDED after its timeout and
// test() says "not done", a backend breaking its promise to bound every
// operation by the communicator's timeout.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "comm/plugin_abi.h"
#include "comm/plugin_log.h"
#include "comm/plugin_support.h"

struct tpx_comm_s {
  int rank;
};
struct tpx_request_s {
  int status;
};

namespace {

std::atomic<long> g_posts{0};

using tpx::plugin::ElementSize;

void Copy(void* dst, int64_t dst_off, const void* src, int64_t src_off, int64_t n, size_t es) {
  if (n <= 0) return;
  char* d = static_cast<char*>(dst) + dst_off * es;
  const char* s = static_cast<const char*>(src) + src_off * es;
  if (d != s) std::memmove(d, s, n * es);
}

int Init(tpx_error_t*) { return TPX_OK; }

int CommCreate(const tpx_comm_config_v1_t* config, tpx_comm_t* out, tpx_error_t* err) {
  if (config->size != 1) {
    std::snprintf(err->message, sizeof(err->message), "fake backend supports one rank only");
    return TPX_ERR_UNIMPLEMENTED;
  }
  *out = new tpx_comm_s{config->rank};
#if defined(TPX_FAKE_LOGS)
  TPX_PLUGIN_LOG(WARNING) << "fakelog: created " << config->name << " rank " << config->rank;
#endif
  return TPX_OK;
}

int CommSplit(tpx_comm_t, int32_t, int32_t, const int32_t*, const tpx_comm_config_v1_t* config,
              tpx_comm_t* out, tpx_error_t* err) {
  return CommCreate(config, out, err);
}

int CommDestroy(tpx_comm_t comm, tpx_error_t*) {
  delete comm;
  return TPX_OK;
}

int Post(tpx_comm_t, const tpx_coll_args_v1_t* a, tpx_request_t* out, tpx_error_t* err) {
  g_posts.fetch_add(1);
  const size_t es = ElementSize(a->dtype);
  switch (a->kind) {
    case TPX_COLL_ALL_REDUCE: case TPX_COLL_REDUCE:
      Copy(a->recv, 0, a->send, 0, a->count, es);
      break;
    case TPX_COLL_ALL_GATHER_V:
      Copy(a->recv, a->recv_displs[0], a->send, 0, a->recv_counts[0], es);
      break;
    case TPX_COLL_GATHER_V:
      Copy(a->recv, a->recv_displs[0], a->send, 0, a->count, es);
      break;
    case TPX_COLL_REDUCE_SCATTER_V: case TPX_COLL_SCATTER_V:
      Copy(a->recv, 0, a->send, a->send_displs[0], a->send_counts[0], es);
      break;
    case TPX_COLL_ALL_TO_ALL_V:
      Copy(a->recv, a->recv_displs[0], a->send, a->send_displs[0], a->send_counts[0], es);
      break;
    case TPX_COLL_BROADCAST: case TPX_COLL_BARRIER:
      break;
    default:
      std::snprintf(err->message, sizeof(err->message), "fake backend: op %d unsupported",
                    static_cast<int>(a->kind));
      return TPX_ERR_UNIMPLEMENTED;
  }
  *out = new tpx_request_s{TPX_OK};
  return TPX_OK;
}

#if defined(TPX_FAKE_STUCK)
int Test(tpx_request_t, int* done, tpx_error_t*) {
  *done = 0;
  return TPX_OK;
}
int Wait(tpx_request_t, int64_t timeout_ms, tpx_error_t* err) {
  std::this_thread::sleep_for(std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0)));
  std::snprintf(err->message, sizeof(err->message), "fakestuck: still running");
  return TPX_ERR_DEADLINE_EXCEEDED;
}
#else
int Test(tpx_request_t r, int* done, tpx_error_t*) {
  *done = 1;
  return r->status;
}
int Wait(tpx_request_t r, int64_t, tpx_error_t*) { return r->status; }
#endif
void RequestFree(tpx_request_t r) { delete r; }

#if defined(TPX_FAKE_LOGS)
int InitWithHost(const tpx_host_v1_t* host, tpx_error_t* err) {
  tpx::plugin::SetHost(host);
  TPX_PLUGIN_LOG(WARNING) << "fakelog: init through the host's log";
  return Init(err);
}

const tpx_comm_plugin_v3_t kPlugin = {
    {{tpx::plugin::Header<tpx_comm_plugin_v3_t>("fakelog", "fakelog-3"), &Init, &CommCreate,
      &CommSplit, &CommDestroy, &Post, &Test, &Wait, nullptr, &RequestFree},
     /*reject=*/nullptr},
    &InitWithHost,
};
#elif defined(TPX_FAKE_V2)
int Reject(tpx_comm_t, const tpx_coll_args_v1_t*, const char*, tpx_error_t*) { return TPX_OK; }

const tpx_comm_plugin_v2_t kPlugin = {
    {tpx::plugin::Header<tpx_comm_plugin_v2_t>("fakev2", "fakev2-2"), &Init, &CommCreate,
     &CommSplit, &CommDestroy, &Post, &Test, &Wait, nullptr, &RequestFree},
    &Reject,
};
#else
#if defined(TPX_FAKE_STUCK)
constexpr const char* kName = "fakestuck";
constexpr const char* kVersion = "fakestuck-1";
#else
constexpr const char* kName = "fake";
constexpr const char* kVersion = "fake-1";
#endif
// clang-format off
const tpx_comm_plugin_v1_t kPlugin = {
    tpx::plugin::Header<tpx_comm_plugin_v1_t>(kName, kVersion),
    &Init, &CommCreate, &CommSplit, &CommDestroy, &Post, &Test, &Wait, nullptr, &RequestFree,
};
// clang-format on
#endif

}  // namespace

TPX_COMM_PLUGIN_EXPORT(kPlugin)

extern "C" __attribute__((visibility("default"))) long tpx_fake_post_count() {
  return g_posts.load();
}
