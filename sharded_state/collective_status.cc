#include "sharded_state/collective_status.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tpx::sharded_state {
namespace {

constexpr int64_t kMessageInts = 256;  // 1 KiB, bytes carried as i32 words

}  // namespace

absl::Status BroadcastString(comm::Communicator& comm, std::string* value, int root) {
  std::vector<int32_t> buffer(kMessageInts, 0);
  if (comm.rank() == root) {
    std::memcpy(buffer.data(), value->data(),
                std::min<size_t>(value->size(), kMessageInts * 4 - 1));
  }
  TPX_RETURN_IF_ERROR(comm.Broadcast(buffer.data(), kMessageInts, DType::kI32, root).Wait());
  const char* bytes = reinterpret_cast<const char*>(buffer.data());
  *value = std::string(bytes, strnlen(bytes, kMessageInts * 4 - 1));
  return absl::OkStatus();
}

absl::Status AgreeOnStatus(comm::Communicator& comm, const absl::Status& local) {
  if (comm.size() == 1) return local;
  int32_t code = static_cast<int32_t>(local.code());
  std::vector<int32_t> codes(static_cast<size_t>(comm.size()));
  TPX_RETURN_IF_ERROR(comm.AllGather(&code, codes.data(), 1, DType::kI32).Wait());
  int failed = -1;
  for (int r = 0; r < comm.size() && failed < 0; ++r) {
    if (codes[static_cast<size_t>(r)] != 0) failed = r;
  }
  if (failed < 0) return absl::OkStatus();
  std::string message(local.message());
  TPX_RETURN_IF_ERROR(BroadcastString(comm, &message, failed));
  if (comm.rank() == failed) return local;
  return absl::Status(static_cast<absl::StatusCode>(codes[static_cast<size_t>(failed)]),
                      absl::StrCat("rank ", failed, ": ", message));
}

}  // namespace tpx::sharded_state
