#include "sharded_state/load.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/status_macros.h"
#include "sharded_state/collective_status.h"
#include "sharded_state/safetensors.h"

namespace tpx::sharded_state {
namespace {

constexpr size_t kMaxReadThreads = 8;

// Pieces along `dim` of a tensor that is whole along it.
std::vector<ShardPiece> Whole(const Shape& shape, int64_t dim) {
  return {ShardPiece{0, 0, shape.empty() ? 1 : shape[static_cast<size_t>(dim)]}};
}

int64_t Extent(const std::vector<ShardPiece>& pieces) {
  int64_t n = 0;
  for (const ShardPiece& p : pieces) n += p.length;
  return n;
}

struct Staged {
  CheckpointMetadata metadata;
  std::vector<Tensor> tensors;  // one per target, its local shape
};

// Opens each shard file once (header checked); shared by the reading threads.
class FileCache {
 public:
  explicit FileCache(std::string dir) : dir_(std::move(dir)) {}
  absl::StatusOr<const SafetensorsReader*> Get(const std::string& file) {
    absl::MutexLock lock(&mu_);
    auto it = files_.find(file);
    if (it == files_.end()) {
      TPX_ASSIGN_OR_RETURN(SafetensorsReader r,
                           SafetensorsReader::Open(absl::StrCat(dir_, "/", file)));
      it = files_.emplace(file, std::make_unique<SafetensorsReader>(std::move(r))).first;
    }
    return it->second.get();
  }

