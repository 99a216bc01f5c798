// Consolidates a sharded tpx checkpoint into one ordinary safetensors file
// with full, unsharded tensors (the global names and shapes a TP=1 model
// uses), for tools that know nothing of tpx.
//
//   bazel run //tools:consolidate_checkpoint -- --checkpoint=/ckpt --output=/tmp/model.safetensors
//
// --checkpoint is a save root (its "latest" is used) or one checkpoint
// directory. Tensors whose name starts with --exclude_prefix (default the
// GPT trainer's "optimizer.") are left out; pass an empty prefix to keep
// everything. The checkpoint's step and user metadata go into the file's
// __metadata__ (as "tpx_step" and "tpx.<key>"). The whole model is held in
// memory once.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "sharded_state/load.h"
#include "sharded_state/metadata.h"
#include "sharded_state/safetensors.h"
#include "sharded_state/sharded_tensor.h"

ABSL_FLAG(std::string, checkpoint, "", "Checkpoint root or directory to read.");
ABSL_FLAG(std::string, output, "", "safetensors file to write.");
ABSL_FLAG(std::string, exclude_prefix, "optimizer.",
          "Leave out tensors whose name starts with this (empty: keep all).");

namespace tpx::sharded_state {
namespace {

std::string UserPath(const std::string& path) {
  const char* wd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || wd == nullptr) return path;
  return absl::StrCat(wd, "/", path);
}

absl::Status Consolidate() {
  const std::string source = UserPath(absl::GetFlag(FLAGS_checkpoint));
  const std::string output = UserPath(absl::GetFlag(FLAGS_output));
  if (source.empty() || output.empty()) {
    return absl::InvalidArgumentError("--checkpoint and --output are required");
  }
  TPX_ASSIGN_OR_RETURN(std::string dir, ResolveCheckpointDir(source));
  TPX_ASSIGN_OR_RETURN(CheckpointMetadata meta, ReadMetadata(dir));
  const std::string exclude = absl::GetFlag(FLAGS_exclude_prefix);
  std::vector<ShardedTensor> full;
  for (const auto& [name, layout] : meta.tensors) {
    if (!exclude.empty() && absl::StartsWith(name, exclude)) continue;
    TPX_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(layout.global_shape, layout.dtype));
    TPX_ASSIGN_OR_RETURN(ShardedTensor s, ShardedTensor::Replicated(name, t, 0));
    full.push_back(std::move(s));
  }
  TPX_RETURN_IF_ERROR(LoadShardedStateLocal(dir, full).status());
  std::vector<SafetensorsTensorView> views;
  uint64_t bytes = 0;
  for (const ShardedTensor& t : full) {
    views.push_back({t.name, t.dtype, t.global_shape, t.local.raw_data()});
    bytes += t.local.nbytes();
  }
  std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                 {"tpx_step", absl::StrCat(meta.step)}};
  for (const auto& [key, value] : meta.user) metadata["tpx." + key] = value;
  TPX_RETURN_IF_ERROR(WriteSafetensors(output, views, metadata));
  std::printf("%s: %zu tensors, %llu bytes (step %lld, saved at TP %d) -> %s\n", dir.c_str(),
              views.size(), static_cast<unsigned long long>(bytes),
              static_cast<long long>(meta.step), meta.tp_size, output.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace tpx::sharded_state

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::Status s = tpx::sharded_state::Consolidate();
  if (!s.ok()) {
    std::fprintf(stderr, "consolidate_checkpoint: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
