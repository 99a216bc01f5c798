// Logging from inside a comm plugin: lines go through the host's log
// (core/log.h: severity, rank, source location, TPX_LOG_LEVEL filtering) via
// the log callback of tpx_host_v1_t, which a version-3 host passes to
// init_with_host. Under an older host (or before init) they go to stderr in
// the same shape. Header-only, no Abseil; ships with comm/plugin_abi.h.
//
//   int InitWithHost(const tpx_host_v1_t* host, tpx_error_t* err) {
//     tpx::plugin::SetHost(host);
//     return Init(err);
//   }
//   TPX_PLUGIN_LOG(WARNING) << "ucx: TPX_UCX_TICK_US=" << v << " is below 10; using 10";
#ifndef TPX_COMM_PLUGIN_LOG_H_
#define TPX_COMM_PLUGIN_LOG_H_

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <sstream>
#include <string>

#include "comm/plugin_abi.h"

namespace tpx::plugin {

// The host's services for this plugin; null until SetHost.
inline std::atomic<const tpx_host_v1_t*>& HostServices() {
  static std::atomic<const tpx_host_v1_t*> host{nullptr};
  return host;
}

// Keeps `host` (from init_with_host) for Log. A struct too small for the
// version-1 fields or without a log function is ignored.
inline void SetHost(const tpx_host_v1_t* host) {
  if (host == nullptr || host->struct_size < sizeof(tpx_host_v1_t) || host->log == nullptr) return;
  HostServices().store(host, std::memory_order_release);
}

// Writes one line through the host's log, or to stderr without a host.
inline void Log(tpx_log_level_t level, const char* file, int line, const std::string& message) {
  if (const tpx_host_v1_t* host = HostServices().load(std::memory_order_acquire)) {
    host->log(host->ctx, level, file, line, message.c_str());
    return;
  }
  const char* slash = file != nullptr ? std::strrchr(file, '/') : nullptr;
  const char* base = slash != nullptr ? slash + 1 : (file != nullptr ? file : "plugin");
  const char letter = level == TPX_LOG_ERROR ? 'E' : level == TPX_LOG_WARNING ? 'W' : 'I';
  std::string text = std::string("[") + letter + ' ' + base + ':' + std::to_string(line) + "] " +
                     message + '\n';
  // One write() so lines from concurrent threads do not interleave.
  ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
}

// Collects one line and logs it on destruction (TPX_PLUGIN_LOG).
class LogLine {
 public:
  LogLine(tpx_log_level_t level, const char* file, int line)
      : level_(level), file_(file), line_(line) {}
  ~LogLine() { Log(level_, file_, line_, stream_.str()); }
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  tpx_log_level_t level_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};

}  // namespace tpx::plugin

// TPX_PLUGIN_LOG(INFO|WARNING|ERROR) << ...;
#define TPX_PLUGIN_LOG(severity) \
  ::tpx::plugin::LogLine(TPX_LOG_##severity, __FILE__, __LINE__).stream()

#endif  // TPX_COMM_PLUGIN_LOG_H_
