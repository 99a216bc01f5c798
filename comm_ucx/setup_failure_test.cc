// Communicator setup failures through the UCX plugin's C ABI: a store that
// cannot publish this rank's address, or never yields a peer's, must turn
// into an error from comm_create, with the worker torn down cleanly.
#include <cstdlib>
#include <cstring>
#include <string>

#include "comm/plugin_abi.h"
#include "comm_ucx/plugin_testutil.h"
#include "gtest/gtest.h"

namespace tpx::ucx::testing {
namespace {

// A store whose set and/or get fail the way a vanished store host does.
struct BrokenStore {
  bool set_fails = true;

  static int Set(void* ctx, const char*, const void*, size_t, tpx_error_t* err) {
    if (!static_cast<BrokenStore*>(ctx)->set_fails) return TPX_OK;
    std::strcpy(err->message, "connection closed by the store server");
    return TPX_ERR_UNAVAILABLE;
  }
  static int Get(void*, const char*, void*, size_t, size_t*, int64_t, tpx_error_t* err) {
    std::strcpy(err->message, "connection closed by the store server");
    return TPX_ERR_UNAVAILABLE;
  }
  static int Add(void*, const char*, int64_t, int64_t*, tpx_error_t* err) {
    std::strcpy(err->message, "connection closed by the store server");
    return TPX_ERR_UNAVAILABLE;
  }

  tpx_store_v1_t abi() {
    return tpx_store_v1_t{sizeof(tpx_store_v1_t), this, &Set, &Get, &Add};
  }
};

// Runs comm_create for rank 1 of 2 over `store`; returns "<code>: <message>".
std::string CreateOver(BrokenStore& store) {
  setenv("UCX_NET_DEVICES", "lo", 0);  // keep UCX off the machine's interfaces
  std::string error;
  const tpx_comm_plugin_v1_t* plugin = LoadPlugin(&error);
  if (plugin == nullptr) return "load: " + error;
  tpx_error_t err{};
  if (plugin->init(&err) != TPX_OK) return std::string("init: ") + err.message;
  tpx_store_v1_t abi = store.abi();
  tpx_comm_config_v1_t config{};
  config.struct_size = sizeof(config);
  config.rank = 1;
  config.size = 2;
  config.name = "world";
  config.timeout_ms = 1000;
  config.device = -1;
  config.store = &abi;
  tpx_comm_t comm = nullptr;
  int code = plugin->comm_create(&config, &comm, &err);
  if (code == TPX_OK) {
    plugin->comm_destroy(comm, &err);
    return "0: created";
  }
  return std::to_string(code) + ": " + err.message;
}

TEST(UcxSetup, FailingToPublishTheAddressIsAnError) {
  BrokenStore store;
  std::string result = CreateOver(store);
  EXPECT_EQ(result.rfind("14: ", 0), 0u) << result;
  EXPECT_NE(result.find("publishing the UCX address"), std::string::npos) << result;
}

TEST(UcxSetup, FailingToReadAPeerAddressIsAnError) {
  BrokenStore store;
  store.set_fails = false;
  std::string result = CreateOver(store);
  EXPECT_EQ(result.rfind("14: ", 0), 0u) << result;
  EXPECT_NE(result.find("reading UCX address"), std::string::npos) << result;
}

}  // namespace
}  // namespace tpx::ucx::testing
