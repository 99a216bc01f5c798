#include "comm/store/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"

namespace tpx::comm {
namespace {

// Holds flock(LOCK_EX) on the directory's lock file for its lifetime.
class DirLock {
 public:
  explicit DirLock(const std::string& dir) {
    fd_ = ::open((dir + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) {
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~DirLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  absl::Status status(const std::string& dir) const {
    if (fd_ >= 0) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat("FileStore: cannot open lock file in ", dir));
  }

 private:
  int fd_ = -1;
};

absl::Duration PollInterval(absl::Duration waited) {
  // Short at first (latency), longer later (CPU); never a busy spin.
  return waited < absl::Milliseconds(20) ? absl::Microseconds(200) : absl::Milliseconds(5);
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileStore>> FileStore::Open(std::string dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("FileStore: cannot create directory ", dir, ": ", ec.message()));
  }
  return std::unique_ptr<FileStore>(new FileStore(std::move(dir)));
}

std::string FileStore::PathOf(absl::string_view key) const {
  return absl::StrCat(dir_, "/k_", absl::BytesToHexString(key));
}

absl::StatusOr<std::string> FileStore::ReadKey(absl::string_view key) const {
  std::ifstream in(PathOf(key), std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("store key '", key, "' not found"));
  std::ostringstream data;
  data << in.rdbuf();
  return data.str();
}

absl::Status FileStore::WriteKey(absl::string_view key, absl::string_view value) const {
  static std::atomic<uint64_t> counter{0};
  std::string tmp = absl::StrCat(dir_, "/.tmp_", ::getpid(), "_", counter.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    if (!out) {
      return absl::UnavailableError(absl::StrCat("FileStore: cannot write ", tmp));
    }
  }
  if (std::rename(tmp.c_str(), PathOf(key).c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat("FileStore: cannot rename into ", PathOf(key), ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

absl::Status FileStore::Set(absl::string_view key, absl::string_view value) {
  TPX_RETURN_IF_ERROR(ValidateStoreKey(key));
  TPX_RETURN_IF_ERROR(ValidateStoreValue(key, value.size()));
  return WriteKey(key, value);
}

absl::StatusOr<std::string> FileStore::Get(absl::string_view key, absl::Duration timeout) {
  TPX_RETURN_IF_ERROR(ValidateStoreKey(key));
  TPX_RETURN_IF_ERROR(Wait({std::string(key)}, timeout));
  return ReadKey(key);
}

absl::StatusOr<int64_t> FileStore::Add(absl::string_view key, int64_t delta) {
  TPX_RETURN_IF_ERROR(ValidateStoreKey(key));
  DirLock lock(dir_);
  TPX_RETURN_IF_ERROR(lock.status(dir_));
  int64_t value = 0;
  absl::StatusOr<std::string> current = ReadKey(key);
  if (current.ok()) {
    TPX_ASSIGN_OR_RETURN(value, ParseStoreCounter(key, *current));
  }
  value += delta;
  TPX_RETURN_IF_ERROR(WriteKey(key, absl::StrCat(value)));
  return value;
}

absl::StatusOr<std::string> FileStore::CompareSet(absl::string_view key, absl::string_view expected,
                                                  absl::string_view desired) {
  TPX_RETURN_IF_ERROR(ValidateStoreKey(key));
  TPX_RETURN_IF_ERROR(ValidateStoreValue(key, desired.size()));
  DirLock lock(dir_);
  TPX_RETURN_IF_ERROR(lock.status(dir_));
  absl::StatusOr<std::string> current = ReadKey(key);
  std::string now = current.ok() ? *current : std::string();
  if (now != expected) return now;
  TPX_RETURN_IF_ERROR(WriteKey(key, desired));
  return std::string(desired);
}

absl::StatusOr<bool> FileStore::Delete(absl::string_view key) {
  TPX_RETURN_IF_ERROR(ValidateStoreKey(key));
  return std::remove(PathOf(key).c_str()) == 0;
}

absl::StatusOr<bool> FileStore::Check(absl::string_view key) {
  TPX_RETURN_IF_ERROR(ValidateStoreKey(key));
  return ::access(PathOf(key).c_str(), F_OK) == 0;
}

absl::Status FileStore::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  for (const std::string& key : keys) TPX_RETURN_IF_ERROR(ValidateStoreKey(key));
  absl::Time start = absl::Now();
  absl::Time deadline = start + timeout;
  while (true) {
    std::vector<absl::string_view> missing;
    for (const std::string& key : keys) {
      if (::access(PathOf(key).c_str(), F_OK) != 0) missing.push_back(key);
    }
    if (missing.empty()) return absl::OkStatus();
    absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("FileStore ", dir_, ": timed out after ", absl::FormatDuration(timeout),
                       " waiting for key(s) '", absl::StrJoin(missing, "', '"), "'"));
    }
    absl::SleepFor(std::min(PollInterval(now - start), deadline - now));
  }
}

}  // namespace tpx::comm
