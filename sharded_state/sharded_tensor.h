// ShardedTensor: how one rank's tensor is a piece of a global tensor, so a
// model saved at one tensor-parallel size can be loaded at another.
//
// A parameter split along `split_dim` over `tp_size` ranks with `stride` s is
// cut into tp_size * s equal pieces along that dim; rank r holds pieces
// r, r + tp_size, ..., concatenated (layers/init.h). The fused QKV weight of
// the GPT example uses s = 3, so each rank holds the q, k and v rows of its
// own heads, and the global tensor keeps the [q | k | v] order of TP = 1.
// A replicated tensor (split_dim = -1) is the same on every TP rank; only the
// rank with replica_id 0 writes it.
//
//   TPX_ASSIGN_OR_RETURN(ShardedTensor w, ShardedTensor::Split(
//       "block0.qkv.weight", layer.weight().value(), /*split_dim=*/0, tp.rank(), tp.size(),
//       /*stride=*/3));
//   TPX_RETURN_IF_ERROR(AssignFromFull(w, full_qkv));  // the layer takes its slice
//
// The `local` tensor shares storage with the parameter: assigning to it
// changes the model in place.
#ifndef TPX_SHARDED_STATE_SHARDED_TENSOR_H_
#define TPX_SHARDED_STATE_SHARDED_TENSOR_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/tensor.h"

namespace tpx::sharded_state {

// A run of `length` indices along the split dim: global [global_offset, +length)
// sits at local [local_offset, +length).
struct ShardPiece {
  int64_t global_offset = 0;
  int64_t local_offset = 0;
  int64_t length = 0;
  friend bool operator==(const ShardPiece&, const ShardPiece&) = default;
};

// The pieces rank `rank` of `world` holds of a dim of size `extent` cut with
// `stride` (see the banner). Errors: extent not divisible by world * stride,
// rank outside [0, world), stride < 1.
absl::StatusOr<std::vector<ShardPiece>> StridedPieces(int64_t extent, int world, int rank,
                                                      int64_t stride);

struct ShardedTensor {
  std::string name;     // global name, e.g. "block0.qkv.weight"
  Shape global_shape;
  DType dtype = DType::kF32;
  int64_t split_dim = -1;  // -1: replicated
  int64_t stride = 1;
  int tp_rank = 0;
  int tp_size = 1;
  // Replicated tensors: only replica 0 writes (set to the TP rank).
  int replica_id = 0;
  std::vector<ShardPiece> pieces;  // along split_dim; empty when replicated
  Tensor local;                    // this rank's data (contiguous, on the host)

  bool replicated() const { return split_dim < 0; }
  // The shape `local` must have.
  Shape LocalShape() const;

  // Describes `local` as rank tp_rank's shard of a tensor split along
  // split_dim. Errors: local not a contiguous host tensor, split_dim out of
  // range, a size the split does not divide.
  static absl::StatusOr<ShardedTensor> Split(std::string name, const Tensor& local,
                                             int64_t split_dim, int tp_rank, int tp_size,
                                             int64_t stride = 1);
  // Describes `local` as a full copy held by every TP rank.
  static absl::StatusOr<ShardedTensor> Replicated(std::string name, const Tensor& local,
                                                  int tp_rank);
  // The same layout over another tensor of the local shape (e.g. an
  // optimizer moment of this parameter, or the f32 master of a bf16 one),
  // under another name; the dtype is other's.
  absl::StatusOr<ShardedTensor> WithTensor(std::string new_name, const Tensor& other) const;
};

// This rank's shard cut out of the full tensor (a new contiguous tensor).
// Error naming the tensor: full's shape or dtype differs from the global one.
absl::StatusOr<Tensor> ExtractShard(const ShardedTensor& spec, const Tensor& full);

// Copies the slice of `full` that this rank holds into spec.local.
// Errors as ExtractShard; nothing is written on error.
absl::Status AssignFromFull(const ShardedTensor& spec, const Tensor& full);
// Copies `shard` (this rank's local tensor) into spec.local.
// Error naming the tensor: shape or dtype differs from the local one.
absl::Status AssignFromShard(const ShardedTensor& spec, const Tensor& shard);

// Assigns each tensor of `state` its slice of full[name] (keys are global
// names); tensors without an entry, or with an undefined one, are left as
// they are. All are checked before any is written. Error naming the tensor:
// a shape or dtype that differs from the global one.
absl::Status AssignAllFromFull(absl::Span<const ShardedTensor> state,
                               const std::map<std::string, Tensor>& full);

// Error naming the first duplicated global name.
absl::Status CheckUniqueNames(absl::Span<const ShardedTensor> state);

}  // namespace tpx::sharded_state

#endif  // TPX_SHARDED_STATE_SHARDED_TENSOR_H_
