#include "sharded_state/save.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"
#include "core/status_macros.h"
#include "sharded_state/collective_status.h"
#include "sharded_state/metadata.h"
#include "sharded_state/safetensors.h"

namespace tpx::sharded_state {
namespace {

namespace fs = std::filesystem;

std::string ShardFileName(int tp_rank, int tp_size) {
  return absl::StrFormat("tp%02d-of-%02d.safetensors", tp_rank, tp_size);
}

absl::Status FsyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  const bool ok = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) return absl::InternalError(absl::StrCat("cannot fsync ", path, ": ", std::strerror(err)));
  return absl::OkStatus();
}

// Writes `text` to `path` durably and atomically (temp file, fsync, rename).
absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", tmp, ": ", std::strerror(errno)));
  absl::Status s = WriteAll(fd, text.data(), text.size(), tmp);
  if (s.ok() && ::fsync(fd) != 0) s = absl::InternalError(absl::StrCat("cannot fsync ", tmp));
  ::close(fd);
  TPX_RETURN_IF_ERROR(s);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path, ": ",
                                            std::strerror(errno)));
  }
  return absl::OkStatus();
}

// What every rank must agree on: names, shapes, dtypes and layouts.
int64_t Signature(absl::Span<const ShardedTensor> state) {
  std::string s;
  for (const ShardedTensor& t : state) {
    absl::StrAppend(&s, t.name, ":", ShapeString(t.global_shape), ":", std::string(DTypeName(t.dtype)));
    absl::StrAppend(&s, ":", t.split_dim, ":", t.stride, ";");
  }
  return static_cast<int64_t>(std::hash<std::string>()(s));
}

absl::Status CheckLayouts(absl::Span<const ShardedTensor> state, int tp_rank, int tp_size) {
  TPX_RETURN_IF_ERROR(CheckUniqueNames(state));
  for (const ShardedTensor& t : state) {
    if (!t.local.defined() || t.local.shape() != t.LocalShape() || t.local.dtype() != t.dtype) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name,
                                                     "': local data does not match its shape ",
                                                     ShapeString(t.LocalShape())));
    }
    if (t.replicated()) continue;
    auto expected = StridedPieces(t.global_shape[static_cast<size_t>(t.split_dim)], tp_size,
                                  tp_rank, t.stride);
    if (t.tp_size != tp_size || t.tp_rank != tp_rank || !expected.ok() || *expected != t.pieces) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", t.name, "': its shard layout (TP rank ", t.tp_rank, " of ", t.tp_size,
          ", stride ", t.stride, ") is not this rank's (TP rank ", tp_rank, " of ", tp_size, ")"));
    }
  }
  return absl::OkStatus();
}

CheckpointMetadata BuildMetadata(absl::Span<const ShardedTensor> state, int tp_size, int dp_size,
                                 const SaveOptions& options) {
  CheckpointMetadata m;
  m.tp_size = tp_size;
  m.dp_size = dp_size;
  m.step = options.step;
  m.user = options.user_metadata;
  for (const ShardedTensor& t : state) {
    TensorLayout layout;
    layout.dtype = t.dtype;
    layout.global_shape = t.global_shape;
    layout.split_dim = t.split_dim;
    layout.stride = t.stride;
    if (t.replicated()) {
      layout.shards.push_back({ShardFileName(0, tp_size), {}});
    } else {
      for (int r = 0; r < tp_size; ++r) {
        layout.shards.push_back(
            {ShardFileName(r, tp_size),
             *StridedPieces(t.global_shape[static_cast<size_t>(t.split_dim)], tp_size, r,
                            t.stride)});
      }
    }
    m.tensors[t.name] = std::move(layout);
  }
  return m;
}

// Rank 0: the first free tag, and removal of temp dirs left by killed saves.
absl::StatusOr<std::string> PrepareRoot(const std::string& root, const std::string& base_tag) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", root, ": ", ec.message()));
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    if (absl::EndsWith(e.path().filename().string(), ".tmp")) fs::remove_all(e.path(), ec);
  }
  std::string tag = base_tag;
  for (int i = 1; fs::exists(fs::path(root) / tag); ++i) tag = absl::StrCat(base_tag, ".", i);
  fs::create_directory(fs::path(root) / (tag + ".tmp"), ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", root, "/", tag, ".tmp: ", ec.message()));
  return tag;
}

