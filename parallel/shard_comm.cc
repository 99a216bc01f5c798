#include "parallel/shard_comm.h"

#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tpx::parallel {
namespace {

std::vector<int64_t> PieceNumels(const Shape& shape, int64_t dim,
                                 absl::Span<const int64_t> sizes) {
  int64_t inner = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (static_cast<int64_t>(d) != dim) inner *= shape[d];
  }
  std::vector<int64_t> numels;
  numels.reserve(sizes.size());
  for (int64_t s : sizes) numels.push_back(s * inner);
  return numels;
}

std::vector<Shape> PieceShapes(const Shape& shape, int64_t dim, absl::Span<const int64_t> sizes) {
  std::vector<Shape> shapes;
  shapes.reserve(sizes.size());
  for (int64_t s : sizes) shapes.push_back(WithExtent(shape, dim, s));
  return shapes;
}

PendingTensor Failed(absl::Status status) {
  return PendingTensor(comm::Work(std::move(status)), {});
}
}  // namespace

absl::StatusOr<Tensor> PendingTensor::Wait() {
  TPX_RETURN_IF_ERROR(work_.Wait());
  keep_alive_.clear();
  if (finish_) {
    auto finish = std::move(finish_);
    finish_ = nullptr;
    return finish(result_);
  }
  return result_;
}

Shape WithExtent(const Shape& shape, int64_t dim, int64_t extent) {
  Shape out = shape;
  out[static_cast<size_t>(dim)] = extent;
  return out;
}

absl::StatusOr<std::vector<int64_t>> ResolveSplitSizes(const char* op,
                                                       const comm::Communicator& comm,
                                                       int64_t extent,
                                                       absl::Span<const int64_t> sizes,
                                                       bool local) {
  const int world = comm.size();
  const std::string where = absl::StrCat(op, " on rank ", comm.rank(), " of ", comm.name(),
                                         " (size ", world, ")");
  if (sizes.empty()) {
    if (local) return std::vector<int64_t>(static_cast<size_t>(world), extent);
    if (extent % world != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": extent ", extent, " is not divisible by the group size ", world,
          "; pass per-rank split sizes (e.g. ops::SplitSizes) for an uneven split"));
    }
    return std::vector<int64_t>(static_cast<size_t>(world), extent / world);
  }
  if (static_cast<int>(sizes.size()) != world) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", sizes.size(),
                                                   " split sizes given for ", world, " ranks"));
  }
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": negative split size in [", absl::StrJoin(sizes, ", "), "]"));
    }
    total += s;
  }
  if (local && sizes[static_cast<size_t>(comm.rank())] != extent) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": local extent ", extent, " differs from split size ",
        sizes[static_cast<size_t>(comm.rank())], " for this rank in [",
        absl::StrJoin(sizes, ", "), "]"));
  }
  if (!local && total != extent) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": split sizes [",
                                                   absl::StrJoin(sizes, ", "), "] sum to ", total,
                                                   ", not the extent ", extent));
  }
  return std::vector<int64_t>(sizes.begin(), sizes.end());
}

absl::StatusOr<Tensor> PieceAlongDim(const Tensor& t, int64_t dim,
                                     absl::Span<const int64_t> sizes, int index) {
  TPX_ASSIGN_OR_RETURN(dim, NormalizeDim(dim, t.dim(), "PieceAlongDim"));
  int64_t start = 0;
  for (int i = 0; i < index; ++i) start += sizes[static_cast<size_t>(i)];
  TPX_ASSIGN_OR_RETURN(Tensor piece, t.Narrow(dim, start, sizes[static_cast<size_t>(index)]));
  return piece.Clone();
}

absl::StatusOr<Tensor> PackPiecesAlongDim(const Tensor& t, int64_t dim,
                                          absl::Span<const int64_t> sizes) {
  TPX_ASSIGN_OR_RETURN(dim, NormalizeDim(dim, t.dim(), "PackPiecesAlongDim"));
  if (dim == 0 && t.is_contiguous()) return t.View({t.numel()});
  TPX_ASSIGN_OR_RETURN(Tensor flat, Tensor::Empty({t.numel()}, t.dtype(), t.device()));
  int64_t start = 0, offset = 0;
  for (int64_t s : sizes) {
    TPX_ASSIGN_OR_RETURN(Tensor piece, t.Narrow(dim, start, s));
    TPX_ASSIGN_OR_RETURN(Tensor dst, flat.Narrow(0, offset, piece.numel()));
    TPX_ASSIGN_OR_RETURN(Tensor dst_view, dst.View(piece.shape()));
    TPX_RETURN_IF_ERROR(dst_view.CopyFrom(piece));
    start += s;
    offset += piece.numel();
  }
  return flat;
}

