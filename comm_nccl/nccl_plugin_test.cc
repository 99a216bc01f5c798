// Loads libtpx_comm_nccl.so the way programs do and checks what a user sees
// with and without a GPU. Cases that need a GPU skip with the reason here.
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "comm/init.h"
#include "comm/plugin_abi.h"
#include "comm/plugin_host/plugin_loader.h"
#include "comm_nccl/device_probe.h"
#include "gtest/gtest.h"

namespace tpx::nccl {
namespace {

#ifdef TPX_HAVE_NCCL_PLUGIN
constexpr bool kPluginBuilt = true;
constexpr char kNoDevice[] = "no CUDA device visible; use --tpx_comm_backend=ucx";
#else
// Without a toolkit the plugin is a stub whose init() explains that instead.
constexpr bool kPluginBuilt = false;
constexpr char kNoDevice[] =
    "this tpx was built without a CUDA toolkit (no NCCL); use --tpx_comm_backend=ucx";
#endif

#define SKIP_WITHOUT_PLUGIN() \
  if (!kPluginBuilt) GTEST_SKIP() << "built without a CUDA toolkit: no NCCL plugin to load"

std::string PluginPath() {
  return std::string(std::getenv("TEST_SRCDIR")) + "/tpx/comm_nccl/libtpx_comm_nccl.so";
}

TEST(NcclPluginTest, ExportsVersionOneHeaderAndEveryFunction) {
  SKIP_WITHOUT_PLUGIN();
  // RTLD_LOCAL, as the loader does: the plugin must not need host symbols.
  void* handle = dlopen(PluginPath().c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  auto entry = reinterpret_cast<tpx_comm_plugin_entry_fn>(
      dlsym(handle, TPX_COMM_PLUGIN_ENTRY_SYMBOL));
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry(0), nullptr) << "no ABI older than 1 exists";
  const tpx_comm_plugin_header_t* header = entry(TPX_COMM_PLUGIN_ABI_VERSION);
  ASSERT_NE(header, nullptr);
  EXPECT_EQ(header->magic, TPX_COMM_PLUGIN_MAGIC);
  EXPECT_EQ(header->abi_version, 1u);
  EXPECT_EQ(header->struct_size, sizeof(tpx_comm_plugin_v1_t));
  EXPECT_STREQ(header->name, "nccl");
  EXPECT_NE(std::string(header->version).find("NCCL 2."), std::string::npos) << header->version;
  const auto* api = reinterpret_cast<const tpx_comm_plugin_v1_t*>(header);
  EXPECT_NE(api->init, nullptr);
  EXPECT_NE(api->comm_create, nullptr);
  EXPECT_NE(api->comm_split, nullptr);
  EXPECT_NE(api->comm_destroy, nullptr);
  EXPECT_NE(api->post, nullptr);
  EXPECT_NE(api->test, nullptr);
  EXPECT_NE(api->wait, nullptr);
  EXPECT_NE(api->stream_wait, nullptr) << "a device backend must implement stream_wait";
  EXPECT_NE(api->request_free, nullptr);
  // Only the entry symbol is exported: the plugin's internals stay private.
  EXPECT_EQ(dlsym(handle, "_ZN3tpx4nccl10OperandsOfERK18tpx_coll_args_v1_tii"), nullptr);
}

TEST(NcclPluginTest, LoaderChecksAbiThenInitReportsMissingGpu) {
  std::string why;
  const int devices = kPluginBuilt ? VisibleCudaDevices(&why) : 0;
  // Found through TPX_COMM_PLUGIN_PATH (searched before runfiles), as a
  // deployed program would find it: a copy in a directory of its own.
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/plugins";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(PluginPath(), dir + "/libtpx_comm_nccl.so",
                             std::filesystem::copy_options::overwrite_existing);
  setenv("TPX_COMM_PLUGIN_PATH", dir.c_str(), 1);
  auto plugin = comm::LoadPlugin("nccl");
  unsetenv("TPX_COMM_PLUGIN_PATH");
  if (devices > 0) {
    ASSERT_TRUE(plugin.ok()) << plugin.status();
    EXPECT_EQ((*plugin)->path(), dir + "/libtpx_comm_nccl.so");
    EXPECT_EQ((*plugin)->name(), "nccl");
    EXPECT_NE((*plugin)->api().stream_wait, nullptr);
    return;
  }
  // init() runs only after the loader accepted magic, ABI version, the
  // function table and the name, so this error also proves those checks passed.
  ASSERT_FALSE(plugin.ok());
  EXPECT_EQ(plugin.status().code(), absl::StatusCode::kFailedPrecondition) << plugin.status();
  EXPECT_NE(plugin.status().message().find("initialisation failed"), std::string::npos)
      << plugin.status();
  EXPECT_NE(plugin.status().message().find(kNoDevice), std::string::npos) << plugin.status();
  EXPECT_NE(plugin.status().message().find(dir), std::string::npos) << plugin.status();
}

comm::InitOptions OneRankNccl() {
  comm::InitOptions options;
  options.backend = "nccl";
  options.timeout = absl::Seconds(20);
  options.launch = comm::LaunchEnv{};  // rank 0 of 1, store on an ephemeral loopback port
  return options;
}

TEST(NcclPluginTest, InitWithoutGpuSaysWhatToDo) {
  std::string why;
  if (kPluginBuilt && VisibleCudaDevices(&why) > 0) {
    GTEST_SKIP() << "a CUDA device is visible: nothing to check";
  }
  auto world = comm::Init(OneRankNccl());
  ASSERT_FALSE(world.ok());
  EXPECT_EQ(world.status().code(), absl::StatusCode::kFailedPrecondition) << world.status();
  EXPECT_NE(world.status().message().find(kNoDevice), std::string::npos) << world.status();
}

// Host (CPU) buffers go through the plugin's staging path.
TEST(NcclPluginTest, OneRankCollectivesOnHostMemory) {
  SKIP_WITHOUT_PLUGIN();
  std::string why;
  if (VisibleCudaDevices(&why) < 1) GTEST_SKIP() << "no CUDA device visible: " << why;
  auto world = comm::Init(OneRankNccl());
  ASSERT_TRUE(world.ok()) << world.status();
  std::vector<float> in = {1.f, -2.f, 3.5f}, out(3, 0.f);
  ASSERT_TRUE((*world)->AllReduce(in.data(), out.data(), 3, DType::kF32,
                                  comm::ReduceOp::kSum).Wait().ok());
  EXPECT_EQ(out, in);
  ASSERT_TRUE((*world)->AllReduce(out.data(), 3, DType::kF32, comm::ReduceOp::kAvg).Wait().ok());
  EXPECT_EQ(out, in);
  ASSERT_TRUE((*world)->Barrier().Wait().ok());
  auto child = (*world)->Split(/*color=*/0, /*key=*/0);
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_NE(*child, nullptr);
  std::vector<int64_t> b = {7, 8};
  ASSERT_TRUE((*child)->Broadcast(b.data(), 2, DType::kI64, /*root=*/0).Wait().ok());
  EXPECT_EQ(b, (std::vector<int64_t>{7, 8}));
}

}  // namespace
}  // namespace tpx::nccl
