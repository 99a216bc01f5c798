// Argument validation for every communication operation, done once on the
// host before any backend sees the call, so every backend rejects bad input
// the same way and may assume valid input.
//
//   TPX_RETURN_IF_ERROR(ValidateCollective(args, comm.rank(), comm.size()));
//   // InvalidArgument: "all_gather_v on rank 2 of 4: recv_counts[1] is -3; counts must be >= 0"
#ifndef TPX_COMM_VALIDATE_H_
#define TPX_COMM_VALIDATE_H_

#include "absl/status/status.h"
#include "comm/collective.h"

namespace tpx::comm {

// Fills what the caller may leave implicit: empty displacement vectors
// become packed layouts (exclusive prefix sums of the counts), and `count`
// gets the rank's own entry for ALL_GATHER_V / REDUCE_SCATTER_V. Call before
// ValidateCollective. Never fails; inconsistent input is left for validation.
void NormalizeCollective(CollectiveArgs& args, int rank, int size);

// InvalidArgument naming the op, the argument and the rank when `args` is
// not a valid call on rank `rank` of a communicator of `size` ranks.
absl::Status ValidateCollective(const CollectiveArgs& args, int rank, int size);

}  // namespace tpx::comm

#endif  // TPX_COMM_VALIDATE_H_
