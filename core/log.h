// A tiny rank-aware log to stderr.
//
//   SetLogRank(2);                      // once, after the process knows its rank
//   TPX_LOG(INFO) << "step " << step;   // "[I rank 2 trainer.cc:41] step 7"
//   TPX_CHECK(n > 0) << "n=" << n;      // internal invariant: logs and aborts
//
// Severities: INFO, WARNING, ERROR, FATAL (FATAL aborts after logging).
// TPX_LOG_LEVEL=warning (or error) in the environment hides lower severities.
#ifndef TPX_CORE_LOG_H_
#define TPX_CORE_LOG_H_

#include <sstream>

namespace tpx {

enum class LogSeverity { kInfo = 0, kWarning = 1, kError = 2, kFatal = 3 };

// Sets the process-wide rank shown in every line; a negative rank (the
// default) shows none.
void SetLogRank(int rank);
int GetLogRank();

namespace log_internal {

// Collects one line and writes it (atomically, in one write) on destruction.
class LogMessage {
 public:
  LogMessage(LogSeverity severity, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

// Lets `TPX_CHECK(c) << x` compile to a no-op when c holds.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace log_internal
}  // namespace tpx

#define TPX_LOG_SEVERITY_INFO ::tpx::LogSeverity::kInfo
#define TPX_LOG_SEVERITY_WARNING ::tpx::LogSeverity::kWarning
#define TPX_LOG_SEVERITY_ERROR ::tpx::LogSeverity::kError
#define TPX_LOG_SEVERITY_FATAL ::tpx::LogSeverity::kFatal

#define TPX_LOG(severity)                                                             \
  ::tpx::log_internal::LogMessage(TPX_LOG_SEVERITY_##severity, __FILE__, __LINE__) \
      .stream()

// Aborts with a message when `cond` is false. For programming errors only;
// user input is reported with absl::Status.
#define TPX_CHECK(cond)                           \
  (cond) ? (void)0                                \
         : ::tpx::log_internal::Voidify() &       \
               TPX_LOG(FATAL) << "Check failed: " #cond " "

#endif  // TPX_CORE_LOG_H_
