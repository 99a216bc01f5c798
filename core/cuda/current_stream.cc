#include "core/cuda/current_stream.h"

#include <array>
#include <atomic>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/cuda/device_guard.h"
#include "core/status_macros.h"

namespace tpx::cuda {

absl::StatusOr<Stream*> CurrentStream(int device) {
  if (device < 0 || device >= kMaxDevices) {
    return absl::InvalidArgumentError(
        absl::StrCat("CurrentStream: device ", device, " is outside [0, ", kMaxDevices, ")"));
  }
  // Every op looks its stream up: the fast path is one atomic load.
  static std::array<std::atomic<Stream*>, kMaxDevices> streams{};
  static std::mutex create_mu;
  Stream* stream = streams[device].load(std::memory_order_acquire);
  if (stream != nullptr) return stream;
  std::lock_guard<std::mutex> lock(create_mu);
  stream = streams[device].load(std::memory_order_acquire);
  if (stream != nullptr) return stream;
  DeviceGuard guard(device);
  TPX_RETURN_IF_ERROR(guard.status());
  TPX_ASSIGN_OR_RETURN(Stream created, Stream::Create(device));
  stream = new Stream(std::move(created));  // never destroyed (see header)
  streams[device].store(stream, std::memory_order_release);
  return stream;
}

}  // namespace tpx::cuda
