#include "comm/plugin_host/plugin_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "comm/store/store_abi.h"
#include "core/log.h"

namespace tpx::comm {
namespace {

static_assert(TPX_LOG_INFO == static_cast<int>(LogSeverity::kInfo));
static_assert(TPX_LOG_WARNING == static_cast<int>(LogSeverity::kWarning));
static_assert(TPX_LOG_ERROR == static_cast<int>(LogSeverity::kError));

// tpx_host_v1_t.log: a plugin's line in tpx's own log. Unknown levels are
// logged as errors; a plugin cannot end the process through the log.
void HostLog(void*, tpx_log_level_t level, const char* file, int line, const char* message) {
  LogSeverity severity = LogSeverity::kError;
  if (level == TPX_LOG_INFO) severity = LogSeverity::kInfo;
  if (level == TPX_LOG_WARNING) severity = LogSeverity::kWarning;
  log_internal::LogMessage(severity, file != nullptr ? file : "plugin", line).stream()
      << (message != nullptr ? message : "");
}

const tpx_host_v1_t kHostServices = {sizeof(tpx_host_v1_t), nullptr, &HostLog};

// The size of the whole plugin struct of ABI version `abi_version`.
size_t PluginStructSize(uint32_t abi_version) {
  switch (abi_version) {
    case 1: return sizeof(tpx_comm_plugin_v1_t);
    case 2: return sizeof(tpx_comm_plugin_v2_t);
    default: return sizeof(tpx_comm_plugin_v3_t);
  }
}

std::string ExecutablePath() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, n);
}

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

}  // namespace

std::vector<std::string> PluginSearchPaths(absl::string_view name) {
  const std::string file = absl::StrCat("libtpx_comm_", name, ".so");
  const std::string package = absl::StrCat("comm_", name);
  std::vector<std::string> paths;
  if (const char* env = std::getenv("TPX_COMM_PLUGIN_PATH")) {
    for (absl::string_view dir : absl::StrSplit(env, ':', absl::SkipEmpty())) {
      paths.push_back(absl::StrCat(dir, "/", file));
    }
  }
  const std::string exe = ExecutablePath();
  std::vector<std::string> runfiles_roots;
  for (const char* var : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* env = std::getenv(var)) runfiles_roots.push_back(env);
  }
  if (!exe.empty()) runfiles_roots.push_back(exe + ".runfiles");
  for (const std::string& root : runfiles_roots) {
    std::string candidate = absl::StrCat(root, "/tpx/", package, "/", file);
    if (std::find(paths.begin(), paths.end(), candidate) == paths.end()) {
      paths.push_back(candidate);
    }
  }
  if (!exe.empty()) {
    paths.push_back(absl::StrCat(DirName(exe), "/", file));
    paths.push_back(absl::StrCat(DirName(exe), "/../", package, "/", file));
  }
  return paths;
}