absl::StatusOr<Tensor> UnpackPiecesAlongDim(const Tensor& flat,
                                            const std::vector<Shape>& piece_shapes, int64_t dim) {
  if (piece_shapes.empty()) return absl::InvalidArgumentError("UnpackPiecesAlongDim: no pieces");
  TPX_ASSIGN_OR_RETURN(dim, NormalizeDim(dim, static_cast<int64_t>(piece_shapes[0].size()),
                                         "UnpackPiecesAlongDim"));
  if (dim == 0) {
    Shape full = piece_shapes[0];
    full[0] = 0;
    for (const Shape& s : piece_shapes) full[0] += s[0];
    return flat.View(full);
  }
  std::vector<Tensor> pieces;
  int64_t offset = 0;
  for (const Shape& s : piece_shapes) {
    TPX_ASSIGN_OR_RETURN(Tensor piece, flat.Narrow(0, offset, NumElements(s)));
    TPX_ASSIGN_OR_RETURN(piece, piece.View(s));
    pieces.push_back(std::move(piece));
    offset += NumElements(s);
  }
  return ops::Concat(pieces, dim);
}

PendingTensor StartAllGatherAlongDim(comm::Communicator& comm, const Tensor& local, int64_t dim,
                                     absl::Span<const int64_t> sizes) {
  auto d = NormalizeDim(dim, local.dim(), "AllGatherAlongDim");
  if (!d.ok()) return Failed(d.status());
  auto send = local.Contiguous();
  if (!send.ok()) return Failed(send.status());
  if (comm.size() == 1) return PendingTensor(comm::Work(), *send);
  std::vector<Shape> shapes = PieceShapes(local.shape(), *d, sizes);
  std::vector<int64_t> counts = PieceNumels(local.shape(), *d, sizes);
  int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  auto flat = Tensor::Empty({total}, local.dtype(), local.device());
  if (!flat.ok()) return Failed(flat.status());
  auto send_flat = send->View({send->numel()});
  if (!send_flat.ok()) return Failed(send_flat.status());
  comm::Work work = comm.AllGatherV(*send_flat, *flat, counts);
  int64_t out_dim = *d;
  return PendingTensor(std::move(work), *flat, {*send},
                       [shapes, out_dim](const Tensor& f) {
                         return UnpackPiecesAlongDim(f, shapes, out_dim);
                       });
}

absl::StatusOr<Tensor> AllGatherAlongDim(comm::Communicator& comm, const Tensor& local,
                                         int64_t dim, absl::Span<const int64_t> sizes) {
  return StartAllGatherAlongDim(comm, local, dim, sizes).Wait();
}

PendingTensor StartReduceScatterAlongDim(comm::Communicator& comm, const Tensor& full,
                                         int64_t dim, absl::Span<const int64_t> sizes,
                                         bool accumulate_f32) {
  auto d = NormalizeDim(dim, full.dim(), "ReduceScatterAlongDim");
  if (!d.ok()) return Failed(d.status());
  const DType out_dtype = full.dtype();
  if (comm.size() == 1) {
    auto c = full.Contiguous();
    if (!c.ok()) return Failed(c.status());
    return PendingTensor(comm::Work(), *c);
  }
  Tensor src = full;
  if (accumulate_f32 && out_dtype != DType::kF32) {
    auto f = full.To(DType::kF32);
    if (!f.ok()) return Failed(f.status());
    src = *f;
  }
  auto packed = PackPiecesAlongDim(src, *d, sizes);
  if (!packed.ok()) return Failed(packed.status());
  std::vector<int64_t> counts = PieceNumels(full.shape(), *d, sizes);
  Shape out_shape = WithExtent(full.shape(), *d, sizes[static_cast<size_t>(comm.rank())]);
  auto out = Tensor::Empty(out_shape, src.dtype(), src.device());
  if (!out.ok()) return Failed(out.status());
  auto out_flat = out->View({out->numel()});
  if (!out_flat.ok()) return Failed(out_flat.status());
  comm::Work work = comm.ReduceScatterV(*packed, *out_flat, counts, comm::ReduceOp::kSum);
  std::function<absl::StatusOr<Tensor>(const Tensor&)> finish;
  if (src.dtype() != out_dtype) {
    finish = [out_dtype](const Tensor& t) { return t.To(out_dtype); };
  }
  return PendingTensor(std::move(work), *out, {*packed}, std::move(finish));
}

