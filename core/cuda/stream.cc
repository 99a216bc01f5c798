#include "core/cuda/stream.h"

#include <utility>

#include "core/cuda/cuda_status.h"
#include "core/cuda/device_guard.h"
#include "core/status_macros.h"

namespace tpx::cuda {

absl::StatusOr<Stream> Stream::Create(int device) {
  // Scoped: creating a stream or event must not change the caller's device.
  DeviceGuard guard(device);
  TPX_RETURN_IF_ERROR(guard.status());
  cudaStream_t stream = nullptr;
  TPX_RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  return Stream(stream, device);
}

Stream::Stream(Stream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)), device_(other.device_) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

Stream::~Stream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status Stream::WaitFor(const Event& event) {
  return CudaStatus(cudaStreamWaitEvent(stream_, event.get(), 0), "cudaStreamWaitEvent");
}

absl::Status Stream::Synchronize() {
  return CudaStatus(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

absl::StatusOr<Event> Event::Create(int device) {
  // Scoped: creating a stream or event must not change the caller's device.
  DeviceGuard guard(device);
  TPX_RETURN_IF_ERROR(guard.status());
  cudaEvent_t event = nullptr;
  TPX_RETURN_IF_ERROR(
      CudaStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate"));
  return Event(event, device);
}

Event::Event(Event&& other) noexcept
    : event_(std::exchange(other.event_, nullptr)), device_(other.device_) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

absl::Status Event::Record(const Stream& stream) {
  return CudaStatus(cudaEventRecord(event_, stream.get()), "cudaEventRecord");
}

absl::StatusOr<bool> Event::Query() const {
  cudaError_t rc = cudaEventQuery(event_);
  if (rc == cudaErrorNotReady) return false;
  TPX_RETURN_IF_ERROR(CudaStatus(rc, "cudaEventQuery"));
  return true;
}

absl::Status Event::Synchronize() const {
  return CudaStatus(cudaEventSynchronize(event_), "cudaEventSynchronize");
}

}  // namespace tpx::cuda
