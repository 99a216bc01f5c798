#include "parallel/dtensor/placement.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/ops.h"

namespace tpx::dtensor {

Placement Shard(int64_t dim) {
  Placement p;
  p.kind_ = PlacementKind::kShard;
  p.dim_ = dim;
  return p;
}

Placement Partial(comm::ReduceOp op) {
  Placement p;
  p.kind_ = PlacementKind::kPartial;
  p.op_ = op;
  return p;
}

std::string Placement::ToString() const {
  switch (kind_) {
    case PlacementKind::kReplicate:
      return "R";
    case PlacementKind::kShard:
      return absl::StrCat("S(", dim_, ")");
    case PlacementKind::kPartial:
      return absl::StrCat("P(", comm::ReduceOpName(op_), ")");
  }
  return "?";
}

std::string PlacementsString(absl::Span<const Placement> placements) {
  return absl::StrCat(
      "[",
      absl::StrJoin(placements, ", ",
                    [](std::string* out, const Placement& p) { out->append(p.ToString()); }),
      "]");
}

absl::Status ValidatePlacements(Placements& placements, int64_t mesh_ndim, int64_t tensor_rank) {
  if (static_cast<int64_t>(placements.size()) != mesh_ndim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "placements ", PlacementsString(placements), " have ", placements.size(),
        " entries but the mesh has ", mesh_ndim, " dims (one placement per mesh dim)"));
  }
  for (size_t i = 0; i < placements.size(); ++i) {
    Placement& p = placements[i];
    if (p.is_shard()) {
      const int64_t d = p.shard_dim();
      if (d < -tensor_rank || d >= tensor_rank) {
        return absl::InvalidArgumentError(absl::StrCat(
            "placement ", p.ToString(), " on mesh dim ", i, " of ", PlacementsString(placements),
            ": shard dim out of range for a tensor of rank ", tensor_rank));
      }
      if (d < 0) p = Shard(d + tensor_rank);
    } else if (p.is_partial()) {
      const comm::ReduceOp op = p.reduce_op();
      if (op != comm::ReduceOp::kSum && op != comm::ReduceOp::kAvg && op != comm::ReduceOp::kMax &&
          op != comm::ReduceOp::kMin) {
        return absl::InvalidArgumentError(absl::StrCat("placement ", p.ToString(), " on mesh dim ",
                                                       i,
                                                       ": Partial supports sum, avg, max and min"));
      }
    }
  }
  return absl::OkStatus();
}

Placements PartialAsReplicate(absl::Span<const Placement> placements) {
  Placements out(placements.begin(), placements.end());
  for (Placement& p : out) {
    if (p.is_partial()) p = Replicate();
  }
  return out;
}

std::vector<ShardRange> LocalRanges(absl::Span<const int64_t> global_shape,
                                    absl::Span<const Placement> placements,
                                    const MeshPosition& position, int64_t upto_mesh_dim) {
  std::vector<ShardRange> ranges(global_shape.size());
  for (size_t d = 0; d < global_shape.size(); ++d) ranges[d] = {0, global_shape[d]};
  const int64_t end = upto_mesh_dim < 0 ? static_cast<int64_t>(placements.size()) : upto_mesh_dim;
  for (int64_t i = 0; i < end; ++i) {
    if (!placements[i].is_shard()) continue;
    ShardRange& r = ranges[placements[i].shard_dim()];
    const std::vector<int64_t> sizes = ops::SplitSizes(r.length, position.shape[i]);
    for (int64_t c = 0; c < position.coordinate[i]; ++c) r.offset += sizes[c];
    r.length = sizes[position.coordinate[i]];
  }
  return ranges;
}

Shape LocalShape(absl::Span<const int64_t> global_shape, absl::Span<const Placement> placements,
                 const MeshPosition& position) {
  Shape shape;
  for (const ShardRange& r : LocalRanges(global_shape, placements, position)) {
    shape.push_back(r.length);
  }
  return shape;
}

}  // namespace tpx::dtensor
