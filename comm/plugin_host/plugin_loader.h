// Finds, loads and checks communication backend plugins
// (`libtpx_comm_<name>.so`, C ABI in comm/plugin_abi.h).
//
//   TPX_ASSIGN_OR_RETURN(std::shared_ptr<const Plugin> ucx, LoadPlugin("ucx"));
//   ucx->api().comm_create(...);
//
// Search order: every directory in TPX_COMM_PLUGIN_PATH (colon-separated),
// then the binary's runfiles (RUNFILES_DIR, TEST_SRCDIR, <binary>.runfiles;
// each as <root>/tpx/comm_<name>/), then the binary's directory and
// <binary dir>/../comm_<name>/. Each failure (file not found — listing the
// paths tried —, dlopen error, missing entry symbol, wrong magic, ABI
// version mismatch, struct smaller than its declared version, init failure)
// is its own FailedPrecondition/NotFound with advice. Plugins of ABI version
// 3 get the host's services at init: their log lines go to core/log.h. A
// plugin is loaded and initialised once per process; thread-safe.
#ifndef TPX_COMM_PLUGIN_HOST_PLUGIN_LOADER_H_
#define TPX_COMM_PLUGIN_HOST_PLUGIN_LOADER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "comm/plugin_abi.h"

namespace tpx::comm {

class Plugin {
 public:
  const tpx_comm_plugin_v1_t& api() const { return *api_; }
  // Version-2 functions; null for a version-1 plugin.
  const tpx_comm_plugin_v2_t* api_v2() const { return api_v2_; }
  // The plugin's capability flag for CUDA device memory (a non-null
  // stream_wait, comm/plugin_abi.h): such a backend takes CUDA buffers and
  // binds each communicator to a CUDA device.
  bool device_memory() const { return api_->stream_wait != nullptr; }
  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  const std::string& path() const { return path_; }

 private:
  friend absl::StatusOr<std::shared_ptr<const Plugin>> LoadPluginFromFile(
      const std::string& path, absl::string_view name);
  Plugin() = default;
  const tpx_comm_plugin_v1_t* api_ = nullptr;
  const tpx_comm_plugin_v2_t* api_v2_ = nullptr;
  std::string name_, version_, path_;
};

// Loads backend `name` (e.g. "ucx") from the search path; cached.
absl::StatusOr<std::shared_ptr<const Plugin>> LoadPlugin(absl::string_view name);

// Loads the plugin at `path` (not cached); `name` is for messages and must
// match the plugin's own header name.
absl::StatusOr<std::shared_ptr<const Plugin>> LoadPluginFromFile(const std::string& path,
                                                                 absl::string_view name);

// The candidate paths LoadPlugin tries for `name`, in order.
std::vector<std::string> PluginSearchPaths(absl::string_view name);

}  // namespace tpx::comm

#endif  // TPX_COMM_PLUGIN_HOST_PLUGIN_LOADER_H_
