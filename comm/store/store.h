// Rendezvous key-value store: the bootstrap channel through which ranks of a
// communicator exchange small blobs (transport addresses, unique ids,
// progress heartbeats). Bootstrap only: no bulk data moves through a Store.
//
//   FileStore store("/tmp/rdzv");                       // or TcpStore
//   TPX_RETURN_IF_ERROR(store.Set("rank0/addr", addr));
//   TPX_ASSIGN_OR_RETURN(std::string peer,
//                        store.Get("rank1/addr", absl::Seconds(30)));
//   TPX_ASSIGN_OR_RETURN(int64_t arrived, store.Add("barrier", 1));
//
// Keys are non-empty strings of at most kMaxStoreKeyBytes bytes; values are
// bytes, at most kMaxStoreValueBytes. Integers written by Add are stored as
// decimal text, so Get on such a key returns e.g. "3".
// Every implementation is thread-safe: one Store may be used from several
// threads at once.
#ifndef TPX_COMM_STORE_STORE_H_
#define TPX_COMM_STORE_STORE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace tpx::comm {

inline constexpr size_t kMaxStoreKeyBytes = 1024;
inline constexpr size_t kMaxStoreValueBytes = 16u << 20;  // 16 MiB

class Store {
 public:
  virtual ~Store() = default;

  // Stores `value` under `key`, replacing any previous value.
  // InvalidArgument for an empty/too-long key or a too-large value.
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;

  // Returns the value of `key`, waiting up to `timeout` for it to appear.
  // DeadlineExceeded (naming the key) when it does not.
  virtual absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) = 0;

  // Atomically adds `delta` to the integer at `key` (absent counts as 0) and
  // returns the new value. InvalidArgument if the key holds a non-integer.
  virtual absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) = 0;

  // Atomically: if the current value equals `expected` (an absent key equals
  // the empty string), stores `desired`. Returns the value held afterwards
  // (`desired` on success, the unchanged current value otherwise; "" if absent).
  virtual absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                                 absl::string_view desired) = 0;

  // Removes `key`. Returns whether it existed.
  virtual absl::StatusOr<bool> Delete(absl::string_view key) = 0;

  // Waits up to `timeout` until every key in `keys` exists. DeadlineExceeded
  // naming the keys still missing.
  virtual absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) = 0;

  // Non-blocking: whether `key` exists now.
  virtual absl::StatusOr<bool> Check(absl::string_view key) = 0;
};

// Shared argument checks for implementations.
absl::Status ValidateStoreKey(absl::string_view key);
absl::Status ValidateStoreValue(absl::string_view key, size_t value_size);
// Parses an Add counter; InvalidArgument naming the key if `text` is not an integer.
absl::StatusOr<int64_t> ParseStoreCounter(absl::string_view key, absl::string_view text);

// A view of another Store with every key prefixed by `prefix` + "/", so that
// several users (communicators, tests) can share one Store without clashes.
// Does not own `base`, which must outlive it.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, Store* base) : prefix_(std::move(prefix) + "/"), base_(base) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::StatusOr<bool> Delete(absl::string_view key) override;
  absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) override;
  absl::StatusOr<bool> Check(absl::string_view key) override;

 private:
  std::string Full(absl::string_view key) const { return prefix_ + std::string(key); }

  std::string prefix_;
  Store* base_;
};

}  // namespace tpx::comm

#endif  // TPX_COMM_STORE_STORE_H_
