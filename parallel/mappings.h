// Differentiable communication mappings of tensor and sequence parallelism
// (Megatron's mappings): each is a collective in forward paired with its
// adjoint collective in backward.
//
//   forward                         backward
//   CopyToTensorParallelRegion      identity            | all-reduce
//   ReduceFromTensorParallelRegion  all-reduce          | identity
//   ScatterToTensorParallelRegion   split last dim      | all-gather last dim
//   GatherFromTensorParallelRegion  all-gather last dim | split last dim
//   ScatterToSequenceParallelRegion split dim 0         | all-gather dim 0
//   GatherFromSequenceParallelRegion all-gather dim 0   | reduce-scatter dim 0 (or split)
//   ReduceScatterToSequenceParallelRegion reduce-scatter dim 0 | all-gather dim 0
//   AllGatherLastDim                all-gather last dim | reduce-scatter last dim
//   ReduceScatterLastDim            reduce-scatter last | all-gather last dim
//   AllToAll (dim 0, split sizes)   all-to-all          | all-to-all, sizes swapped
//   AllToAllSp2Hp / AllToAllHp2Sp   [T/tp, H] <-> [T, H/tp], each the other's backward
//
//   TPX_ASSIGN_OR_RETURN(Variable x_sp, ScatterToSequenceParallelRegion(tp, x));
//   TPX_ASSIGN_OR_RETURN(Variable y, GatherFromTensorParallelRegion(tp, y_parallel,
//                                                                   ops::SplitSizes(n, tp.size())));
//
// Split sizes (optional everywhere): per-rank extents along the split dim, in
// rank order; empty = equal pieces (then the extent must divide; the error
// says so). Scatter / reduce-scatter sizes split the full extent; gather sizes
// are the extents every rank contributes. Backward uses the same sizes.
// The communicator must outlive the graph.
#ifndef TPX_PARALLEL_MAPPINGS_H_
#define TPX_PARALLEL_MAPPINGS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "core/autograd/variable.h"

namespace tpx::parallel {

using SplitSizesArg = absl::Span<const int64_t>;

absl::StatusOr<Variable> CopyToTensorParallelRegion(comm::Communicator& tp, const Variable& x);
absl::StatusOr<Variable> ReduceFromTensorParallelRegion(comm::Communicator& tp, const Variable& x);
absl::StatusOr<Variable> ScatterToTensorParallelRegion(comm::Communicator& tp, const Variable& x,
                                                       SplitSizesArg sizes = {});
absl::StatusOr<Variable> GatherFromTensorParallelRegion(comm::Communicator& tp, const Variable& x,
                                                        SplitSizesArg sizes = {});

absl::StatusOr<Variable> ScatterToSequenceParallelRegion(comm::Communicator& tp,
                                                         const Variable& x,
                                                         SplitSizesArg sizes = {});
// tensor_parallel_output_grad: the consumer of the output is tensor-parallel
// (its gradient is partial on each rank) -> backward reduce-scatters; false ->
// backward just keeps this rank's piece.
absl::StatusOr<Variable> GatherFromSequenceParallelRegion(comm::Communicator& tp,
                                                          const Variable& x,
                                                          bool tensor_parallel_output_grad = true,
                                                          SplitSizesArg sizes = {});
absl::StatusOr<Variable> ReduceScatterToSequenceParallelRegion(comm::Communicator& tp,
                                                               const Variable& x,
                                                               SplitSizesArg sizes = {});

absl::StatusOr<Variable> AllGatherLastDim(comm::Communicator& tp, const Variable& x,
                                          SplitSizesArg sizes = {});
absl::StatusOr<Variable> ReduceScatterLastDim(comm::Communicator& tp, const Variable& x,
                                              SplitSizesArg sizes = {});

// Rows (dim 0) of x: input_split_sizes[j] rows go to rank j;
// output_split_sizes[i] rows come from rank i. Empty = equal.
absl::StatusOr<Variable> AllToAll(comm::Communicator& group, const Variable& x,
                                  SplitSizesArg output_split_sizes = {},
                                  SplitSizesArg input_split_sizes = {});
// [T/tp, ..., H] (sequence-parallel tokens, full hidden) -> [T, ..., H/tp].
absl::StatusOr<Variable> AllToAllSp2Hp(comm::Communicator& tp, const Variable& x);
// [T, ..., H/tp] -> [T/tp, ..., H].
absl::StatusOr<Variable> AllToAllHp2Sp(comm::Communicator& tp, const Variable& x);

}  // namespace tpx::parallel

#endif  // TPX_PARALLEL_MAPPINGS_H_
