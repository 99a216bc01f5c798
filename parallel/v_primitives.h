// Variable-size primitives with autograd (Modulus's distributed autograd):
// a global tensor lives as per-rank chunks of different extents along `dim`.
//
//   AllGatherV          every rank gets the full tensor | grad: each rank's chunk
//                       summed over ranks (reduce-scatter-v), optionally in f32
//   GatherV / ScatterV  to / from one rank              | grad: the other one
//   IndexedAllToAllV    rows picked by index lists go to each rank
//                                                       | grad: reverse exchange,
//                       then scatter-add into the rows they came from
//
//   std::vector<int64_t> sizes = ops::SplitSizes(n, comm.size());
//   TPX_ASSIGN_OR_RETURN(Variable full, AllGatherV(comm, chunk, sizes, /*dim=*/0));
//
// sizes[r] is rank r's extent along dim. The communicator must outlive the graph.
#ifndef TPX_PARALLEL_V_PRIMITIVES_H_
#define TPX_PARALLEL_V_PRIMITIVES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "core/autograd/variable.h"
#include "core/tensor.h"

namespace tpx::parallel {

// use_fp32: the backward reduction of bf16/f16 gradients accumulates in f32.
absl::StatusOr<Variable> AllGatherV(comm::Communicator& comm, const Variable& chunk,
                                    absl::Span<const int64_t> sizes, int64_t dim = 0,
                                    bool use_fp32 = true);
// The full tensor on dst; a tensor with extent 0 along dim on other ranks.
absl::StatusOr<Variable> GatherV(comm::Communicator& comm, const Variable& chunk,
                                 absl::Span<const int64_t> sizes, int64_t dim = 0, int dst = 0);
// This rank's chunk of src's `full`. Other ranks pass a tensor with the same
// dims apart from `dim` (its values are ignored; its gradient is zero).
absl::StatusOr<Variable> ScatterV(comm::Communicator& comm, const Variable& full,
                                  absl::Span<const int64_t> sizes, int64_t dim = 0, int src = 0);
// indices[j] (1-D i64) picks the slices of x along dim that go to rank j;
// sizes[i][j] is how many slices rank i sends to rank j (every rank passes
// the whole matrix). Output: the slices from rank 0, 1, ... concatenated.
absl::StatusOr<Variable> IndexedAllToAllV(comm::Communicator& comm, const Variable& x,
                                          const std::vector<Tensor>& indices,
                                          const std::vector<std::vector<int64_t>>& sizes,
                                          bool use_fp32 = true, int64_t dim = 0);

}  // namespace tpx::parallel

#endif  // TPX_PARALLEL_V_PRIMITIVES_H_
