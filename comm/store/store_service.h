// The TCP rendezvous store's request handling, apart from its sockets: the
// key-value table, the limits it enforces and the parked get/wait requests.
// TcpStoreServer (comm/store/tcp_store.h) feeds it decoded frames per connection;
// the fuzz target comm/fuzz/store_request_fuzzer.cc feeds it arbitrary ones.
//
//   StoreService service(StoreLimits{});
//   std::string out;
//   StoreService::Outcome o = service.Handle(/*conn=*/7, {"S", "k", "v"}, absl::Now(), &out);
//   // o == kReplied, `out` holds the encoded reply frame
//   service.Sweep(absl::Now(), [&](int conn, std::string reply) { /* send */ });
//
// Requests: ["S", key, value] set; ["A", key, delta] add; ["C", key,
// expected, desired] compare-set; ["D", key] delete; ["K", key] check;
// ["G", timeout_ms, key] get and ["W", timeout_ms, keys...] wait (timeout -1:
// none), which park until their keys exist or their timeout passes.
// Replies: [status code, payload or message]. A request over a limit gets
// ResourceExhausted naming the limit; a malformed one gets InvalidArgument
// and kProtocolError, after which the caller drops the connection.
#ifndef TPX_COMM_STORE_STORE_SERVICE_H_
#define TPX_COMM_STORE_STORE_SERVICE_H_

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "comm/store/store.h"

namespace tpx::comm {

struct StoreLimits {
  size_t max_value_bytes = kMaxStoreValueBytes;
  size_t max_keys = 1 << 20;
  // Sum of key and value sizes over every stored key.
  size_t max_total_bytes = size_t{1} << 30;
};

class StoreService {
 public:
  enum class Outcome {
    kReplied,        // a reply was appended
    kParked,         // a get/wait waits; Sweep answers it later
    kProtocolError,  // an error reply was appended; drop the connection after sending it
  };

  explicit StoreService(StoreLimits limits) : limits_(limits) {}

  // Handles one request from connection `conn`, appending any reply to *out.
  // A connection has at most one parked request (callers read its next
  // request only after the reply).
  Outcome Handle(int conn, std::vector<std::string>& request, absl::Time now, std::string* out);

  // Answers parked requests whose keys now exist or whose timeout passed.
  void Sweep(absl::Time now, const std::function<void(int conn, std::string reply)>& deliver);

  // Drops the parked request of a closed connection.
  void Forget(int conn) { waiters_.erase(conn); }
  bool Parked(int conn) const { return waiters_.count(conn) != 0; }
  // The earliest parked deadline (InfiniteFuture if none).
  absl::Time NextDeadline() const;

  size_t keys() const { return data_.size(); }
  size_t stored_bytes() const { return stored_bytes_; }

  // Encodes a reply frame.
  static std::string Reply(const absl::Status& status, absl::string_view payload = "");

 private:
  struct Waiter {
    bool is_get;  // get: reply with the value; wait: reply empty
    std::vector<std::string> keys;
    absl::Time deadline;
    absl::Duration timeout;
  };

  // Stores key=value within the limits.
  absl::Status Put(const std::string& key, std::string value);
  bool TryFinish(const Waiter& w, std::string* out) const;

  StoreLimits limits_;
  std::map<std::string, std::string> data_;
  size_t stored_bytes_ = 0;
  std::map<int, Waiter> waiters_;
  bool changed_ = false;
};

}  // namespace tpx::comm

#endif  // TPX_COMM_STORE_STORE_SERVICE_H_
