// A Store kept in a directory that every rank can see (a local or shared
// file system), in the manner of gloo's FileStore. Needs no server, which
// makes it handy for tests and for single-host jobs.
//
//   TPX_ASSIGN_OR_RETURN(auto store, FileStore::Open("/tmp/job42"));
//   TPX_RETURN_IF_ERROR(store->Set("hello", "world"));
//
// Each key is one file (name = hex of the key); writes go through a temporary
// file and rename(2), so readers never see partial values. Add/CompareSet
// serialise through flock(2) on a lock file in the directory. Waiting polls
// with a short sleep (no busy spinning).
#ifndef TPX_COMM_STORE_FILE_STORE_H_
#define TPX_COMM_STORE_FILE_STORE_H_

#include <memory>
#include <string>

#include "comm/store/store.h"

namespace tpx::comm {

class FileStore : public Store {
 public:
  // Creates `dir` (and parents) if needed. Error naming the path if it
  // cannot be created or written.
  static absl::StatusOr<std::unique_ptr<FileStore>> Open(std::string dir);

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::StatusOr<bool> Delete(absl::string_view key) override;
  absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) override;
  absl::StatusOr<bool> Check(absl::string_view key) override;

  const std::string& dir() const { return dir_; }

 private:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}
  std::string PathOf(absl::string_view key) const;
  // Reads a key's file; NotFound if absent.
  absl::StatusOr<std::string> ReadKey(absl::string_view key) const;
  absl::Status WriteKey(absl::string_view key, absl::string_view value) const;

  std::string dir_;
};

}  // namespace tpx::comm

#endif  // TPX_COMM_STORE_FILE_STORE_H_
