// Owning wrappers for a CUDA stream and event on one device.
//
//   TPX_ASSIGN_OR_RETURN(cuda::Stream stream, cuda::Stream::Create(/*device=*/0));
//   TPX_ASSIGN_OR_RETURN(cuda::Event done, cuda::Event::Create(0));
//   ... enqueue work on stream.get() ...
//   TPX_RETURN_IF_ERROR(done.Record(stream));
//   TPX_RETURN_IF_ERROR(other.WaitFor(done));   // device-side ordering, host not blocked
//   TPX_RETURN_IF_ERROR(done.Synchronize());    // host waits
#ifndef TPX_CORE_CUDA_STREAM_H_
#define TPX_CORE_CUDA_STREAM_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tpx::cuda {

class Event;

// Non-blocking with respect to the legacy default stream.
class Stream {
 public:
  static absl::StatusOr<Stream> Create(int device);
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }
  // Later work on this stream starts after `event`'s recorded work.
  absl::Status WaitFor(const Event& event);
  absl::Status Synchronize();

 private:
  Stream(cudaStream_t stream, int device) : stream_(stream), device_(device) {}
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

// Timing disabled (cheaper); used for ordering and completion.
class Event {
 public:
  static absl::StatusOr<Event> Create(int device);
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  cudaEvent_t get() const { return event_; }
  absl::Status Record(const Stream& stream);
  // True once the recorded work finished.
  absl::StatusOr<bool> Query() const;
  absl::Status Synchronize() const;

 private:
  Event(cudaEvent_t event, int device) : event_(event), device_(device) {}
  cudaEvent_t event_ = nullptr;
  int device_ = 0;
};

}  // namespace tpx::cuda

#endif  // TPX_CORE_CUDA_STREAM_H_