 private:
  std::string dir_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<SafetensorsReader>> files_ ABSL_GUARDED_BY(mu_);
};

// Reads into `dst` (the target's local shape) every stored byte range that
// overlaps the target's pieces.
absl::Status ReadTarget(const ShardedTensor& target, const TensorLayout& layout,
                        FileCache& files, const Tensor& dst) {
  const Shape& shape = layout.global_shape;
  const int64_t ndim = static_cast<int64_t>(shape.size());
  // The dim the pieces run along: the stored split, else the target's, else 0.
  const int64_t dim = layout.split_dim >= 0 ? layout.split_dim
                      : !target.replicated() ? target.split_dim
                                             : 0;
  if (!target.replicated() && layout.split_dim >= 0 && target.split_dim != layout.split_dim) {
    return absl::FailedPreconditionError(
        absl::StrCat("is split along dim ", layout.split_dim, " in the checkpoint but along dim ",
                     target.split_dim, " in the model"));
  }
  const std::vector<ShardPiece> want =
      target.replicated() ? Whole(shape, dim) : target.pieces;
  const int64_t want_extent = ndim == 0 ? 1 : dst.shape()[static_cast<size_t>(dim)];
  int64_t outer = 1, inner = static_cast<int64_t>(SizeOf(layout.dtype));
  for (int64_t d = 0; d < ndim; ++d) {
    if (d < dim) outer *= shape[static_cast<size_t>(d)];
    if (d > dim) inner *= shape[static_cast<size_t>(d)];
  }
  char* out = static_cast<char*>(dst.raw_data());
  int64_t covered = 0;
  for (const StoredShard& shard : layout.shards) {
    const std::vector<ShardPiece> have =
        shard.pieces.empty() ? Whole(shape, dim) : shard.pieces;
    const int64_t have_extent = Extent(have);
    const SafetensorsEntry* entry = nullptr;
    for (const ShardPiece& w : want) {
      for (const ShardPiece& h : have) {
        const int64_t a = std::max(w.global_offset, h.global_offset);
        const int64_t b = std::min(w.global_offset + w.length, h.global_offset + h.length);
        if (a >= b) continue;
        if (entry == nullptr) {
          TPX_ASSIGN_OR_RETURN(const SafetensorsReader* reader, files.Get(shard.file));
          TPX_ASSIGN_OR_RETURN(entry, reader->Find(target.name));
          if (entry->dtype != layout.dtype || entry->shape != layout.StoredShape(shard)) {
            return absl::DataLossError(absl::StrCat(
                "is stored in ", reader->path(), " as ", SafetensorsDTypeName(entry->dtype),
                ShapeString(entry->shape), ", but the metadata says ",
                SafetensorsDTypeName(layout.dtype), ShapeString(layout.StoredShape(shard))));
          }
        }
        TPX_ASSIGN_OR_RETURN(const SafetensorsReader* reader, files.Get(shard.file));
        covered += (b - a) * outer;
        const int64_t src_index = h.local_offset + (a - h.global_offset);
        const int64_t dst_index = w.local_offset + (a - w.global_offset);
        const int64_t run = (b - a) * inner;
        if (b - a == have_extent && b - a == want_extent) {  // one contiguous block
          TPX_RETURN_IF_ERROR(
              reader->ReadBytes(*entry, 0, static_cast<uint64_t>(run * outer), out));
          continue;
        }
        for (int64_t o = 0; o < outer; ++o) {
          TPX_RETURN_IF_ERROR(reader->ReadBytes(
              *entry, static_cast<uint64_t>((o * have_extent + src_index) * inner),
              static_cast<uint64_t>(run), out + (o * want_extent + dst_index) * inner));
        }
      }
    }
  }
  if (covered != want_extent * outer) {
    return absl::DataLossError("the checkpoint's shards do not cover this rank's part of it");
  }
  return absl::OkStatus();
}

absl::StatusOr<Staged> Stage(const std::string& path, absl::Span<const ShardedTensor> targets) {
  TPX_RETURN_IF_ERROR(CheckUniqueNames(targets));
  TPX_ASSIGN_OR_RETURN(std::string dir, ResolveCheckpointDir(path));
  Staged staged;
  TPX_ASSIGN_OR_RETURN(staged.metadata, ReadMetadata(dir));
  // Shapes and dtypes first, so a mismatch is reported before any read.
  for (const ShardedTensor& t : targets) {
    auto it = staged.metadata.tensors.find(t.name);
    if (it == staged.metadata.tensors.end()) {
      return absl::NotFoundError(absl::StrCat("checkpoint ", dir, " has no tensor '", t.name, "'"));
    }
    if (it->second.global_shape != t.global_shape || it->second.dtype != t.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", dir, ": tensor '", t.name, "' is ",
          SafetensorsDTypeName(it->second.dtype), ShapeString(it->second.global_shape),
          " there but ", SafetensorsDTypeName(t.dtype), ShapeString(t.global_shape),
          " in the model"));
    }
  }
  for (const ShardedTensor& t : targets) {
    TPX_ASSIGN_OR_RETURN(Tensor dst, Tensor::Empty(t.LocalShape(), t.dtype));
    staged.tensors.push_back(std::move(dst));
  }
  // Tensors are read by a few threads (pread is thread-safe): one thread
  // rarely saturates a fast disk or the page cache's copy bandwidth.
  FileCache files(dir);
  std::vector<absl::Status> status(targets.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < targets.size(); i = next++) {
      status[i] = ReadTarget(targets[i], staged.metadata.tensors.at(targets[i].name), files,
                             staged.tensors[i]);
    }
  };
  const size_t threads = std::min<size_t>(
      {targets.size(), kMaxReadThreads, std::max(1u, std::thread::hardware_concurrency())});
  std::vector<std::thread> pool;
  for (size_t i = 1; i < threads; ++i) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (size_t i = 0; i < targets.size(); ++i) {  // the first failing tensor, in order
    if (!status[i].ok()) {
      return absl::Status(status[i].code(), absl::StrCat("checkpoint ", dir, ": tensor '",
                                                         targets[i].name, "' ",
                                                         status[i].message()));
    }
  }
  return staged;
}

absl::Status Assign(absl::Span<const ShardedTensor> targets, const Staged& staged) {
  for (size_t i = 0; i < targets.size(); ++i) {
    TPX_RETURN_IF_ERROR(AssignFromShard(targets[i], staged.tensors[i]));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CheckpointMetadata> LoadShardedStateLocal(const std::string& path,
                                                         absl::Span<const ShardedTensor> targets) {
  TPX_ASSIGN_OR_RETURN(Staged staged, Stage(path, targets));
  TPX_RETURN_IF_ERROR(Assign(targets, staged));
  return std::move(staged.metadata);
}

absl::StatusOr<CheckpointMetadata> LoadShardedState(comm::Communicator& comm,
                                                    const std::string& path,
                                                    absl::Span<const ShardedTensor> targets) {
  absl::StatusOr<Staged> staged = Stage(path, targets);
  TPX_RETURN_IF_ERROR(AgreeOnStatus(comm, staged.status()));
  TPX_RETURN_IF_ERROR(Assign(targets, *staged));
  return std::move(staged->metadata);
}

}  // namespace tpx::sharded_state
