// Makes a CUDA device current for a scope and restores the caller's device
// on exit, so library calls never change which device the caller's thread
// uses.
//
//   DeviceGuard guard(index);
//   TPX_RETURN_IF_ERROR(guard.status());
//   ... cudaMalloc / kernel launches on device `index` ...
#ifndef TPX_CORE_CUDA_DEVICE_GUARD_H_
#define TPX_CORE_CUDA_DEVICE_GUARD_H_

#include "absl/status/status.h"

namespace tpx::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  // Whether `device` could be made current.
  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;  // the caller's device when the guard switched, else -1
  absl::Status status_;
};

}  // namespace tpx::cuda

#endif  // TPX_CORE_CUDA_DEVICE_GUARD_H_
