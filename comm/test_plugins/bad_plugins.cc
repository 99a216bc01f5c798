// Deliberately broken plugins for loader error-message tests. One source,
// compiled once per defect (-DTPX_BAD_<DEFECT>).
#include "comm/plugin_abi.h"

namespace {
[[maybe_unused]] int InitFails(tpx_error_t* err) {
  const char msg[] = "no usable network device found";
  for (unsigned i = 0; i < sizeof(msg); ++i) err->message[i] = msg[i];
  return TPX_ERR_UNAVAILABLE;
}
[[maybe_unused]] int InitOk(tpx_error_t*) { return TPX_OK; }
int CommCreate(const tpx_comm_config_v1_t*, tpx_comm_t*, tpx_error_t*) { return TPX_ERR_INTERNAL; }
int CommSplit(tpx_comm_t, int32_t, int32_t, const int32_t*, const tpx_comm_config_v1_t*,
              tpx_comm_t*, tpx_error_t*) { return TPX_ERR_INTERNAL; }
int CommDestroy(tpx_comm_t, tpx_error_t*) { return TPX_OK; }
int Post(tpx_comm_t, const tpx_coll_args_v1_t*, tpx_request_t*, tpx_error_t*) {
  return TPX_ERR_INTERNAL;
}
int Test(tpx_request_t, int*, tpx_error_t*) { return TPX_ERR_INTERNAL; }
int Wait(tpx_request_t, int64_t, tpx_error_t*) { return TPX_ERR_INTERNAL; }
void RequestFree(tpx_request_t) {}

#if defined(TPX_BAD_ABI_VERSION)
constexpr uint32_t kAbi = 99;
#elif defined(TPX_BAD_STRUCT_SIZE)
constexpr uint32_t kAbi = 2;  // but the struct below is version 1's
#else
constexpr uint32_t kAbi = TPX_COMM_PLUGIN_ABI_VERSION_MIN;
#endif
#if defined(TPX_BAD_MAGIC)
constexpr uint32_t kMagic = 0x12345678u;
#else
constexpr uint32_t kMagic = TPX_COMM_PLUGIN_MAGIC;
#endif
#if defined(TPX_BAD_INIT)
#define TPX_INIT InitFails
#else
#define TPX_INIT InitOk
#endif

const tpx_comm_plugin_v1_t kPlugin = {
    {sizeof(tpx_comm_plugin_v1_t), kMagic, kAbi, TPX_BAD_NAME, "0"},
    &TPX_INIT, &CommCreate, &CommSplit, &CommDestroy, &Post, &Test, &Wait, nullptr, &RequestFree,
};
}  // namespace

#if defined(TPX_BAD_NO_SYMBOL)
extern "C" __attribute__((visibility("default"))) const tpx_comm_plugin_header_t*
tpx_comm_plugin_entry_misspelled(uint32_t) {
  return &kPlugin.header;
}
#else
extern "C" __attribute__((visibility("default"))) const tpx_comm_plugin_header_t*
tpx_comm_plugin_entry(uint32_t) {
  return &kPlugin.header;
}
#endif
