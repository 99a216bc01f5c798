#include "comm/store/store.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tpx::comm {

absl::Status ValidateStoreKey(absl::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("store key must not be empty");
  if (key.size() > kMaxStoreKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("store key of ", key.size(),
                                                   " bytes exceeds the limit of ",
                                                   kMaxStoreKeyBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status ValidateStoreValue(absl::string_view key, size_t value_size) {
  if (value_size > kMaxStoreValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("store value for key '", key, "' has ",
                                                   value_size, " bytes; the limit is ",
                                                   kMaxStoreValueBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ParseStoreCounter(absl::string_view key, absl::string_view text) {
  int64_t value = 0;
  if (text.empty()) return 0;
  if (!absl::SimpleAtoi(text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("store Add on key '", key, "': current value is not an integer"));
  }
  return value;
}

absl::Status PrefixStore::Set(absl::string_view key, absl::string_view value) {
  return base_->Set(Full(key), value);
}
absl::StatusOr<std::string> PrefixStore::Get(absl::string_view key, absl::Duration timeout) {
  return base_->Get(Full(key), timeout);
}
absl::StatusOr<int64_t> PrefixStore::Add(absl::string_view key, int64_t delta) {
  return base_->Add(Full(key), delta);
}
absl::StatusOr<std::string> PrefixStore::CompareSet(absl::string_view key,
                                                    absl::string_view expected,
                                                    absl::string_view desired) {
  return base_->CompareSet(Full(key), expected, desired);
}
absl::StatusOr<bool> PrefixStore::Delete(absl::string_view key) { return base_->Delete(Full(key)); }
absl::Status PrefixStore::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& key : keys) full.push_back(Full(key));
  return base_->Wait(full, timeout);
}
absl::StatusOr<bool> PrefixStore::Check(absl::string_view key) { return base_->Check(Full(key)); }

}  // namespace tpx::comm
