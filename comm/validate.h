// Argument validation for every communication operation, done once on the
// host before any backend sees the call, so every backend rejects bad input
// the same way and may assume valid input.
//
//   TPX_RETURN_IF_ERROR(ValidateCollective(args, comm.rank(), comm.size()));
//   // InvalidArgument: "all_gather_v on rank 2 of 4: recv_counts[1] is -3; counts must be >= 0"
//
//   TPX_ASSIGN_OR_RETURN(Device d, ValidateTensorDevices("all_reduce", 0, 2,
//       {{"input", Device::CUDA(0), "f32[4]"}}, {"ucx", false, -1}));
//   // InvalidArgument: "all_reduce on rank 0 of 2: ucx backend takes CPU tensors; input is
//   //                   cuda:0 f32[4]"
#ifndef TPX_COMM_VALIDATE_H_
#define TPX_COMM_VALIDATE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "comm/collective.h"
#include "core/device.h"

namespace tpx::comm {

// Fills what the caller may leave implicit: empty displacement vectors
// become packed layouts (exclusive prefix sums of the counts), and `count`
// gets the rank's own entry for ALL_GATHER_V / REDUCE_SCATTER_V. Call before
// ValidateCollective. Never fails; inconsistent input is left for validation.
void NormalizeCollective(CollectiveArgs& args, int rank, int size);

// InvalidArgument naming the op, the argument and the rank when `args` is
// not a valid call on rank `rank` of a communicator of `size` ranks.
absl::Status ValidateCollective(const CollectiveArgs& args, int rank, int size);

// What memory a communicator's backend works on.
struct BackendMemory {
  absl::string_view backend;  // "ucx", for messages
  // CUDA device memory is accepted (the plugin implements stream_wait).
  bool device_memory = false;
  // The CUDA device the communicator is bound to; -1 when the backend picks
  // it (CUDA tensors are then not checked against it).
  int device = -1;
};

// One tensor argument of a Tensor-form call, as the device checks see it.
struct TensorPlacement {
  const char* arg;          // "input"
  Device device;
  std::string description;  // "f32[4]"
};

// The one device all `tensors` of `op` live on. InvalidArgument naming the
// op, the tensor and the backend when a CUDA tensor goes to a host-only
// backend, when the tensors are on different devices, or when a CUDA tensor
// is not on the communicator's device. CPU tensors are accepted by every
// backend. `tensors` must not be empty.
absl::StatusOr<Device> ValidateTensorDevices(const char* op, int rank, int size,
                                             absl::Span<const TensorPlacement> tensors,
                                             const BackendMemory& backend);

}  // namespace tpx::comm

#endif  // TPX_COMM_VALIDATE_H_
