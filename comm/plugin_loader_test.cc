#include "comm/plugin_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "comm/file_store.h"
#include "comm/plugin_communicator.h"
#include "gtest/gtest.h"

namespace tpx::comm {
namespace {

// The broken plugins live in //comm/test_plugins, not in comm_<name>/,
// so point the search path at them as a user would.
class PluginLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(std::getenv("TEST_SRCDIR")) + "/tpx/comm/test_plugins";
    setenv("TPX_COMM_PLUGIN_PATH", ("/nonexistent/dir:" + dir_).c_str(), 1);
  }
  std::string dir_;
};

void ExpectMessage(const absl::Status& s, absl::StatusCode code,
                   const std::vector<std::string>& fragments) {
  EXPECT_EQ(s.code(), code) << s;
  for (const std::string& f : fragments) {
    EXPECT_NE(s.message().find(f), std::string::npos) << "missing '" << f << "' in: " << s;
  }
}

TEST_F(PluginLoaderTest, MissingPluginListsPathsAndAdvice) {
  auto plugin = LoadPlugin("doesnotexist");
  ExpectMessage(plugin.status(), absl::StatusCode::kNotFound,
                {"libtpx_comm_doesnotexist.so not found", "/nonexistent/dir/libtpx_comm_"
                 "doesnotexist.so", "comm_doesnotexist/libtpx_comm_doesnotexist.so",
                 "TPX_COMM_PLUGIN_PATH", "TPX_COMM_BACKEND"});
}

TEST_F(PluginLoaderTest, WrongAbiVersion) {
  ExpectMessage(LoadPlugin("badabi").status(), absl::StatusCode::kFailedPrecondition,
                {"badabi", "ABI version 99", "reads versions 1 to 2"});
}

TEST_F(PluginLoaderTest, MissingEntrySymbol) {
  ExpectMessage(LoadPlugin("nosymbol").status(), absl::StatusCode::kFailedPrecondition,
                {"nosymbol", "does not export", "tpx_comm_plugin_entry"});
}

TEST_F(PluginLoaderTest, WrongMagic) {
  ExpectMessage(LoadPlugin("badmagic").status(), absl::StatusCode::kFailedPrecondition,
                {"magic 0x12345678", "not a tpx comm plugin"});
}

TEST_F(PluginLoaderTest, InitFailureCarriesPluginMessage) {
  ExpectMessage(LoadPlugin("badinit").status(), absl::StatusCode::kUnavailable,
                {"badinit", "initialisation failed", "no usable network device found"});
}

TEST_F(PluginLoaderTest, NotAnElfFile) {
  std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/libtpx_comm_junk.so";
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs("not a shared object", f);
  std::fclose(f);
  ExpectMessage(LoadPluginFromFile(path, "junk").status(), absl::StatusCode::kFailedPrecondition,
                {"cannot load", path});
}

class FakeBackendTest : public PluginLoaderTest {
 protected:
  void SetUp() override {
    PluginLoaderTest::SetUp();
    auto plugin = LoadPlugin("fake");
    ASSERT_TRUE(plugin.ok()) << plugin.status();
    void* handle = dlopen((*plugin)->path().c_str(), RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(handle, nullptr);
    post_count_ = reinterpret_cast<long (*)()>(dlsym(handle, "tpx_fake_post_count"));
    ASSERT_NE(post_count_, nullptr);
    auto store = FileStore::Open(std::string(std::getenv("TEST_TMPDIR")) + "/fake_store");
    ASSERT_TRUE(store.ok());
    auto comm = PluginCommunicator::Create(*plugin, CommOptions{},
                                           std::shared_ptr<Store>(std::move(*store)));
    ASSERT_TRUE(comm.ok()) << comm.status();
    comm_ = std::move(*comm);
  }
  long (*post_count_)() = nullptr;
  std::unique_ptr<Communicator> comm_;
};

TEST_F(FakeBackendTest, LoadsOnceAndRunsOps) {
  EXPECT_EQ(comm_->backend(), "fake");
  float in[3] = {1, 2, 3}, out[3] = {};
  ASSERT_TRUE(comm_->AllReduce(in, out, 3, DType::kF32, ReduceOp::kSum).Wait().ok());
  EXPECT_EQ(out[2], 3.0f);
  float gathered[3] = {};
  Work w = comm_->AllGather(in, gathered, 3, DType::kF32);
  EXPECT_TRUE(w.Wait(absl::Seconds(1)).ok());
  EXPECT_TRUE(w.IsCompleted());
  EXPECT_EQ(gathered[1], 2.0f);
  EXPECT_EQ(LoadPlugin("fake")->get(), LoadPlugin("fake")->get());
}

TEST_F(FakeBackendTest, InvalidArgumentsNeverReachTheBackend) {
  const long before = post_count_();
  float x[4] = {};
  Work w = comm_->AllReduce(x, x, -4, DType::kF32, ReduceOp::kSum);
  EXPECT_TRUE(w.IsCompleted());
  EXPECT_EQ(w.Wait().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm_->Broadcast(x, 4, DType::kF32, 3).Wait().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm_->AllReduce(nullptr, x, 4, DType::kF32, ReduceOp::kSum).Wait().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(post_count_(), before);
}

TEST_F(FakeBackendTest, SplitOnOneRank) {
  auto child = comm_->Split(0, 0);
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_NE(*child, nullptr);
  EXPECT_EQ((*child)->size(), 1);
  EXPECT_EQ((*child)->name(), "world/split1/c0");
  auto none = comm_->Split(-1, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
}

}  // namespace
}  // namespace tpx::comm
