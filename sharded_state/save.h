// Saving a model's sharded state (parameters, optimizer moments, ...) as a
// checkpoint directory of safetensors files (sharded_state/metadata.h).
//
//   std::vector<ShardedTensor> state = model.ShardedState();
//   TPX_ASSIGN_OR_RETURN(std::string dir, SaveShardedState(*parallel_state, "/ckpt", state,
//                                                          {.step = 100}));
//   // dir == "/ckpt/step-00000100"; "/ckpt/latest" names it.
//
// Every rank of data-parallel replica 0 writes its own shards into its own
// file, in parallel (no rank gathers the model); replicated tensors are
// written once, by TP rank 0. The save is atomic: files go to
// "<root>/<tag>.tmp", are fsynced, rank 0 writes the metadata last, renames
// the directory to "<root>/<tag>" and then replaces "<root>/latest" by
// rename. A process killed at any moment leaves the previous checkpoint (and
// "latest") intact; a half-written "<tag>.tmp" is removed by the next save.
// A tag that already exists is never overwritten: ".1", ".2", ... is
// appended. Every rank returns the same status.
//
// Collective over the world of `parallel`. Shards must follow the layout of
// StridedPieces (as every tpx layer does); every rank must pass the same
// tensor names, shapes and layouts (checked).
#ifndef TPX_SHARDED_STATE_SAVE_H_
#define TPX_SHARDED_STATE_SAVE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "parallel/parallel_state.h"
#include "sharded_state/sharded_tensor.h"

namespace tpx::sharded_state {

struct SaveOptions {
  int64_t step = 0;
  // Directory name under the root; default "step-%08d" of `step`.
  std::string tag;
  // Stored in the metadata (the same on every rank: rank 0's are written).
  std::map<std::string, std::string> user_metadata;
  // Fault injection for tests: called on this rank at each stage ("begin",
  // "file-start", "tensor-written", "file-written", "metadata-written",
  // "renamed", "committed"); a test may kill the process there. The file
  // stages run on the writer thread of an asynchronous save.
  std::function<void(absl::string_view point)> on_point;
};

// Returns the committed checkpoint directory. Errors (the same on every
// rank, naming the rank, file and tensor): inconsistent state across ranks,
// I/O errors, communication failures.
absl::StatusOr<std::string> SaveShardedState(const parallel::ParallelState& parallel,
                                             const std::string& root,
                                             absl::Span<const ShardedTensor> state,
                                             const SaveOptions& options = {});

// A save whose files are being written on a background thread.
class PendingSave {
 public:
  struct Job;
  explicit PendingSave(std::unique_ptr<Job> job);
  PendingSave(PendingSave&&) noexcept;
  PendingSave& operator=(PendingSave&&) noexcept;
  // Without Wait the save is abandoned: the writer is joined, nothing is
  // committed (the next save removes the temp dir).
  ~PendingSave();

  // Collective, like SaveShardedState: waits for this rank's file, then
  // agrees with every rank and commits. Returns what SaveShardedState would.
  // Error (FailedPrecondition) when called twice.
  absl::StatusOr<std::string> Wait();

 private:
  void Abandon();
  std::unique_ptr<Job> job_;
};

// Asynchronous save: the checks, the tag and a copy of this rank's tensors
// in host memory are made now (collective); the file is written on a
// background thread, so training may go on and change the model. Call Wait()
// (on every rank) before the next save; the communicator is used only on the
// calling thread. Costs host memory for one copy of the rank's shards.
//
//   TPX_ASSIGN_OR_RETURN(PendingSave pending,
//                        StartShardedSave(*parallel, "/ckpt", state, {.step = 100}));
//   ... train ...
//   TPX_ASSIGN_OR_RETURN(std::string dir, pending.Wait());
absl::StatusOr<PendingSave> StartShardedSave(const parallel::ParallelState& parallel,
                                             const std::string& root,
                                             absl::Span<const ShardedTensor> state,
                                             const SaveOptions& options = {});

}  // namespace tpx::sharded_state

#endif  // TPX_SHARDED_STATE_SAVE_H_