absl::StatusOr<std::shared_ptr<const Plugin>> LoadPluginFromFile(const std::string& path,
                                                                 absl::string_view name) {
  // RTLD_LOCAL: two plugins may bundle different copies of a vendor library.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("comm backend '", name, "': cannot load ", path, ": ",
                     why ? why : "unknown dlopen error",
                     ". Check that its own dependencies are installed (ldd ", path, ")."));
  }
  ::dlerror();
  void* symbol = ::dlsym(handle, TPX_COMM_PLUGIN_ENTRY_SYMBOL);
  if (symbol == nullptr) {
    ::dlclose(handle);
    return absl::FailedPreconditionError(absl::StrCat(
        "comm backend '", name, "': ", path, " does not export the entry symbol '",
        TPX_COMM_PLUGIN_ENTRY_SYMBOL, "'; it is not a tpx comm plugin (or was built without "
        "extern \"C\" / default visibility on that function)."));
  }
  // From here on error paths keep the library loaded: messages read strings
  // that live inside it.
  auto entry = reinterpret_cast<tpx_comm_plugin_entry_fn>(symbol);
  const tpx_comm_plugin_header_t* header = entry(TPX_COMM_PLUGIN_ABI_VERSION);
  if (header == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "comm backend '", name, "': ", path, " supports no plugin ABI version <= ",
        TPX_COMM_PLUGIN_ABI_VERSION, " (the version this program reads); rebuild the plugin "
        "against this tpx, or use a newer tpx."));
  }
  if (header->magic != TPX_COMM_PLUGIN_MAGIC) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "comm backend '%s': %s returned a header with magic 0x%08x, expected 0x%08x; the file "
        "is not a tpx comm plugin or is corrupt.",
        std::string(name), path, header->magic, TPX_COMM_PLUGIN_MAGIC));
  }
  if (header->abi_version < TPX_COMM_PLUGIN_ABI_VERSION_MIN ||
      header->abi_version > TPX_COMM_PLUGIN_ABI_VERSION ||
      header->struct_size < sizeof(tpx_comm_plugin_header_t)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "comm backend '", name, "': ", path, " implements plugin ABI version ",
        header->abi_version, " but this program reads versions ",
        TPX_COMM_PLUGIN_ABI_VERSION_MIN, " to ", TPX_COMM_PLUGIN_ABI_VERSION,
        "; rebuild the plugin and the program from the same tpx sources."));
  }
  const size_t full_size = PluginStructSize(header->abi_version);
  if (header->struct_size < full_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "comm backend '", name, "': ", path, " declares plugin ABI version ",
        header->abi_version, " but its struct has ", header->struct_size,
        " bytes where that version has ", full_size, "; the plugin is corrupt or mis-built."));
  }
  const auto* api = reinterpret_cast<const tpx_comm_plugin_v1_t*>(header);
  if (api->init == nullptr || api->comm_create == nullptr || api->comm_split == nullptr ||
      api->comm_destroy == nullptr || api->post == nullptr || api->test == nullptr ||
      api->wait == nullptr || api->request_free == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "comm backend '", name, "': ", path, " leaves a required function pointer null"));
  }
  const tpx_comm_plugin_v3_t* api_v3 =
      header->abi_version >= 3 ? reinterpret_cast<const tpx_comm_plugin_v3_t*>(header) : nullptr;
  if (api_v3 != nullptr && api_v3->init_with_host == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "comm backend '", name, "': ", path, " declares plugin ABI version ",
        header->abi_version, " but leaves init_with_host null"));
  }
  const std::string plugin_name = header->name ? header->name : "";
  if (plugin_name != name) {
    return absl::FailedPreconditionError(absl::StrCat("comm backend '", name, "': ", path,
                                                      " calls itself '", plugin_name, "'"));
  }
  tpx_error_t err{};
  // A version-3 plugin gets the host's services (its log goes to core/log.h).
  int rc = api_v3 != nullptr ? api_v3->init_with_host(&kHostServices, &err) : api->init(&err);
  if (rc != TPX_OK) {
    // Keep the library loaded: a failed init may have started threads.
    return PluginCodeToStatus(rc, err,
                              absl::StrCat("comm backend '", name, "' (", path,
                                           "): initialisation failed"));
  }
  auto plugin = std::shared_ptr<Plugin>(new Plugin());
  plugin->api_ = api;
  if (header->abi_version >= 2) {
    plugin->api_v2_ = reinterpret_cast<const tpx_comm_plugin_v2_t*>(header);
    if (plugin->api_v2_->reject == nullptr) plugin->api_v2_ = nullptr;
  }
  plugin->name_ = plugin_name;
  plugin->version_ = header->version ? header->version : "";
  plugin->path_ = path;
  // The library stays loaded for the life of the process: requests and
  // communicators may still point into it during shutdown.
  return std::shared_ptr<const Plugin>(std::move(plugin));
}

absl::StatusOr<std::shared_ptr<const Plugin>> LoadPlugin(absl::string_view name) {
  static std::mutex mu;
  static auto* cache = new std::map<std::string, std::shared_ptr<const Plugin>>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(std::string(name));
  if (it != cache->end()) return it->second;
  if (name.empty() || name.find('/') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("comm backend name '", name,
                                                   "' is invalid (expected e.g. 'ucx')"));
  }
  std::vector<std::string> tried = PluginSearchPaths(name);
  for (const std::string& path : tried) {
    if (!Exists(path)) continue;
    absl::StatusOr<std::shared_ptr<const Plugin>> plugin = LoadPluginFromFile(path, name);
    if (plugin.ok()) cache->emplace(std::string(name), *plugin);
    return plugin;
  }
  return absl::NotFoundError(absl::StrCat(
      "comm backend '", name, "': libtpx_comm_", name, ".so not found. Tried:\n  ",
      absl::StrJoin(tried, "\n  "),
      "\nSet TPX_COMM_PLUGIN_PATH to the directory holding it, or under Bazel add "
      "data = [\"//comm_", name, ":libtpx_comm_", name,
      ".so\"] to the binary or test. Choose another backend with --tpx_comm_backend or "
      "TPX_COMM_BACKEND."));
}

}  // namespace tpx::comm
