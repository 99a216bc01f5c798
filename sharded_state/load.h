// Loading a sharded checkpoint into a model at any tensor-parallel size:
// each rank reads (pread) only the byte ranges of the shards that overlap
// its own pieces, whatever TP size the checkpoint was written with.
//
//   std::vector<ShardedTensor> state = model.ShardedState();   // at TP = b
//   TPX_ASSIGN_OR_RETURN(CheckpointMetadata meta, LoadShardedState(world, "/ckpt", state));
//   // "/ckpt" may be a root (its "latest" is used) or one checkpoint directory.
//
// Everything is checked before a byte of the model is written, on every rank:
// the metadata and its format version, every needed file's header, each
// tensor's presence, shape and dtype, that the shards cover what the rank
// needs and lie inside their files. Only when all ranks pass do they read.
// Errors (the same on every rank, naming the file and tensor): a missing
// directory or file, a truncated or corrupt file, a tensor missing, a shape
// or dtype that differs from the model's, an unsupported format version;
// after any of them the model is unchanged. Tensors in the checkpoint that
// the model does not ask for are ignored (e.g. optimizer state when loading
// weights only).
#ifndef TPX_SHARDED_STATE_LOAD_H_
#define TPX_SHARDED_STATE_LOAD_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "sharded_state/metadata.h"
#include "sharded_state/sharded_tensor.h"

namespace tpx::sharded_state {

struct LoadOptions {
  // Read everything into host memory first and write the model only after
  // every rank has read every byte, so even an I/O error in the middle of
  // the reads (after all checks passed) leaves the model unchanged. Costs a
  // host copy of the rank's state and load bandwidth (fresh pages, one more
  // copy). Without it bytes go straight into the model's host tensors, and
  // such a late error says the model may be partly loaded.
  bool stage_in_host_memory = false;
};

// Collective over `comm` (every rank that loads; typically the world).
absl::StatusOr<CheckpointMetadata> LoadShardedState(comm::Communicator& comm,
                                                    const std::string& path,
                                                    absl::Span<const ShardedTensor> targets,
                                                    const LoadOptions& options = {});

// The same for one process (tools, tests): no communication.
absl::StatusOr<CheckpointMetadata> LoadShardedStateLocal(const std::string& path,
                                                         absl::Span<const ShardedTensor> targets,
                                                         const LoadOptions& options = {});

}  // namespace tpx::sharded_state

#endif  // TPX_SHARDED_STATE_LOAD_H_
