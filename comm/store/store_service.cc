#include "comm/store/store_service.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/store/store_wire.h"

namespace tpx::comm {

std::string StoreService::Reply(const absl::Status& status, absl::string_view payload) {
  return EncodeFrame({absl::StrCat(static_cast<int>(status.code())),
                      status.ok() ? std::string(payload) : std::string(status.message())});
}

absl::Status StoreService::Put(const std::string& key, std::string value) {
  if (value.size() > limits_.max_value_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("value of ", value.size(), " bytes for key '", key,
                     "' exceeds the store's limit of ", limits_.max_value_bytes,
                     " bytes per value"));
  }
  auto it = data_.find(key);
  const size_t old_bytes = it == data_.end() ? 0 : key.size() + it->second.size();
  if (it == data_.end() && data_.size() >= limits_.max_keys) {
    return absl::ResourceExhaustedError(absl::StrCat("the store holds its limit of ",
                                                     limits_.max_keys, " keys; cannot add '",
                                                     key, "'"));
  }
  const size_t new_total = stored_bytes_ - old_bytes + key.size() + value.size();
  if (new_total > limits_.max_total_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("storing key '", key, "' would take the store to ", new_total,
                     " bytes, over its limit of ", limits_.max_total_bytes, " bytes"));
  }
  stored_bytes_ = new_total;
  if (it == data_.end()) {
    data_.emplace(key, std::move(value));
  } else {
    it->second = std::move(value);
  }
  changed_ = true;
  return absl::OkStatus();
}

StoreService::Outcome StoreService::Handle(int conn, std::vector<std::string>& req, absl::Time now,
                                           std::string* out) {
  auto reply = [&](const absl::Status& s, absl::string_view payload = "") {
    *out += Reply(s, payload);
    return Outcome::kReplied;
  };
  auto protocol_error = [&](absl::string_view what) {
    *out += Reply(absl::InvalidArgumentError(absl::StrCat("malformed store request: ", what)));
    return Outcome::kProtocolError;
  };
  if (req.empty()) return protocol_error("no command");
  const std::string& cmd = req[0];
  // Exact arity per command (wait takes one or more keys).
  size_t arity = 0;
  if (cmd == "S" || cmd == "A") arity = 3;
  else if (cmd == "C") arity = 4;
  else if (cmd == "D" || cmd == "K") arity = 2;
  else if (cmd == "G") arity = 3;
  else if (cmd == "W") arity = req.size() >= 3 ? req.size() : 3;
  else return protocol_error(absl::StrCat("unknown command '", absl::CEscape(cmd.substr(0, 16)), "'"));
  if (req.size() != arity) {
    return protocol_error(absl::StrCat("'", cmd, "' takes ", arity - 1, " arguments, got ",
                                       req.size() - 1));
  }
  const size_t first_key = (cmd == "G" || cmd == "W") ? 2 : 1;
  for (size_t i = first_key; i < (cmd == "W" ? req.size() : first_key + 1); ++i) {
    if (absl::Status s = ValidateStoreKey(req[i]); !s.ok()) return protocol_error(s.message());
  }
  const std::string& key = req[first_key];
  if (cmd == "S") return reply(Put(key, std::move(req[2])));
  if (cmd == "A") {
    int64_t delta = 0;
    if (!absl::SimpleAtoi(req[2], &delta)) return protocol_error("bad add delta");
    auto it = data_.find(key);
    absl::StatusOr<int64_t> current =
        ParseStoreCounter(key, it == data_.end() ? absl::string_view() : it->second);
    if (!current.ok()) return reply(current.status());
    int64_t value;
    if (__builtin_add_overflow(*current, delta, &value)) {
      return reply(absl::OutOfRangeError(
          absl::StrCat("store Add on key '", key, "': ", *current, " + ", delta,
                       " overflows a 64-bit integer")));
    }
    std::string text = absl::StrCat(value);
    if (absl::Status s = Put(key, text); !s.ok()) return reply(s);
    return reply(absl::OkStatus(), text);
  }
  if (cmd == "C") {
    auto it = data_.find(key);
    std::string now_value = it == data_.end() ? std::string() : it->second;
    if (now_value == req[2]) {
      if (absl::Status s = Put(key, req[3]); !s.ok()) return reply(s);
      now_value = std::move(req[3]);
    }
    return reply(absl::OkStatus(), now_value);
  }
  if (cmd == "D") {
    auto it = data_.find(key);
    if (it == data_.end()) return reply(absl::OkStatus(), "0");
    stored_bytes_ -= it->first.size() + it->second.size();
    data_.erase(it);
    return reply(absl::OkStatus(), "1");
  }
  if (cmd == "K") return reply(absl::OkStatus(), data_.count(key) ? "1" : "0");
  // G / W
  if (waiters_.count(conn)) return protocol_error("a get or wait is already pending");
  int64_t timeout_ms = 0;
  if (!absl::SimpleAtoi(req[1], &timeout_ms) || timeout_ms < -1) {
    return protocol_error("bad timeout");
  }
  Waiter w{cmd == "G", std::vector<std::string>(req.begin() + 2, req.end()),
           absl::InfiniteFuture(), absl::InfiniteDuration()};
  if (timeout_ms >= 0) {
    w.timeout = absl::Milliseconds(timeout_ms);
    w.deadline = now + w.timeout;
  }
  if (TryFinish(w, out)) return Outcome::kReplied;
  waiters_.emplace(conn, std::move(w));
  return Outcome::kParked;
}

bool StoreService::TryFinish(const Waiter& w, std::string* out) const {
  for (const std::string& k : w.keys) {
    if (!data_.count(k)) return false;
  }
  *out += Reply(absl::OkStatus(), w.is_get ? data_.at(w.keys[0]) : std::string());
  return true;
}

void StoreService::Sweep(absl::Time now,
                         const std::function<void(int conn, std::string reply)>& deliver) {
  const bool check_keys = changed_;
  changed_ = false;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    const Waiter& w = it->second;
    std::string out;
    if (check_keys && TryFinish(w, &out)) {
      deliver(it->first, std::move(out));
      it = waiters_.erase(it);
      continue;
    }
    if (now >= w.deadline) {
      std::vector<std::string> missing;
      for (const std::string& k : w.keys) {
        if (!data_.count(k)) missing.push_back(k);
      }
      deliver(it->first, Reply(absl::DeadlineExceededError(absl::StrCat(
                             "timed out after ", absl::FormatDuration(w.timeout),
                             " waiting for key(s) '", absl::StrJoin(missing, "', '"), "'"))));
      it = waiters_.erase(it);
      continue;
    }
    ++it;
  }
}

absl::Time StoreService::NextDeadline() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [conn, w] : waiters_) next = std::min(next, w.deadline);
  return next;
}

}  // namespace tpx::comm
