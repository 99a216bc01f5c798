// Shard communication: the one place where tensors are split into per-rank
// pieces along any dim, packed into a flat buffer, moved with a v-collective
// (all-gather-v, reduce-scatter-v, all-to-all-v, all-reduce) and unpacked /
// concatenated back. Every mapping, the v-primitives and the parallel layers
// go through these functions, so uneven splits (ops::SplitSizes) and
// non-leading dims are handled identically everywhere.
//
//   // Each rank holds x_r [4, h_r]; gather the full [4, sum h_r] on every rank.
//   TPX_ASSIGN_OR_RETURN(std::vector<int64_t> sizes,
//                        ResolveSplitSizes("gather", comm, x.size(-1), {}, /*local=*/true));
//   TPX_ASSIGN_OR_RETURN(Tensor full, AllGatherAlongDim(comm, x, -1, sizes));
//
// Split sizes: an empty `sizes` means "equal pieces" (the dim must divide
// evenly; the error says so); otherwise sizes[r] is rank r's extent along the
// dim (use ops::SplitSizes(n, world) for the library's uneven rule).
// The Start... functions return a PendingTensor: the collective runs in the
// background (the UCX backend progresses it on its own thread) until Wait().
// Devices: the data moves through the communicator's Tensor forms, so every
// function works on each device the backend takes (CUDA tensors with nccl;
// the backend's error otherwise).
#ifndef TPX_PARALLEL_SHARD_COMM_H_
#define TPX_PARALLEL_SHARD_COMM_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "comm/collective.h"
#include "comm/communicator.h"
#include "comm/work.h"
#include "core/tensor.h"

namespace tpx::parallel {

// A collective in flight and the tensor it will produce.
class PendingTensor {
 public:
  PendingTensor() = default;
  PendingTensor(comm::Work work, Tensor result, std::vector<Tensor> keep_alive = {},
                std::function<absl::StatusOr<Tensor>(const Tensor&)> finish = nullptr)
      : work_(std::move(work)), result_(std::move(result)),
        keep_alive_(std::move(keep_alive)), finish_(std::move(finish)) {}
  // Blocks until the collective completes; returns its result.
  absl::StatusOr<Tensor> Wait();
  // True once the collective has finished (does not block).
  bool IsCompleted() { return work_.IsCompleted(); }

 private:
  comm::Work work_;
  Tensor result_;
  std::vector<Tensor> keep_alive_;  // send buffers that must outlive the collective
  std::function<absl::StatusOr<Tensor>(const Tensor&)> finish_;  // unpack after completion
};

// Per-rank extents along a dim. `extent` is the full size (local == false) or
// this rank's piece (local == true, equal pieces assumed when sizes is empty).
// Errors: wrong number of sizes, negative sizes, sizes not summing to the
// full extent, an extent that does not divide evenly, a local size that
// disagrees with sizes[rank]. `op` names the caller in messages.
absl::StatusOr<std::vector<int64_t>> ResolveSplitSizes(const char* op,
                                                       const comm::Communicator& comm,
                                                       int64_t extent,
                                                       absl::Span<const int64_t> sizes,
                                                       bool local);

// Contiguous copy of piece `index` of t along dim (pieces given by sizes).
absl::StatusOr<Tensor> PieceAlongDim(const Tensor& t, int64_t dim,
                                     absl::Span<const int64_t> sizes, int index);

// Flat contiguous buffer holding t's pieces along dim one after another
// (t itself, reshaped, when dim is 0 and t is contiguous).
absl::StatusOr<Tensor> PackPiecesAlongDim(const Tensor& t, int64_t dim,
                                          absl::Span<const int64_t> sizes);
// Inverse of PackPiecesAlongDim: pieces with shapes `piece_shapes`, one after
// another in `flat`, concatenated along dim.
absl::StatusOr<Tensor> UnpackPiecesAlongDim(const Tensor& flat,
                                            const std::vector<Shape>& piece_shapes, int64_t dim);

// Every rank's `local` (extent sizes[r] along dim) concatenated along dim.
PendingTensor StartAllGatherAlongDim(comm::Communicator& comm, const Tensor& local, int64_t dim,
                                     absl::Span<const int64_t> sizes);
absl::StatusOr<Tensor> AllGatherAlongDim(comm::Communicator& comm, const Tensor& local,
                                         int64_t dim, absl::Span<const int64_t> sizes);

// Sum over ranks of piece `rank` of `full` along dim. accumulate_f32: bf16/f16
// inputs are reduced in f32 and rounded once at the end.
PendingTensor StartReduceScatterAlongDim(comm::Communicator& comm, const Tensor& full,
                                         int64_t dim, absl::Span<const int64_t> sizes,
                                         bool accumulate_f32 = false);
absl::StatusOr<Tensor> ReduceScatterAlongDim(comm::Communicator& comm, const Tensor& full,
                                             int64_t dim, absl::Span<const int64_t> sizes,
                                             bool accumulate_f32 = false);

// Sum over ranks of t, into a new tensor (t is not modified), or into t
// itself (which must then be contiguous) with in_place.
PendingTensor StartAllReduce(comm::Communicator& comm, const Tensor& t, bool in_place = false);
absl::StatusOr<Tensor> AllReduceSum(comm::Communicator& comm, const Tensor& t);

// A group of one rank moves no data: the functions above then return their
// input (or a contiguous copy of the piece) without calling the communicator.

// Piece j of `input` along send_dim (send_sizes[j]) goes to rank j; pieces
// received from rank i (shape recv_shapes[i]) are concatenated along recv_dim.
absl::StatusOr<Tensor> AllToAllAlongDims(comm::Communicator& comm, const Tensor& input,
                                         int64_t send_dim, absl::Span<const int64_t> send_sizes,
                                         const std::vector<Shape>& recv_shapes,
                                         int64_t recv_dim);

// On root: every rank's `local` (extent sizes[r] along dim) concatenated along
// dim; elsewhere: a tensor with extent 0 along dim.
absl::StatusOr<Tensor> GatherAlongDim(comm::Communicator& comm, const Tensor& local, int64_t dim,
                                      absl::Span<const int64_t> sizes, int root);
// Piece `rank` (extent sizes[rank] along dim) of root's `full`. Other ranks
// pass any tensor with the right dims besides `dim` (its data is not read).
absl::StatusOr<Tensor> ScatterAlongDim(comm::Communicator& comm, const Tensor& full, int64_t dim,
                                       absl::Span<const int64_t> sizes, int root);

// Shape of t with dim replaced by `extent`.
Shape WithExtent(const Shape& shape, int64_t dim, int64_t extent);

}  // namespace tpx::parallel

#endif  // TPX_PARALLEL_SHARD_COMM_H_