absl::StatusOr<Tensor> ReduceScatterAlongDim(comm::Communicator& comm, const Tensor& full,
                                             int64_t dim, absl::Span<const int64_t> sizes,
                                             bool accumulate_f32) {
  return StartReduceScatterAlongDim(comm, full, dim, sizes, accumulate_f32).Wait();
}

PendingTensor StartAllReduce(comm::Communicator& comm, const Tensor& t, bool in_place) {
  if (comm.size() == 1) return PendingTensor(comm::Work(), t);
  if (in_place && !t.is_contiguous()) {
    return Failed(absl::InvalidArgumentError("AllReduce in place needs a contiguous tensor"));
  }
  auto copy = in_place ? absl::StatusOr<Tensor>(t) : t.Clone();
  if (!copy.ok()) return Failed(copy.status());
  comm::Work work = comm.AllReduce(*copy, comm::ReduceOp::kSum);
  return PendingTensor(std::move(work), *copy);
}

absl::StatusOr<Tensor> AllReduceSum(comm::Communicator& comm, const Tensor& t) {
  return StartAllReduce(comm, t).Wait();
}

absl::StatusOr<Tensor> AllToAllAlongDims(comm::Communicator& comm, const Tensor& input,
                                         int64_t send_dim, absl::Span<const int64_t> send_sizes,
                                         const std::vector<Shape>& recv_shapes,
                                         int64_t recv_dim) {
  TPX_ASSIGN_OR_RETURN(send_dim, NormalizeDim(send_dim, input.dim(), "AllToAll"));
  TPX_ASSIGN_OR_RETURN(Tensor packed, PackPiecesAlongDim(input, send_dim, send_sizes));
  std::vector<int64_t> send_counts = PieceNumels(input.shape(), send_dim, send_sizes);
  std::vector<int64_t> recv_counts;
  for (const Shape& s : recv_shapes) recv_counts.push_back(NumElements(s));
  int64_t total = std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0});
  TPX_ASSIGN_OR_RETURN(Tensor flat, Tensor::Empty({total}, input.dtype(), input.device()));
  TPX_RETURN_IF_ERROR(comm.AllToAllV(packed, flat, send_counts, recv_counts).Wait());
  return UnpackPiecesAlongDim(flat, recv_shapes, recv_dim);
}

absl::StatusOr<Tensor> GatherAlongDim(comm::Communicator& comm, const Tensor& local, int64_t dim,
                                      absl::Span<const int64_t> sizes, int root) {
  TPX_ASSIGN_OR_RETURN(dim, NormalizeDim(dim, local.dim(), "GatherAlongDim"));
  TPX_ASSIGN_OR_RETURN(Tensor send, local.Contiguous());
  TPX_ASSIGN_OR_RETURN(send, send.View({send.numel()}));
  const bool is_root = comm.rank() == root;
  std::vector<int64_t> counts = PieceNumels(local.shape(), dim, sizes);
  int64_t total = is_root ? std::accumulate(counts.begin(), counts.end(), int64_t{0}) : 0;
  TPX_ASSIGN_OR_RETURN(Tensor flat, Tensor::Empty({total}, local.dtype(), local.device()));
  TPX_RETURN_IF_ERROR(comm.GatherV(send, flat, counts, root).Wait());
  if (!is_root) {
    return Tensor::Empty(WithExtent(local.shape(), dim, 0), local.dtype(), local.device());
  }
  return UnpackPiecesAlongDim(flat, PieceShapes(local.shape(), dim, sizes), dim);
}

absl::StatusOr<Tensor> ScatterAlongDim(comm::Communicator& comm, const Tensor& full, int64_t dim,
                                       absl::Span<const int64_t> sizes, int root) {
  TPX_ASSIGN_OR_RETURN(dim, NormalizeDim(dim, full.dim(), "ScatterAlongDim"));
  const bool is_root = comm.rank() == root;
  Tensor packed;
  if (is_root) {
    TPX_ASSIGN_OR_RETURN(packed, PackPiecesAlongDim(full, dim, sizes));
  }
  std::vector<int64_t> counts = PieceNumels(full.shape(), dim, sizes);
  TPX_ASSIGN_OR_RETURN(
      Tensor out,
      Tensor::Empty(WithExtent(full.shape(), dim, sizes[static_cast<size_t>(comm.rank())]),
                    full.dtype(), full.device()));
  TPX_ASSIGN_OR_RETURN(Tensor out_flat, out.View({out.numel()}));
  TPX_RETURN_IF_ERROR(comm.ScatterV(packed, out_flat, counts, root).Wait());
  return out;
}

}  // namespace tpx::parallel
