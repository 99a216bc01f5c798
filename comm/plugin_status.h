// A minimal status type for code inside communication plugins, which link
// neither Abseil nor the host: a plugin status code (comm/plugin_abi.h) plus a
// message, and the one place that copies it into the ABI's tpx_error_t.
//
//   plugin::Status s = plugin::Status::Error(TPX_ERR_UNAVAILABLE, "peer rank 2 is gone");
//   TPX_PLUGIN_RETURN_IF_ERROR(s);
//   return plugin::ReportStatus(s, err);  // in an ABI entry point
#ifndef TPX_COMM_PLUGIN_STATUS_H_
#define TPX_COMM_PLUGIN_STATUS_H_

#include <cstdio>
#include <string>
#include <utility>

#include "comm/plugin_abi.h"

namespace tpx::plugin {

class Status {
 public:
  Status() = default;
  static Status Error(int code, std::string message) { return Status(code, std::move(message)); }

  bool ok() const { return code_ == TPX_OK; }
  int code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Status(int code, std::string message) : code_(code), message_(std::move(message)) {}
  int code_ = TPX_OK;
  std::string message_;
};

// Returns the status code for an ABI function, filling `err` on failure.
inline int ReportStatus(const Status& s, tpx_error_t* err) {
  if (!s.ok() && err != nullptr) {
    std::snprintf(err->message, sizeof(err->message), "%s", s.message().c_str());
  }
  return s.code();
}

}  // namespace tpx::plugin

#define TPX_PLUGIN_RETURN_IF_ERROR(expr)        \
  do {                                          \
    ::tpx::plugin::Status tpx_plugin_st_ = (expr); \
    if (!tpx_plugin_st_.ok()) return tpx_plugin_st_; \
  } while (0)

#endif  // TPX_COMM_PLUGIN_STATUS_H_
