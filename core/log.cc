#include "core/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

namespace tpx {
namespace {

std::atomic<int> g_log_rank{-1};

LogSeverity MinSeverity() {
  static const LogSeverity min = [] {
    const char* env = std::getenv("TPX_LOG_LEVEL");
    if (env == nullptr) return LogSeverity::kInfo;
    std::string level(env);
    if (level == "warning" || level == "WARNING") return LogSeverity::kWarning;
    if (level == "error" || level == "ERROR") return LogSeverity::kError;
    return LogSeverity::kInfo;
  }();
  return min;
}

const char* Basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

}  // namespace

void SetLogRank(int rank) { g_log_rank.store(rank, std::memory_order_relaxed); }
int GetLogRank() { return g_log_rank.load(std::memory_order_relaxed); }

namespace log_internal {

LogMessage::LogMessage(LogSeverity severity, const char* file, int line) : severity_(severity) {
  static constexpr char kLetters[] = {'I', 'W', 'E', 'F'};
  stream_ << '[' << kLetters[static_cast<int>(severity)];
  int rank = GetLogRank();
  if (rank >= 0) stream_ << " rank " << rank;
  stream_ << ' ' << Basename(file) << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  if (severity_ >= MinSeverity() || severity_ == LogSeverity::kFatal) {
    std::string text = stream_.str();
    text.push_back('\n');
    // One write() so lines from concurrent ranks/threads do not interleave.
    ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
    (void)ignored;
  }
  if (severity_ == LogSeverity::kFatal) std::abort();
}

}  // namespace log_internal
}  // namespace tpx
