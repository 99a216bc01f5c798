#include "parallel/mappings.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "parallel/shard_comm.h"
#include "parallel/tensor_map_function.h"

namespace tpx::parallel {
namespace {

using Map = TensorMapFunction::Map;
using Sizes = std::vector<int64_t>;

Map Identity() {
  return [](const Tensor& t) -> absl::StatusOr<Tensor> { return t; };
}
Map AllReduceMap(comm::Communicator* c) {
  return [c](const Tensor& t) { return AllReduceSum(*c, t); };
}
Map SplitMap(comm::Communicator* c, int64_t dim, Sizes sizes) {
  return [c, dim, sizes](const Tensor& t) { return PieceAlongDim(t, dim, sizes, c->rank()); };
}
Map GatherMap(comm::Communicator* c, int64_t dim, Sizes sizes) {
  return [c, dim, sizes](const Tensor& t) { return AllGatherAlongDim(*c, t, dim, sizes); };
}
Map ReduceScatterMap(comm::Communicator* c, int64_t dim, Sizes sizes) {
  return [c, dim, sizes](const Tensor& t) { return ReduceScatterAlongDim(*c, t, dim, sizes); };
}

absl::Status NeedDims(const Variable& x, const char* op) {
  if (!x.defined() || x.dim() == 0) {
    return absl::InvalidArgumentError(std::string(op) + ": input must have at least one dim");
  }
  return absl::OkStatus();
}

// Full-extent sizes for a split of x along dim.
absl::StatusOr<Sizes> FullSizes(const char* op, comm::Communicator& c, const Variable& x,
                                int64_t dim, SplitSizesArg sizes) {
  TPX_RETURN_IF_ERROR(NeedDims(x, op));
  return ResolveSplitSizes(op, c, x.value().size(dim), sizes, /*local=*/false);
}
absl::StatusOr<Sizes> LocalSizes(const char* op, comm::Communicator& c, const Variable& x,
                                 int64_t dim, SplitSizesArg sizes) {
  TPX_RETURN_IF_ERROR(NeedDims(x, op));
  return ResolveSplitSizes(op, c, x.value().size(dim), sizes, /*local=*/true);
}

}  // namespace

absl::StatusOr<Variable> CopyToTensorParallelRegion(comm::Communicator& tp, const Variable& x) {
  return ApplyTensorMap("CopyToTensorParallelRegion", Identity(), AllReduceMap(&tp), x);
}

absl::StatusOr<Variable> ReduceFromTensorParallelRegion(comm::Communicator& tp,
                                                        const Variable& x) {
  return ApplyTensorMap("ReduceFromTensorParallelRegion", AllReduceMap(&tp), Identity(), x);
}

absl::StatusOr<Variable> ScatterToTensorParallelRegion(comm::Communicator& tp, const Variable& x,
                                                       SplitSizesArg sizes) {
  const char* op = "ScatterToTensorParallelRegion";
  TPX_ASSIGN_OR_RETURN(Sizes s, FullSizes(op, tp, x, -1, sizes));
  return ApplyTensorMap(op, SplitMap(&tp, -1, s), GatherMap(&tp, -1, s), x);
}

absl::StatusOr<Variable> GatherFromTensorParallelRegion(comm::Communicator& tp, const Variable& x,
                                                        SplitSizesArg sizes) {
  const char* op = "GatherFromTensorParallelRegion";
  TPX_ASSIGN_OR_RETURN(Sizes s, LocalSizes(op, tp, x, -1, sizes));
  return ApplyTensorMap(op, GatherMap(&tp, -1, s), SplitMap(&tp, -1, s), x);
}

absl::StatusOr<Variable> ScatterToSequenceParallelRegion(comm::Communicator& tp,
                                                         const Variable& x, SplitSizesArg sizes) {
  const char* op = "ScatterToSequenceParallelRegion";
  TPX_ASSIGN_OR_RETURN(Sizes s, FullSizes(op, tp, x, 0, sizes));
  return ApplyTensorMap(op, SplitMap(&tp, 0, s), GatherMap(&tp, 0, s), x);
}

absl::StatusOr<Variable> GatherFromSequenceParallelRegion(comm::Communicator& tp,
                                                          const Variable& x,
                                                          bool tensor_parallel_output_grad,
                                                          SplitSizesArg sizes) {
  const char* op = "GatherFromSequenceParallelRegion";
  TPX_ASSIGN_OR_RETURN(Sizes s, LocalSizes(op, tp, x, 0, sizes));
  Map backward = tensor_parallel_output_grad ? ReduceScatterMap(&tp, 0, s) : SplitMap(&tp, 0, s);
  return ApplyTensorMap(op, GatherMap(&tp, 0, s), std::move(backward), x);
}

absl::StatusOr<Variable> ReduceScatterToSequenceParallelRegion(comm::Communicator& tp,
                                                               const Variable& x,
                                                               SplitSizesArg sizes) {
  const char* op = "ReduceScatterToSequenceParallelRegion";
  TPX_ASSIGN_OR_RETURN(Sizes s, FullSizes(op, tp, x, 0, sizes));
  return ApplyTensorMap(op, ReduceScatterMap(&tp, 0, s), GatherMap(&tp, 0, s), x);
}

absl::StatusOr<Variable> AllGatherLastDim(comm::Communicator& tp, const Variable& x,
                                          SplitSizesArg sizes) {
  const char* op = "AllGatherLastDim";
  TPX_ASSIGN_OR_RETURN(Sizes s, LocalSizes(op, tp, x, -1, sizes));
  return ApplyTensorMap(op, GatherMap(&tp, -1, s), ReduceScatterMap(&tp, -1, s), x);
}

absl::StatusOr<Variable> ReduceScatterLastDim(comm::Communicator& tp, const Variable& x,
                                              SplitSizesArg sizes) {
  const char* op = "ReduceScatterLastDim";
  TPX_ASSIGN_OR_RETURN(Sizes s, FullSizes(op, tp, x, -1, sizes));
  return ApplyTensorMap(op, ReduceScatterMap(&tp, -1, s), GatherMap(&tp, -1, s), x);
}

namespace {

// Piece-wise all-to-all: split along send_dim by send_sizes, receive pieces
// whose extent along recv_dim is recv_sizes[i] (other dims: `like` with the
// send extent replaced), concatenated along recv_dim.
Map AllToAllMap(comm::Communicator* c, int64_t send_dim, Sizes send_sizes, int64_t recv_dim,
                Sizes recv_sizes) {
  return [=](const Tensor& t) -> absl::StatusOr<Tensor> {
    TPX_ASSIGN_OR_RETURN(int64_t sd, NormalizeDim(send_dim, t.dim(), "AllToAll"));
    TPX_ASSIGN_OR_RETURN(int64_t rd, NormalizeDim(recv_dim, t.dim(), "AllToAll"));
    std::vector<Shape> recv_shapes;
    Shape piece = WithExtent(t.shape(), sd, send_sizes[static_cast<size_t>(c->rank())]);
    for (int64_t r : recv_sizes) recv_shapes.push_back(WithExtent(piece, rd, r));
    return AllToAllAlongDims(*c, t, sd, send_sizes, recv_shapes, rd);
  };
}

}  // namespace

absl::StatusOr<Variable> AllToAll(comm::Communicator& group, const Variable& x,
                                  SplitSizesArg output_split_sizes,
                                  SplitSizesArg input_split_sizes) {
  const char* op = "AllToAll";
  TPX_ASSIGN_OR_RETURN(Sizes in, FullSizes(op, group, x, 0, input_split_sizes));
  Sizes out;
  if (output_split_sizes.empty()) {
    out = in;  // Megatron: equal split on both sides.
  } else {
    if (output_split_sizes.size() != static_cast<size_t>(group.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": ", output_split_sizes.size(), " output split sizes for ", group.size(), " ranks"));
    }
    out.assign(output_split_sizes.begin(), output_split_sizes.end());
  }
  // Along dim 0 the piece we send to rank j has extent in[j] and the piece
  // we receive from rank i has extent out[i]; the send extent replaced in
  // the received shapes is our own piece's, so the map uses dim 0 for both.
  Map forward = [c = &group, in, out](const Tensor& t) -> absl::StatusOr<Tensor> {
    std::vector<Shape> recv_shapes;
    for (int64_t r : out) recv_shapes.push_back(WithExtent(t.shape(), 0, r));
    return AllToAllAlongDims(*c, t, 0, in, recv_shapes, 0);
  };
  Map backward = [c = &group, in, out](const Tensor& g) -> absl::StatusOr<Tensor> {
    std::vector<Shape> recv_shapes;
    for (int64_t r : in) recv_shapes.push_back(WithExtent(g.shape(), 0, r));
    return AllToAllAlongDims(*c, g, 0, out, recv_shapes, 0);
  };
  return ApplyTensorMap(op, std::move(forward), std::move(backward), x);
}

absl::StatusOr<Variable> AllToAllSp2Hp(comm::Communicator& tp, const Variable& x) {
  const char* op = "AllToAllSp2Hp";
  TPX_ASSIGN_OR_RETURN(Sizes hidden, FullSizes(op, tp, x, -1, {}));
  Sizes tokens(hidden.size(), x.value().size(0));
  return ApplyTensorMap(op, AllToAllMap(&tp, -1, hidden, 0, tokens),
                        AllToAllMap(&tp, 0, tokens, -1, hidden), x);
}

absl::StatusOr<Variable> AllToAllHp2Sp(comm::Communicator& tp, const Variable& x) {
  const char* op = "AllToAllHp2Sp";
  TPX_ASSIGN_OR_RETURN(Sizes tokens, FullSizes(op, tp, x, 0, {}));
  Sizes hidden(tokens.size(), x.value().size(-1));
  return ApplyTensorMap(op, AllToAllMap(&tp, 0, tokens, -1, hidden),
                        AllToAllMap(&tp, -1, hidden, 0, tokens), x);
}

}  // namespace tpx::parallel
