#include "comm/store/file_store.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "comm/store/store_testutil.h"

namespace tpx::comm {
namespace {

std::unique_ptr<Store> MakeFileStore(int client_index) {
  // One directory per test; later clients of the same test open the same one.
  static std::string dir;
  static int test_count = 0;
  if (client_index == 0) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir = std::string(tmp ? tmp : "/tmp") + "/file_store_" + std::to_string(++test_count);
    std::filesystem::remove_all(dir);
  }
  auto store = FileStore::Open(dir);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

INSTANTIATE_TEST_SUITE_P(File, StoreConformance,
                         ::testing::Values(StoreFactory{"file", &MakeFileStore}));

TEST(FileStore, OpenFailsOnUnwritablePathNamingIt) {
  auto store = FileStore::Open("/proc/self/nope/dir");
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("/proc/self/nope/dir"), std::string::npos);
}

}  // namespace
}  // namespace tpx::comm
