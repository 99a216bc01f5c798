// Loading a sharded checkpoint into a model at any tensor-parallel size:
// each rank reads (pread) only the byte ranges of the shards that overlap
// its own pieces, whatever TP size the checkpoint was written with.
//
//   std::vector<ShardedTensor> state = model.ShardedState();   // at TP = b
//   TPX_ASSIGN_OR_RETURN(CheckpointMetadata meta, LoadShardedState(world, "/ckpt", state));
//   // "/ckpt" may be a root (its "latest" is used) or one checkpoint directory.
//
// All or nothing: the metadata, every needed file header, shapes and dtypes
// are checked and every byte is read into staging memory first; the model is
// written only when every rank has succeeded. Tensors in the checkpoint that
// the model does not ask for are ignored (e.g. optimizer state when loading
// weights only).
// Errors (the same on every rank, naming the file and tensor): a missing
// directory or file, a truncated or corrupt file, a tensor missing, a shape
// or dtype that differs from the model's, an unsupported format version.
#ifndef TPX_SHARDED_STATE_LOAD_H_
#define TPX_SHARDED_STATE_LOAD_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "sharded_state/metadata.h"
#include "sharded_state/sharded_tensor.h"

namespace tpx::sharded_state {

// Collective over `comm` (every rank that loads; typically the world).
absl::StatusOr<CheckpointMetadata> LoadShardedState(comm::Communicator& comm,
                                                    const std::string& path,
                                                    absl::Span<const ShardedTensor> targets);

// The same for one process (tools, tests): no communication.
absl::StatusOr<CheckpointMetadata> LoadShardedStateLocal(const std::string& path,
                                                         absl::Span<const ShardedTensor> targets);

}  // namespace tpx::sharded_state

#endif  // TPX_SHARDED_STATE_LOAD_H_
