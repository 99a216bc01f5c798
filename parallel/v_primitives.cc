#include "parallel/v_primitives.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "parallel/shard_comm.h"
#include "parallel/tensor_map_function.h"

namespace tpx::parallel {
namespace {

using Sizes = std::vector<int64_t>;

absl::StatusOr<Sizes> CheckSizes(const char* op, comm::Communicator& comm, const Variable& x,
                                 absl::Span<const int64_t> sizes, int64_t* dim, bool local) {
  if (!x.defined() || x.dim() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": input must have at least one dim"));
  }
  TPX_ASSIGN_OR_RETURN(*dim, NormalizeDim(*dim, x.dim(), op));
  if (sizes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": sizes must list every rank's extent"));
  }
  if (!local) {
    if (static_cast<int>(sizes.size()) != comm.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": ", sizes.size(), " sizes for ", comm.size(), " ranks"));
    }
    return Sizes(sizes.begin(), sizes.end());
  }
  return ResolveSplitSizes(op, comm, x.value().size(*dim), sizes, /*local=*/true);
}

absl::Status CheckRoot(const char* op, comm::Communicator& comm, int root) {
  if (root < 0 || root >= comm.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": root ", root, " outside the group of ", comm.size()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Variable> AllGatherV(comm::Communicator& comm, const Variable& chunk,
                                    absl::Span<const int64_t> sizes, int64_t dim, bool use_fp32) {
  const char* op = "AllGatherV";
  TPX_ASSIGN_OR_RETURN(Sizes s, CheckSizes(op, comm, chunk, sizes, &dim, /*local=*/true));
  comm::Communicator* c = &comm;
  return ApplyTensorMap(
      op, [c, s, dim](const Tensor& t) { return AllGatherAlongDim(*c, t, dim, s); },
      [c, s, dim, use_fp32](const Tensor& g) {
        return ReduceScatterAlongDim(*c, g, dim, s, use_fp32);
      },
      chunk);
}

absl::StatusOr<Variable> GatherV(comm::Communicator& comm, const Variable& chunk,
                                 absl::Span<const int64_t> sizes, int64_t dim, int dst) {
  const char* op = "GatherV";
  TPX_RETURN_IF_ERROR(CheckRoot(op, comm, dst));
  TPX_ASSIGN_OR_RETURN(Sizes s, CheckSizes(op, comm, chunk, sizes, &dim, /*local=*/true));
  comm::Communicator* c = &comm;
  Shape chunk_shape = chunk.shape();
  return ApplyTensorMap(
      op, [c, s, dim, dst](const Tensor& t) { return GatherAlongDim(*c, t, dim, s, dst); },
      [c, s, dim, dst, chunk_shape](const Tensor& g) -> absl::StatusOr<Tensor> {
        // Non-root ranks hold no gradient of the (empty) output; the root's
        // full gradient is what is scattered.
        Tensor full = g;
        if (c->rank() != dst) {
          int64_t total = 0;
          for (int64_t v : s) total += v;
          TPX_ASSIGN_OR_RETURN(full, Tensor::Empty(WithExtent(chunk_shape, dim, total), g.dtype(),
                                                    g.device()));
        }
        return ScatterAlongDim(*c, full, dim, s, dst);
      },
      chunk);
}

absl::StatusOr<Variable> ScatterV(comm::Communicator& comm, const Variable& full,
                                  absl::Span<const int64_t> sizes, int64_t dim, int src) {
  const char* op = "ScatterV";
  TPX_RETURN_IF_ERROR(CheckRoot(op, comm, src));
  TPX_ASSIGN_OR_RETURN(Sizes s, CheckSizes(op, comm, full, sizes, &dim, /*local=*/false));
  if (comm.rank() == src) {
    int64_t total = 0;
    for (int64_t v : s) total += v;
    if (total != full.value().size(dim)) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": sizes sum to ", total,
                                                     " but the tensor's extent along dim ", dim,
                                                     " is ", full.value().size(dim)));
    }
  }
  comm::Communicator* c = &comm;
  Shape in_shape = full.shape();
  return ApplyTensorMap(
      op, [c, s, dim, src](const Tensor& t) { return ScatterAlongDim(*c, t, dim, s, src); },
      [c, s, dim, src, in_shape](const Tensor& g) -> absl::StatusOr<Tensor> {
        TPX_ASSIGN_OR_RETURN(Tensor gathered, GatherAlongDim(*c, g, dim, s, src));
        if (c->rank() == src) return gathered;
        return Tensor::Zeros(in_shape, g.dtype(), g.device());
      },
      full);
}

