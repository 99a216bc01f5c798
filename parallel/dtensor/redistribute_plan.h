// The redistribute planner: turns (current, target) placements of a tensor on
// a device mesh into the list of steps that move this rank's local piece from
// one layout to the other, without communicating. The plan is what
// Redistribute executes, and it is public so that callers and tests can see
// which collectives a redistribute will issue and how many bytes they move.
//
//   MeshPosition pos{.shape = {4}, .coordinate = {rank}};
//   TPX_ASSIGN_OR_RETURN(RedistributePlan plan,
//       PlanRedistribute(pos, /*global_shape=*/{10, 8}, DType::kF32, {Shard(0)}, {Shard(1)}));
//   // plan.steps: one all_to_all on mesh dim 0; plan.ToString() describes it.
//
// Per mesh dim, a change of placement becomes one step:
//   Shard(d) -> Replicate     all_gather (sizes per ops::SplitSizes, so uneven works)
//   Partial  -> Replicate     all_reduce with the Partial's reduction
//   Partial  -> Shard(d)      reduce_scatter (uneven blocks allowed)
//   Replicate -> Shard(d)     local: keep this rank's piece
//   Replicate -> Partial(op)  local: sum divides by the group size (as the
//                             reference does, so that summing gives the value
//                             back); avg, max and min keep the value
//   Shard(a) -> Shard(b)      one all_to_all when the two tensor dims are cut
//                             by no other mesh dim that changes; otherwise
//                             Shard(a) -> Replicate -> Shard(b)
//   Shard -> Partial, Partial(x) -> Partial(y)   through Replicate
// A repeated shard of the same tensor dim (e.g. [Shard(0), Shard(0)]) is kept
// only when the same earlier mesh dims cut that tensor dim in both layouts;
// otherwise it is a different piece and goes through Replicate. Steps are then
// ordered stably: gathers/reductions to Replicate or Partial from the
// innermost mesh dim outwards, other steps in mesh-dim order, then shards
// from the outermost mesh dim inwards (replicate-then-shard), so a tensor dim
// is never gathered on one mesh dim while an inner mesh dim still cuts it.
//
// Gradients (the rule of the reference's backward): the gradient of a local
// tensor is laid out like its DTensor with every Partial read as Replicate —
// for a Partial(sum) tensor the gradient of each rank's contribution is the
// gradient of the sum, identical on every rank. Redistribute's backward moves
// the gradient from PartialAsReplicate(output placements) to
// BackwardTargetPlacements(that, input placements): where the input was
// Partial and the gradient is not, the gradient stays Replicate (never
// Replicate -> Partial, hence no division by the group size). So a forward
// Partial -> Shard (reduce_scatter) has an all_gather as backward, and a
// forward Replicate -> Partial has an empty backward.
#ifndef TPX_PARALLEL_DTENSOR_REDISTRIBUTE_PLAN_H_
#define TPX_PARALLEL_DTENSOR_REDISTRIBUTE_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "parallel/dtensor/placement.h"

namespace tpx::dtensor {

enum class StepKind {
  kAllGather,      // Shard(d) -> Replicate
  kAllReduce,      // Partial -> Replicate
  kReduceScatter,  // Partial -> Shard(d)
  kAllToAll,       // Shard(a) -> Shard(b)
  kLocalSlice,     // Replicate -> Shard(d), no communication
  kLocalPartial,   // Replicate -> Partial, no communication
};

// "all_gather", "all_reduce", "reduce_scatter", "all_to_all", "local_slice",
// "local_partial".
const char* StepKindName(StepKind kind);
bool IsCollective(StepKind kind);

struct RedistributeStep {
  StepKind kind = StepKind::kAllGather;
  int64_t mesh_dim = 0;
  Placement from;
  Placement to;
  // Tensor dim whose pieces are joined (all_gather; all_to_all: the dim that
  // is cut before) and the size of every group member's piece along it, in
  // coordinate order. -1 / empty when unused.
  int64_t gather_dim = -1;
  std::vector<int64_t> gather_sizes;
  // Tensor dim that is cut (local_slice, reduce_scatter; all_to_all: the dim
  // that is cut after) and the size of every member's piece along it.
  int64_t split_dim = -1;
  std::vector<int64_t> split_sizes;
  // This rank's local shape before and after the step.
  Shape input_shape;
  Shape output_shape;
  // Bytes this rank hands to the collective and gets back from it (0 for
  // local steps).
  int64_t send_bytes = 0;
  int64_t recv_bytes = 0;
  // Factor applied by kLocalPartial (1 / group size for sum, else 1).
  double scale = 1.0;

  // "all_gather on mesh dim 0: S(0) -> R, [3, 4] -> [10, 4], send 48 B, recv 160 B".
  std::string ToString() const;
};

struct RedistributePlan {
  Placements from;
  Placements to;
  std::vector<RedistributeStep> steps;

  // Number of steps of this kind (on any mesh dim, or on one when mesh_dim >= 0).
  int64_t Count(StepKind kind, int64_t mesh_dim = -1) const;
  int64_t NumCollectives() const;
  int64_t TotalSendBytes() const;
  // One line per step, "(no communication)" for an empty plan.
  std::string ToString() const;
};

// Plans the move of this rank's piece of a `global_shape` tensor from
// `current` to `target` placements. Errors (InvalidArgument): invalid
// placements (see ValidatePlacements), a position that does not fit the mesh
// shape. Deterministic: every rank of the mesh gets steps of the same kinds
// in the same order (sizes are per rank).
absl::StatusOr<RedistributePlan> PlanRedistribute(const MeshPosition& position,
                                                  absl::Span<const int64_t> global_shape,
                                                  DType dtype, Placements current,
                                                  Placements target);

// The reference's backward target: input_placements, except Replicate on
// mesh dims where the gradient is not Partial but the input was.
Placements BackwardTargetPlacements(absl::Span<const Placement> grad_placements,
                                    absl::Span<const Placement> input_placements);

}  // namespace tpx::dtensor

#endif  // TPX_PARALLEL_DTENSOR_REDISTRIBUTE_PLAN_H_
