#include "comm/plugin_host/plugin_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "comm/plugin_host/plugin_communicator.h"
#include "comm/store/file_store.h"
#include "core/log.h"
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
                {"badabi", "ABI version 99",
                 absl::StrCat("reads versions 1 to ", TPX_COMM_PLUGIN_ABI_VERSION)});
}

TEST_F(PluginLoaderTest, StructSmallerThanItsDeclaredVersion) {
  // Declares version 2 but is only as large as the version-1 struct: the
  // loader must not read reject() past its end.
  ExpectMessage(LoadPlugin("badsize").status(), absl::StatusCode::kFailedPrecondition,
                {"badsize", "declares plugin ABI version 2",
                 absl::StrCat("struct has ", sizeof(tpx_comm_plugin_v1_t), " bytes"),
                 absl::StrCat("that version has ", sizeof(tpx_comm_plugin_v2_t))});
}

TEST_F(PluginLoaderTest, ReadsOlderVersions) {
  // (Version 3 is read in PluginLogsThroughTheHostLog.)
  auto v1 = LoadPlugin("fake");
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_EQ((*v1)->api_v2(), nullptr);
  EXPECT_FALSE((*v1)->device_memory());
  auto v2 = LoadPlugin("fakev2");
  ASSERT_TRUE(v2.ok()) << v2.status();
  ASSERT_NE((*v2)->api_v2(), nullptr);
  EXPECT_NE((*v2)->api_v2()->reject, nullptr);
  EXPECT_EQ((*v2)->version(), "fakev2-2");
}

// The entry point of a plugin built with TPX_COMM_PLUGIN_EXPORT.
tpx_comm_plugin_entry_fn EntryOf(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return nullptr;
  return reinterpret_cast<tpx_comm_plugin_entry_fn>(dlsym(handle, TPX_COMM_PLUGIN_ENTRY_SYMBOL));
}

TEST_F(PluginLoaderTest, EntryServesEachHostItsNewestReadableVersion) {
  tpx_comm_plugin_entry_fn entry = EntryOf(dir_ + "/libtpx_comm_fakelog.so");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry(0), nullptr);
  const size_t sizes[] = {0, sizeof(tpx_comm_plugin_v1_t), sizeof(tpx_comm_plugin_v2_t),
                          sizeof(tpx_comm_plugin_v3_t)};
  for (uint32_t host : {1u, 2u, 3u, 4u}) {
    const tpx_comm_plugin_header_t* header = entry(host);
    ASSERT_NE(header, nullptr) << "host version " << host;
    const uint32_t want = host < 3 ? host : 3;
    EXPECT_EQ(header->magic, TPX_COMM_PLUGIN_MAGIC);
    EXPECT_EQ(header->abi_version, want) << "host version " << host;
    EXPECT_EQ(header->struct_size, sizes[want]) << "host version " << host;
    EXPECT_STREQ(header->name, "fakelog");
    EXPECT_NE(reinterpret_cast<const tpx_comm_plugin_v1_t*>(header)->init, nullptr);
  }
  const auto* v3 = reinterpret_cast<const tpx_comm_plugin_v3_t*>(entry(3));
  EXPECT_NE(v3->init_with_host, nullptr);
  EXPECT_EQ(reinterpret_cast<const tpx_comm_plugin_v1_t*>(entry(1))->post, v3->v2.v1.post);

  tpx_comm_plugin_entry_fn v1_entry = EntryOf(dir_ + "/libtpx_comm_fake.so");
  ASSERT_NE(v1_entry, nullptr);
  EXPECT_EQ(v1_entry(0), nullptr);
  EXPECT_EQ(v1_entry(TPX_COMM_PLUGIN_ABI_VERSION)->abi_version, 1u);
  EXPECT_EQ(v1_entry(TPX_COMM_PLUGIN_ABI_VERSION)->struct_size, sizeof(tpx_comm_plugin_v1_t));
}

TEST_F(PluginLoaderTest, PluginLogsThroughTheHostLog) {
  // The host's log shows the rank; a plugin's own stderr fallback cannot.
  SetLogRank(5);
  ::testing::internal::CaptureStderr();
  auto plugin = LoadPlugin("fakelog");
  absl::StatusOr<std::unique_ptr<Communicator>> comm = absl::UnknownError("not created");
  if (plugin.ok()) {
    auto store = FileStore::Open(std::string(std::getenv("TEST_TMPDIR")) + "/fakelog_store");
    if (store.ok()) {
      comm = PluginCommunicator::Create(*plugin, CommOptions{},
                                        std::shared_ptr<Store>(std::move(*store)));
    }
  }
  const std::string logged = ::testing::internal::GetCapturedStderr();
  SetLogRank(-1);
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_NE(logged.find("[W rank 5 fake_plugin.cc:"), std::string::npos) << logged;
  EXPECT_NE(logged.find("] fakelog: init through the host's log\n"), std::string::npos)
      << logged;
  EXPECT_NE(logged.find("] fakelog: created world rank 0\n"), std::string::npos) << logged;
  EXPECT_EQ((*plugin)->api_v2(), nullptr);  // version 3 without reject()
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
