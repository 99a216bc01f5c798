#include "comm/store/store_abi.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace tpx::comm {
namespace {

// Status codes cross the ABI as their absl::StatusCode numbers.
#define TPX_SAME_CODE(abi, absl_code) \
  static_assert(static_cast<int>(abi) == static_cast<int>(absl::StatusCode::absl_code))
TPX_SAME_CODE(TPX_OK, kOk);
TPX_SAME_CODE(TPX_ERR_INVALID_ARGUMENT, kInvalidArgument);
TPX_SAME_CODE(TPX_ERR_DEADLINE_EXCEEDED, kDeadlineExceeded);
TPX_SAME_CODE(TPX_ERR_FAILED_PRECONDITION, kFailedPrecondition);
TPX_SAME_CODE(TPX_ERR_ABORTED, kAborted);
TPX_SAME_CODE(TPX_ERR_UNIMPLEMENTED, kUnimplemented);
TPX_SAME_CODE(TPX_ERR_INTERNAL, kInternal);
TPX_SAME_CODE(TPX_ERR_UNAVAILABLE, kUnavailable);
#undef TPX_SAME_CODE

int AbiSet(void* ctx, const char* key, const void* value, size_t len, tpx_error_t* err) {
  if (key == nullptr || (value == nullptr && len > 0)) {
    return StatusToPluginCode(absl::InvalidArgumentError("store set: null key or value"), err);
  }
  auto* store = static_cast<Store*>(ctx);
  return StatusToPluginCode(
      store->Set(key, absl::string_view(static_cast<const char*>(value), len)), err);
}

int AbiGet(void* ctx, const char* key, void* value, size_t capacity, size_t* len,
           int64_t timeout_ms, tpx_error_t* err) {
  if (key == nullptr || len == nullptr || (value == nullptr && capacity > 0)) {
    return StatusToPluginCode(absl::InvalidArgumentError("store get: null argument"), err);
  }
  auto* store = static_cast<Store*>(ctx);
  absl::Duration timeout =
      timeout_ms < 0 ? absl::InfiniteDuration() : absl::Milliseconds(timeout_ms);
  absl::StatusOr<std::string> got = store->Get(key, timeout);
  if (!got.ok()) return StatusToPluginCode(got.status(), err);
  *len = got->size();
  if (got->size() > capacity) {
    return StatusToPluginCode(
        absl::FailedPreconditionError(absl::StrCat("store get: value of key '", key, "' has ",
                                                   got->size(), " bytes; buffer holds ",
                                                   capacity)),
        err);
  }
  if (!got->empty()) std::memcpy(value, got->data(), got->size());
  return TPX_OK;
}

int AbiAdd(void* ctx, const char* key, int64_t delta, int64_t* result, tpx_error_t* err) {
  if (key == nullptr) {
    return StatusToPluginCode(absl::InvalidArgumentError("store add: null key"), err);
  }
  auto* store = static_cast<Store*>(ctx);
  absl::StatusOr<int64_t> value = store->Add(key, delta);
  if (!value.ok()) return StatusToPluginCode(value.status(), err);
  if (result != nullptr) *result = *value;
  return TPX_OK;
}

}  // namespace

StoreAbi::StoreAbi(Store* store) {
  std::memset(&abi_, 0, sizeof(abi_));
  abi_.struct_size = sizeof(abi_);
  abi_.ctx = store;
  abi_.set = &AbiSet;
  abi_.get = &AbiGet;
  abi_.add = &AbiAdd;
}

int StatusToPluginCode(const absl::Status& status, tpx_error_t* err) {
  if (err != nullptr) {
    absl::string_view message = status.message();
    size_t n = std::min(message.size(), sizeof(err->message) - 1);
    if (n > 0) std::memcpy(err->message, message.data(), n);  // an OK status has no data
    err->message[n] = '\0';
  }
  return static_cast<int>(status.code());
}

absl::Status PluginCodeToStatus(int code, const tpx_error_t& err, absl::string_view context) {
  if (code == TPX_OK) return absl::OkStatus();
  // strnlen: a plugin might leave the buffer unterminated.
  absl::string_view message(err.message, strnlen(err.message, sizeof(err.message)));
  absl::StatusCode status_code = static_cast<absl::StatusCode>(code);
  if (code < 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    status_code = absl::StatusCode::kInternal;
  }
  if (message.empty()) message = "(no message from the backend)";
  return absl::Status(status_code, absl::StrCat(context, ": ", message));
}

}  // namespace tpx::comm