absl::StatusOr<Variable> IndexedAllToAllV(comm::Communicator& comm, const Variable& x,
                                          const std::vector<Tensor>& indices,
                                          const std::vector<std::vector<int64_t>>& sizes,
                                          bool use_fp32, int64_t dim) {
  const char* op = "IndexedAllToAllV";
  const int world = comm.size();
  const int me = comm.rank();
  if (!x.defined() || x.dim() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": input must have at least one dim"));
  }
  TPX_ASSIGN_OR_RETURN(dim, NormalizeDim(dim, x.dim(), op));
  if (static_cast<int>(indices.size()) != world || static_cast<int>(sizes.size()) != world) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": need ", world,
                                                   " index lists and a ", world, "x", world,
                                                   " sizes matrix"));
  }
  Sizes send, recv;
  for (int j = 0; j < world; ++j) {
    if (static_cast<int>(sizes[static_cast<size_t>(j)].size()) != world) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": sizes row ", j, " has ",
                                                     sizes[static_cast<size_t>(j)].size(),
                                                     " entries, expected ", world));
    }
    send.push_back(sizes[static_cast<size_t>(me)][static_cast<size_t>(j)]);
    recv.push_back(sizes[static_cast<size_t>(j)][static_cast<size_t>(me)]);
    if (indices[static_cast<size_t>(j)].numel() != send.back()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, " on rank ", me, ": index list for rank ", j, " has ",
          indices[static_cast<size_t>(j)].numel(), " entries but sizes[", me, "][", j, "] is ",
          send.back()));
    }
  }
  TPX_ASSIGN_OR_RETURN(Tensor all_indices, ops::Concat(indices, 0));
  TPX_ASSIGN_OR_RETURN(all_indices, all_indices.To(DType::kI64));
  comm::Communicator* c = &comm;
  Shape x_shape = x.shape();
  DType x_dtype = x.dtype();
  auto exchange = [c, dim](const Tensor& t, const Sizes& out_sizes, const Sizes& in_sizes,
                           const Shape& like) {
    std::vector<Shape> recv_shapes;
    for (int64_t r : in_sizes) recv_shapes.push_back(WithExtent(like, dim, r));
    return AllToAllAlongDims(*c, t, dim, out_sizes, recv_shapes, dim);
  };
  return ApplyTensorMap(
      op,
      [=](const Tensor& t) -> absl::StatusOr<Tensor> {
        TPX_ASSIGN_OR_RETURN(Tensor picked, ops::IndexSelect(t, dim, all_indices));
        return exchange(picked, send, recv, t.shape());
      },
      [=](const Tensor& g) -> absl::StatusOr<Tensor> {
        Tensor grad = g;
        const DType acc = use_fp32 ? DType::kF32 : x_dtype;
        TPX_ASSIGN_OR_RETURN(grad, grad.To(acc));
        TPX_ASSIGN_OR_RETURN(Tensor back, exchange(grad, recv, send, x_shape));
        TPX_ASSIGN_OR_RETURN(Tensor dx, Tensor::Zeros(x_shape, acc, grad.device()));
        TPX_RETURN_IF_ERROR(ops::IndexAdd(dx, dim, all_indices, back));
        return dx.To(x_dtype);
      },
      x);
}

}  // namespace tpx::parallel
