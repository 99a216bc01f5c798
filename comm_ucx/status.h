// A small status type for the UCX plugin's internals: a plugin status code
// (comm/plugin_abi.h) plus a message. The plugin does not link Abseil, so it
// keeps its own minimal type; plugin_entry.cc copies it into tpx_error_t.
//
//   Status s = Status::Error(TPX_ERR_UNAVAILABLE, "peer rank 2 is gone");
//   if (!s.ok()) return s;
#ifndef TPX_COMM_UCX_STATUS_H_
#define TPX_COMM_UCX_STATUS_H_

#include <string>
#include <utility>

#include "comm/plugin_abi.h"

namespace tpx::ucx {

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

#define TPX_UCX_RETURN_IF_ERROR(expr)       \
  do {                                      \
    ::tpx::ucx::Status _st = (expr);        \
    if (!_st.ok()) return _st;              \
  } while (0)

}  // namespace tpx::ucx

#endif  // TPX_COMM_UCX_STATUS_H_