absl::Status Commit(const std::string& root, const std::string& tag,
                    const CheckpointMetadata& metadata, const SaveOptions& options) {
  const std::string tmp = absl::StrCat(root, "/", tag, ".tmp");
  const std::string final_dir = absl::StrCat(root, "/", tag);
  TPX_RETURN_IF_ERROR(WriteFileAtomically(absl::StrCat(tmp, "/", kMetadataFileName),
                                          MetadataToJson(metadata)));
  TPX_RETURN_IF_ERROR(FsyncPath(tmp));
  if (options.on_point) options.on_point("metadata-written");
  if (::rename(tmp.c_str(), final_dir.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", final_dir, ": ",
                                            std::strerror(errno)));
  }
  TPX_RETURN_IF_ERROR(FsyncPath(root));
  if (options.on_point) options.on_point("renamed");
  TPX_RETURN_IF_ERROR(WriteFileAtomically(absl::StrCat(root, "/", kLatestFileName), tag + "\n"));
  return FsyncPath(root);
}

}  // namespace

absl::StatusOr<std::string> SaveShardedState(const parallel::ParallelState& parallel,
                                             const std::string& root,
                                             absl::Span<const ShardedTensor> state,
                                             const SaveOptions& options) {
  comm::Communicator& world = parallel.world();
  const int tp_rank = parallel.tensor_parallel_rank(), tp_size = parallel.tensor_parallel_size();
  const int dp_rank = parallel.data_parallel_rank();
  auto fail = [&](absl::string_view what, const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("saving checkpoint under ", root, ": ", what,
                                               s.message()));
  };
  // 1. Same state everywhere, valid layouts.
  absl::Status local = CheckLayouts(state, tp_rank, tp_size);
  TPX_RETURN_IF_ERROR(AgreeOnStatus(world, local.ok() ? local : fail("", local)));
  std::vector<int64_t> signatures(static_cast<size_t>(world.size()));
  const int64_t mine = Signature(state);
  TPX_RETURN_IF_ERROR(world.AllGather(&mine, signatures.data(), 1, DType::kI64).Wait());
  for (int r = 0; r < world.size(); ++r) {
    if (signatures[static_cast<size_t>(r)] != signatures[0]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "saving checkpoint under ", root, ": rank ", r,
          " passes other tensor names, shapes or layouts than rank 0"));
    }
  }
  // 2. Rank 0 picks the tag and creates the temp dir.
  std::string tag = options.tag.empty() ? absl::StrFormat("step-%08d", options.step) : options.tag;
  if (tag.find('/') != std::string::npos || tag[0] == '.' || tag.size() > 200) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint tag '", tag, "' is not a plain name"));
  }
  local = absl::OkStatus();
  if (world.rank() == 0) {
    auto picked = PrepareRoot(root, tag);
    if (picked.ok()) tag = *picked;
    local = picked.status();
  }
  TPX_RETURN_IF_ERROR(AgreeOnStatus(world, local));
  TPX_RETURN_IF_ERROR(BroadcastString(world, &tag, 0));
  if (options.on_point) options.on_point("begin");
  const std::string tmp = absl::StrCat(root, "/", tag, ".tmp");

  // 3. Replica 0 of every TP rank writes its file.
  local = absl::OkStatus();
  if (dp_rank == 0) {
    std::vector<SafetensorsTensorView> views;
    std::vector<Tensor> host;  // keeps device copies alive
    for (const ShardedTensor& t : state) {
      if (t.replicated() && t.replica_id != 0) continue;
      auto h = t.local.device().is_cpu() ? absl::StatusOr<Tensor>(t.local)
                                         : t.local.To(Device::CPU());
      if (!h.ok()) {
        local = h.status();
        break;
      }
      host.push_back(*h);
      views.push_back({t.name, t.dtype, t.local.shape(), host.back().raw_data()});
    }
    SafetensorsWriteOptions write;
    if (options.on_point) {
      write.on_tensor_written = [&](size_t) { options.on_point("tensor-written"); };
    }
    const std::string path = absl::StrCat(tmp, "/", ShardFileName(tp_rank, tp_size));
    if (local.ok()) {
      local = WriteSafetensors(path, views, {{"format", "pt"}, {"tpx_tp_rank", absl::StrCat(tp_rank)}},
                               write);
    }
    if (!local.ok()) local = fail(absl::StrCat("writing ", path, ": "), local);
    if (local.ok() && options.on_point) options.on_point("file-written");
  }
  TPX_RETURN_IF_ERROR(AgreeOnStatus(world, local));

  // 4. Rank 0 commits: metadata, rename, latest.
  local = absl::OkStatus();
  if (world.rank() == 0) {
    local = Commit(root, tag, BuildMetadata(state, tp_size, parallel.data_parallel_size(), options),
                   options);
    if (local.ok() && options.on_point) options.on_point("committed");
  }
  TPX_RETURN_IF_ERROR(AgreeOnStatus(world, local));
  return absl::StrCat(root, "/", tag);
}

}  // namespace tpx::sharded_state
