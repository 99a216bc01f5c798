#include "sharded_state/sharded_tensor.h"

#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tpx::sharded_state {

absl::StatusOr<std::vector<ShardPiece>> StridedPieces(int64_t extent, int world, int rank,
                                                      int64_t stride) {
  if (world < 1 || rank < 0 || rank >= world || stride < 1) {
    return absl::InvalidArgumentError(absl::StrCat("StridedPieces: rank ", rank, " of world ",
                                                   world, " with stride ", stride));
  }
  if (extent % (static_cast<int64_t>(world) * stride) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("StridedPieces: extent ", extent,
                                                   " is not divisible by tensor-parallel size ",
                                                   world, " x stride ", stride));
  }
  const int64_t piece = extent / (world * stride);
  std::vector<ShardPiece> pieces;
  for (int64_t k = 0; k < stride; ++k) {
    pieces.push_back({(k * world + rank) * piece, k * piece, piece});
  }
  return pieces;
}

Shape ShardedTensor::LocalShape() const {
  Shape shape = global_shape;
  if (replicated()) return shape;
  int64_t n = 0;
  for (const ShardPiece& p : pieces) n += p.length;
  shape[static_cast<size_t>(split_dim)] = n;
  return shape;
}

absl::StatusOr<ShardedTensor> ShardedTensor::Split(std::string name, const Tensor& local,
                                                   int64_t split_dim, int tp_rank, int tp_size,
                                                   int64_t stride) {
  if (!local.defined() || !local.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShardedTensor '", name, "': needs a defined contiguous tensor"));
  }
  TPX_ASSIGN_OR_RETURN(split_dim, NormalizeDim(split_dim, local.dim(), "ShardedTensor::Split"));
  ShardedTensor t;
  t.global_shape = local.shape();
  t.global_shape[static_cast<size_t>(split_dim)] *= tp_size;
  auto pieces = StridedPieces(t.global_shape[static_cast<size_t>(split_dim)], tp_size, tp_rank,
                              stride);
  if (!pieces.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("ShardedTensor '", name, "': ",
                                                   pieces.status().message()));
  }
  t.name = std::move(name);
  t.dtype = local.dtype();
  t.split_dim = split_dim;
  t.stride = stride;
  t.tp_rank = tp_rank;
  t.tp_size = tp_size;
  t.pieces = *std::move(pieces);
  t.local = local;
  return t;
}

absl::StatusOr<ShardedTensor> ShardedTensor::Replicated(std::string name, const Tensor& local,
                                                        int tp_rank) {
  if (!local.defined() || !local.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShardedTensor '", name, "': needs a defined contiguous tensor"));
  }
  ShardedTensor t;
  t.name = std::move(name);
  t.global_shape = local.shape();
  t.dtype = local.dtype();
  t.tp_rank = tp_rank;
  t.replica_id = tp_rank;
  t.local = local;
  return t;
}

absl::StatusOr<ShardedTensor> ShardedTensor::WithTensor(std::string new_name,
                                                        const Tensor& other) const {
  if (!other.defined() || !other.is_contiguous() || other.shape() != LocalShape()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ShardedTensor '", new_name, "': needs a contiguous tensor of ",
        ShapeString(LocalShape()), " like '", name, "', got ",
        other.defined() ? other.ToString() : "an undefined tensor"));
  }
  ShardedTensor t = *this;
  t.name = std::move(new_name);
  t.dtype = other.dtype();
  t.local = other;
  return t;
}

absl::StatusOr<Tensor> ExtractShard(const ShardedTensor& spec, const Tensor& full) {
  if (!full.defined() || full.shape() != spec.global_shape || full.dtype() != spec.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", spec.name, "': expected a full ", std::string(DTypeName(spec.dtype)),
        " tensor of ", ShapeString(spec.global_shape), ", got ",
        full.defined() ? full.ToString() : "an undefined tensor"));
  }
  if (spec.replicated()) return full.Contiguous();
  std::vector<Tensor> parts;
  for (const ShardPiece& p : spec.pieces) {
    TPX_ASSIGN_OR_RETURN(Tensor part, full.Narrow(spec.split_dim, p.global_offset, p.length));
    parts.push_back(std::move(part));
  }
  return ops::Concat(parts, spec.split_dim);
}

absl::Status AssignFromFull(const ShardedTensor& spec, const Tensor& full) {
  TPX_ASSIGN_OR_RETURN(Tensor shard, ExtractShard(spec, full));
  return AssignFromShard(spec, shard);
}

absl::Status AssignFromShard(const ShardedTensor& spec, const Tensor& shard) {
  if (!shard.defined() || shard.shape() != spec.LocalShape() || shard.dtype() != spec.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", spec.name, "': expected a ", std::string(DTypeName(spec.dtype)), " shard of ",
        ShapeString(spec.LocalShape()), ", got ",
        shard.defined() ? shard.ToString() : "an undefined tensor"));
  }
  if (spec.local.device().is_cpu() && shard.device().is_cpu() && shard.is_contiguous() &&
      spec.local.is_contiguous()) {
    std::memcpy(spec.local.raw_data(), shard.raw_data(), shard.nbytes());  // the common case
    return absl::OkStatus();
  }
  return spec.local.CopyFrom(shard);
}

absl::Status AssignAllFromFull(absl::Span<const ShardedTensor> state,
                               const std::map<std::string, Tensor>& full) {
  std::vector<std::pair<const ShardedTensor*, Tensor>> shards;
  for (const ShardedTensor& t : state) {
    auto it = full.find(t.name);
    if (it == full.end() || !it->second.defined()) continue;
    TPX_ASSIGN_OR_RETURN(Tensor shard, ExtractShard(t, it->second));
    shards.emplace_back(&t, std::move(shard));
  }
  for (const auto& [t, shard] : shards) TPX_RETURN_IF_ERROR(AssignFromShard(*t, shard));
  return absl::OkStatus();
}

absl::Status CheckUniqueNames(absl::Span<const ShardedTensor> state) {
  std::set<std::string> seen;
  for (const ShardedTensor& t : state) {
    if (!seen.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("tensor name '", t.name,
                                                     "' appears twice in the sharded state"));
    }
  }
  return absl::OkStatus();
}

}  // namespace tpx::sharded_state
