// The metadata of a sharded checkpoint directory: which safetensors file
// holds which shard of every global tensor, the parallel sizes it was written
// with, the training step and free-form user entries.
//
//   <root>/latest                      -> "step-00000100" (the last committed save)
//   <root>/step-00000100/tpx_checkpoint.json
//   <root>/step-00000100/tp00-of-02.safetensors, tp01-of-02.safetensors
//
//   TPX_ASSIGN_OR_RETURN(std::string dir, ResolveCheckpointDir(root));
//   TPX_ASSIGN_OR_RETURN(CheckpointMetadata meta, ReadMetadata(dir));
//
// tpx_checkpoint.json:
//   {"format": "tpx-sharded-state", "format_version": 1, "tp_size": 2, "dp_size": 1,
//    "step": 100, "user": {"key": "value"},
//    "tensors": {"block0.qkv.weight": {"dtype": "F32", "shape": [384, 128],
//        "split_dim": 0, "stride": 3, "shards": [
//          {"file": "tp00-of-02.safetensors", "pieces": [[0, 0, 64], [128, 64, 64], ...]},
//          ...]}}}
// A shard's pieces are [global_offset, local_offset, length] along split_dim
// (sharded_state/sharded_tensor.h); within its file the shard is stored under
// the tensor's global name with its local shape. Replicated tensors have
// split_dim -1 and one shard without pieces.
#ifndef TPX_SHARDED_STATE_METADATA_H_
#define TPX_SHARDED_STATE_METADATA_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"
#include "sharded_state/sharded_tensor.h"

namespace tpx::sharded_state {

// Bumped when a reader of the old version could misread the new layout.
inline constexpr int kFormatVersion = 1;
inline constexpr char kMetadataFileName[] = "tpx_checkpoint.json";
inline constexpr char kLatestFileName[] = "latest";

struct StoredShard {
  std::string file;  // relative to the checkpoint directory
  std::vector<ShardPiece> pieces;  // empty: the whole tensor
};

struct TensorLayout {
  DType dtype = DType::kF32;
  Shape global_shape;
  int64_t split_dim = -1;
  int64_t stride = 1;
  std::vector<StoredShard> shards;

  // The shape a shard is stored with in its file.
  Shape StoredShape(const StoredShard& shard) const;
};

struct CheckpointMetadata {
  int format_version = kFormatVersion;
  int tp_size = 1;
  int dp_size = 1;
  int64_t step = 0;
  std::map<std::string, std::string> user;
  std::map<std::string, TensorLayout> tensors;
};

std::string MetadataToJson(const CheckpointMetadata& metadata);
// Errors (DataLoss / FailedPrecondition for another format_version) name `source`.
absl::StatusOr<CheckpointMetadata> MetadataFromJson(absl::string_view text,
                                                    const std::string& source);
// Reads <dir>/tpx_checkpoint.json. NotFound naming the directory or file.
absl::StatusOr<CheckpointMetadata> ReadMetadata(const std::string& dir);

// `path` itself when it holds tpx_checkpoint.json, else the directory its
// `latest` file names. NotFound saying which was looked for.
absl::StatusOr<std::string> ResolveCheckpointDir(const std::string& path);

}  // namespace tpx::sharded_state

#endif  // TPX_SHARDED_STATE_METADATA_H_
