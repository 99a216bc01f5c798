// Exposes a C++ Store to plugins as the C struct tpx_store_v1_t
// (comm/plugin_abi.h), and maps absl::Status to and from plugin status codes.
//
//   StoreAbi abi(&store);                 // must outlive every plugin use
//   config.store = abi.get();
//
// The struct's functions never throw; errors come back as a
// tpx_status_code_t with the message in tpx_error_t.
#ifndef TPX_COMM_STORE_STORE_ABI_H_
#define TPX_COMM_STORE_STORE_ABI_H_

#include "absl/status/status.h"
#include "comm/plugin_abi.h"
#include "comm/store/store.h"

namespace tpx::comm {

class StoreAbi {
 public:
  // Does not own `store`, which must outlive this object.
  explicit StoreAbi(Store* store);
  StoreAbi(const StoreAbi&) = delete;
  StoreAbi& operator=(const StoreAbi&) = delete;

  const tpx_store_v1_t* get() const { return &abi_; }

 private:
  tpx_store_v1_t abi_;
};

// absl::Status -> plugin code; writes the message into `err` (may be null).
// Codes are numbered like absl::StatusCode, so any code passes through.
int StatusToPluginCode(const absl::Status& status, tpx_error_t* err);
// Plugin code + message -> absl::Status, the message prefixed by `context`.
absl::Status PluginCodeToStatus(int code, const tpx_error_t& err, absl::string_view context);

}  // namespace tpx::comm

#endif  // TPX_COMM_STORE_STORE_ABI_H_
