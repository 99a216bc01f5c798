// The UCX plugin's own messages reach the host's log (core/log.h) through
// the host services of plugin ABI version 3.
#include <cstdlib>
#include <memory>
#include <string>

#include "comm/plugin_host/plugin_communicator.h"
#include "comm/plugin_host/plugin_loader.h"
#include "comm/store/file_store.h"
#include "core/log.h"
#include "gtest/gtest.h"

namespace tpx::comm {
namespace {

TEST(UcxPluginLog, IgnoredTunableIsWarnedAboutInTheHostLog) {
  // Read once per process, by the first communicator's executor thread.
  setenv("TPX_UCX_TICK_US", "often", 1);
  SetLogRank(2);
  ::testing::internal::CaptureStderr();
  absl::Status created = absl::UnknownError("plugin not loaded");
  auto plugin = LoadPlugin("ucx");
  if (plugin.ok()) {
    auto store = FileStore::Open(std::string(std::getenv("TEST_TMPDIR")) + "/ucx_log_store");
    created = store.status();
    if (store.ok()) {
      auto comm = PluginCommunicator::Create(*plugin, CommOptions{},
                                             std::shared_ptr<Store>(std::move(*store)));
      created = comm.status();
      // Destroying the communicator joins its executor thread, which has
      // read the knobs by then.
    }
  }
  const std::string logged = ::testing::internal::GetCapturedStderr();
  SetLogRank(-1);
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  ASSERT_TRUE(created.ok()) << created;
  EXPECT_NE(logged.find("[W rank 2 tunables.cc:"), std::string::npos) << logged;
  EXPECT_NE(logged.find("] ucx: TPX_UCX_TICK_US='often' is not a non-negative integer; using "
                        "200\n"),
            std::string::npos)
      << logged;
}

}  // namespace
}  // namespace tpx::comm
