#include "parallel/dtensor/redistribute.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "parallel/shard_comm.h"

namespace tpx::dtensor {
namespace {

// The shapes of every group member's piece: `shape` with dim's extent
// replaced by each of `sizes`.
std::vector<Shape> PieceShapes(const Shape& shape, int64_t dim, const std::vector<int64_t>& sizes) {
  std::vector<Shape> out;
  for (int64_t s : sizes) out.push_back(parallel::WithExtent(shape, dim, s));
  return out;
}

absl::StatusOr<Tensor> RunStep(const Tensor& in, const RedistributeStep& step,
                               comm::Communicator& group) {
  const int me = group.rank();
  switch (step.kind) {
    case StepKind::kAllGather:
      return parallel::AllGatherAlongDim(group, in, step.gather_dim, step.gather_sizes);
    case StepKind::kAllReduce: {
      TPX_ASSIGN_OR_RETURN(Tensor out, in.Clone());
      TPX_RETURN_IF_ERROR(group.AllReduce(out, step.from.reduce_op()).Wait());
      return out;
    }
    case StepKind::kReduceScatter: {
      // Any Partial reduction (the shared helper reduces with sum only).
      TPX_ASSIGN_OR_RETURN(Tensor send,
                           parallel::PackPiecesAlongDim(in, step.split_dim, step.split_sizes));
      TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(step.output_shape, in.dtype(), in.device()));
      TPX_ASSIGN_OR_RETURN(Tensor out_flat, out.View({out.numel()}));
      std::vector<int64_t> counts;
      for (const Shape& s : PieceShapes(step.input_shape, step.split_dim, step.split_sizes)) {
        counts.push_back(NumElements(s));
      }
      TPX_RETURN_IF_ERROR(
          group.ReduceScatterV(send, out_flat, counts, step.from.reduce_op()).Wait());
      return out;
    }
    case StepKind::kAllToAll:
      // Piece j along the new shard dim goes to rank j; rank j's piece of the
      // old shard dim comes back, and the pieces are joined along it.
      return parallel::AllToAllAlongDims(
          group, in, step.split_dim, step.split_sizes,
          PieceShapes(step.output_shape, step.gather_dim, step.gather_sizes), step.gather_dim);
    case StepKind::kLocalSlice: {
      TPX_ASSIGN_OR_RETURN(Tensor piece,
                           parallel::PieceAlongDim(in, step.split_dim, step.split_sizes, me));
      if (piece.SharesStorageWith(in)) return piece.Clone();
      return piece;
    }
    case StepKind::kLocalPartial: {
      if (step.scale == 1.0) return in.Clone();
      if (!IsFloatingPoint(in.dtype())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "redistribute ", step.from.ToString(), " -> ", step.to.ToString(), " on mesh dim ",
            step.mesh_dim, ": dividing by the group size needs a floating tensor, got ",
            in.ToString()));
      }
      return ops::Scale(in, step.scale);
    }
  }
  return absl::InternalError("ExecuteRedistributePlan: unknown step kind");
}

}  // namespace

absl::StatusOr<Tensor> ExecuteRedistributePlan(const Tensor& local, const RedistributePlan& plan,
                                               const DeviceMesh& mesh) {
  Tensor current = local;
  for (const RedistributeStep& step : plan.steps) {
    if (step.mesh_dim < 0 || step.mesh_dim >= mesh.ndim()) {
      return absl::InvalidArgumentError(absl::StrCat("redistribute: a step on mesh dim ",
                                                     step.mesh_dim, " on ", mesh.ToString()));
    }
    if (current.shape() != step.input_shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("redistribute ", PlacementsString(plan.from), " -> ",
                       PlacementsString(plan.to), " at coordinate ", ShapeString(mesh.coordinate()),
                       " of ", mesh.ToString(), ": ", StepKindName(step.kind), " on mesh dim ",
                       step.mesh_dim, " expects a local tensor of shape ",
                       ShapeString(step.input_shape), ", got ", current.ToString()));
    }
    comm::Communicator& group = mesh.group(step.mesh_dim);
    auto result = RunStep(current, step, group);
    if (!result.ok()) {
      return absl::Status(result.status().code(),
                          absl::StrCat("redistribute ", PlacementsString(plan.from), " -> ",
                                       PlacementsString(plan.to), ", ", step.ToString(), ": ",
                                       result.status().message()));
    }
    current = *std::move(result);
  }
  return current;
}

}  // namespace tpx::dtensor
