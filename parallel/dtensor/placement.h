// Placements: how a tensor is spread over one dimension of a device mesh, and
// where this rank's piece of a global tensor lies.
//
//   Shard(d)      the tensor is cut along tensor dim d; the pieces follow the
//                 one uneven-split rule of tpx (ops::SplitSizes: the first
//                 n % parts pieces get one more element; empty pieces allowed).
//   Replicate()   every rank holds the whole tensor.
//   Partial(op)   every rank holds a contribution; the value is the reduction
//                 (sum, avg, max or min) of the contributions.
//
// A tensor on an N-d mesh has one placement per mesh dim. Shards of the same
// tensor dim on several mesh dims nest in mesh-dim order: [Shard(0), Shard(0)]
// on a 2x2 mesh cuts dim 0 in two along mesh dim 0, then cuts each half in two
// along mesh dim 1.
//
//   Placements p = {Shard(0), Replicate()};
//   TPX_RETURN_IF_ERROR(ValidatePlacements(p, /*mesh_ndim=*/2, /*tensor_rank=*/2));
//   MeshPosition pos{.shape = {2, 2}, .coordinate = {1, 0}};
//   Shape local = LocalShape({5, 4}, p, pos);   // [2, 4]
#ifndef TPX_PARALLEL_DTENSOR_PLACEMENT_H_
#define TPX_PARALLEL_DTENSOR_PLACEMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "comm/collective.h"
#include "core/tensor.h"

namespace tpx::dtensor {

enum class PlacementKind { kReplicate, kShard, kPartial };

class Placement {
 public:
  // Replicate().
  Placement() = default;

  bool is_replicate() const { return kind_ == PlacementKind::kReplicate; }
  bool is_shard() const { return kind_ == PlacementKind::kShard; }
  bool is_partial() const { return kind_ == PlacementKind::kPartial; }
  PlacementKind kind() const { return kind_; }
  // The tensor dim of a Shard (-1 otherwise).
  int64_t shard_dim() const { return dim_; }
  // The reduction of a Partial (kSum otherwise).
  comm::ReduceOp reduce_op() const { return op_; }
  bool is_shard_of(int64_t dim) const { return is_shard() && dim_ == dim; }

  // "R", "S(0)", "P(sum)".
  std::string ToString() const;

  friend bool operator==(const Placement& a, const Placement& b) {
    return a.kind_ == b.kind_ && a.dim_ == b.dim_ && a.op_ == b.op_;
  }
  friend bool operator!=(const Placement& a, const Placement& b) { return !(a == b); }

 private:
  friend Placement Shard(int64_t dim);
  friend Placement Partial(comm::ReduceOp op);
  PlacementKind kind_ = PlacementKind::kReplicate;
  int64_t dim_ = -1;
  comm::ReduceOp op_ = comm::ReduceOp::kSum;
};

inline Placement Replicate() { return Placement(); }
// dim may be negative (counted from the end); ValidatePlacements normalises it.
Placement Shard(int64_t dim);
// op is kSum, kAvg, kMax or kMin (checked by ValidatePlacements).
Placement Partial(comm::ReduceOp op = comm::ReduceOp::kSum);

using Placements = std::vector<Placement>;

// "[S(0), R]".
std::string PlacementsString(absl::Span<const Placement> placements);

// Checks one placement per mesh dim, shard dims inside [-tensor_rank,
// tensor_rank) and a supported Partial reduction; rewrites negative shard dims
// as non-negative. InvalidArgument naming the placement otherwise.
absl::Status ValidatePlacements(Placements& placements, int64_t mesh_ndim, int64_t tensor_rank);

// Replicate where `placements` has Partial, unchanged elsewhere: the layout of
// the gradient of a tensor with these placements (see redistribute_plan.h).
Placements PartialAsReplicate(absl::Span<const Placement> placements);

// A mesh as one rank sees it: its shape and this rank's coordinate in it.
struct MeshPosition {
  std::vector<int64_t> shape;
  std::vector<int64_t> coordinate;
};

// Where this rank's piece lies along one tensor dim of the global tensor.
struct ShardRange {
  int64_t offset = 0;
  int64_t length = 0;
};

// The piece of `global_shape` this rank holds, dim by dim, taking into
// account the shards on mesh dims [0, upto_mesh_dim) only (all of them by
// default). Placements must be valid for the position's mesh.
std::vector<ShardRange> LocalRanges(absl::Span<const int64_t> global_shape,
                                    absl::Span<const Placement> placements,
                                    const MeshPosition& position, int64_t upto_mesh_dim = -1);
// The lengths of LocalRanges: the shape of this rank's local tensor.
Shape LocalShape(absl::Span<const int64_t> global_shape, absl::Span<const Placement> placements,
                 const MeshPosition& position);

}  // namespace tpx::dtensor

#endif  // TPX_PARALLEL_DTENSOR_PLACEMENT_H_
