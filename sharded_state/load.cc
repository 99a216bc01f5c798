#include "sharded_state/load.h"

#include <algorithm>
#include <atomic>
#include <functional>
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

// One pread: `n` bytes at `src` of an entry's data into byte `dst` of the
// target's local tensor.
struct ReadOp {
  const SafetensorsReader* reader;
  const SafetensorsEntry* entry;
  uint64_t src, n, dst;
};

// Every byte range of the stored shards that overlaps the target's pieces;
// checks the entries (dtype, shape) and that the ranges cover the target.
absl::StatusOr<std::vector<ReadOp>> PlanTarget(const ShardedTensor& target,
                                               const TensorLayout& layout, FileCache& files) {
  const Shape& shape = layout.global_shape;
  const int64_t ndim = static_cast<int64_t>(shape.size());
  // The dim the pieces run along: the stored split, else the target's, else 0.
  const int64_t dim = layout.split_dim >= 0    ? layout.split_dim
                      : !target.replicated() ? target.split_dim
                                             : 0;
  if (!target.replicated() && layout.split_dim >= 0 && target.split_dim != layout.split_dim) {
    return absl::FailedPreconditionError(
        absl::StrCat("is split along dim ", layout.split_dim, " in the checkpoint but along dim ",
                     target.split_dim, " in the model"));
  }
  const std::vector<ShardPiece> want = target.replicated() ? Whole(shape, dim) : target.pieces;
  const int64_t want_extent = ndim == 0 ? 1 : target.LocalShape()[static_cast<size_t>(dim)];
  int64_t outer = 1, inner = static_cast<int64_t>(SizeOf(layout.dtype));
  for (int64_t d = 0; d < ndim; ++d) {
    if (d < dim) outer *= shape[static_cast<size_t>(d)];
    if (d > dim) inner *= shape[static_cast<size_t>(d)];
  }
  std::vector<ReadOp> ops;
  int64_t covered = 0;
  for (const StoredShard& shard : layout.shards) {
    const std::vector<ShardPiece> have = shard.pieces.empty() ? Whole(shape, dim) : shard.pieces;
    const int64_t have_extent = Extent(have);
    const SafetensorsReader* reader = nullptr;
    const SafetensorsEntry* entry = nullptr;
    for (const ShardPiece& w : want) {
      for (const ShardPiece& h : have) {
        const int64_t a = std::max(w.global_offset, h.global_offset);
        const int64_t b = std::min(w.global_offset + w.length, h.global_offset + h.length);
        if (a >= b) continue;
        if (entry == nullptr) {
          TPX_ASSIGN_OR_RETURN(reader, files.Get(shard.file));
          TPX_ASSIGN_OR_RETURN(entry, reader->Find(target.name));
          if (entry->dtype != layout.dtype || entry->shape != layout.StoredShape(shard)) {
            return absl::DataLossError(absl::StrCat(
                "is stored in ", reader->path(), " as ", SafetensorsDTypeName(entry->dtype),
                ShapeString(entry->shape), ", but the metadata says ",
                SafetensorsDTypeName(layout.dtype), ShapeString(layout.StoredShape(shard))));
          }
        }
        covered += (b - a) * outer;
        const int64_t src_index = h.local_offset + (a - h.global_offset);
        const int64_t dst_index = w.local_offset + (a - w.global_offset);
        const int64_t run = (b - a) * inner;
        if (b - a == have_extent && b - a == want_extent) {  // one contiguous block
          ops.push_back({reader, entry, 0, static_cast<uint64_t>(run * outer), 0});
          continue;
        }
        for (int64_t o = 0; o < outer; ++o) {
          ops.push_back({reader, entry, static_cast<uint64_t>((o * have_extent + src_index) * inner),
                         static_cast<uint64_t>(run),
                         static_cast<uint64_t>((o * want_extent + dst_index) * inner)});
        }
      }
    }
  }
  if (covered != want_extent * outer) {
    return absl::DataLossError("the checkpoint's shards do not cover this rank's part of it");
  }
  return ops;
}

// What a rank will read, with every check that needs no data done.
struct Plan {
  std::string dir;
  CheckpointMetadata metadata;
  std::unique_ptr<FileCache> files;
  std::vector<std::vector<ReadOp>> reads;  // per target
};

absl::Status InTensor(const std::string& dir, const std::string& name, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(),
                      absl::StrCat("checkpoint ", dir, ": tensor '", name, "' ", s.message()));
}

absl::StatusOr<Plan> MakePlan(const std::string& path, absl::Span<const ShardedTensor> targets) {
  TPX_RETURN_IF_ERROR(CheckUniqueNames(targets));
  Plan plan;
  TPX_ASSIGN_OR_RETURN(plan.dir, ResolveCheckpointDir(path));
  TPX_ASSIGN_OR_RETURN(plan.metadata, ReadMetadata(plan.dir));
  // Shapes and dtypes first, so a mismatch is reported before any file is opened.
  for (const ShardedTensor& t : targets) {
    auto it = plan.metadata.tensors.find(t.name);
    if (it == plan.metadata.tensors.end()) {
      return absl::NotFoundError(
          absl::StrCat("checkpoint ", plan.dir, " has no tensor '", t.name, "'"));
    }
    if (it->second.global_shape != t.global_shape || it->second.dtype != t.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", plan.dir, ": tensor '", t.name, "' is ",
          SafetensorsDTypeName(it->second.dtype), ShapeString(it->second.global_shape),
          " there but ", SafetensorsDTypeName(t.dtype), ShapeString(t.global_shape),
          " in the model"));
    }
  }
  plan.files = std::make_unique<FileCache>(plan.dir);
  for (const ShardedTensor& t : targets) {
    auto ops = PlanTarget(t, plan.metadata.tensors.at(t.name), *plan.files);
    TPX_RETURN_IF_ERROR(InTensor(plan.dir, t.name, ops.status()));
    plan.reads.push_back(*std::move(ops));
  }
  return plan;
}

// fn(0..n-1) on a few threads; the first failure in index order.
absl::Status ParallelFor(size_t n, const std::function<absl::Status(size_t)>& fn) {
  std::vector<absl::Status> status(n);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) status[i] = fn(i);
  };
  // One thread rarely saturates a fast disk or the page cache's copy bandwidth.
  const size_t threads =
      std::min<size_t>({n, kMaxReadThreads, std::max(1u, std::thread::hardware_concurrency())});
  std::vector<std::thread> pool;
  for (size_t i = 1; i < threads; ++i) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (const absl::Status& s : status) TPX_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

// Plans, agrees (when comm is given), reads and assigns.
absl::StatusOr<CheckpointMetadata> Load(comm::Communicator* comm, const std::string& path,
                                        absl::Span<const ShardedTensor> targets,
                                        const LoadOptions& options) {
  auto agree = [comm](const absl::Status& s) {
    return comm == nullptr ? s : AgreeOnStatus(*comm, s);
  };
  absl::StatusOr<Plan> plan = MakePlan(path, targets);
  TPX_RETURN_IF_ERROR(agree(plan.status()));
  // Where each target's bytes go: the model's own memory, unless staged or
  // not a contiguous host tensor.
  std::vector<Tensor> host(targets.size());
  absl::Status local;
  for (size_t i = 0; i < targets.size() && local.ok(); ++i) {
    const Tensor& t = targets[i].local;
    if (options.stage_in_host_memory || !t.device().is_cpu() || !t.is_contiguous()) {
      absl::StatusOr<Tensor> buffer = Tensor::Empty(targets[i].LocalShape(), targets[i].dtype);
      local = buffer.status();
      if (buffer.ok()) host[i] = *std::move(buffer);
    } else {
      host[i] = t;
    }
  }
  TPX_RETURN_IF_ERROR(agree(local));
  local = ParallelFor(targets.size(), [&](size_t i) -> absl::Status {
    char* base = static_cast<char*>(host[i].raw_data());
    for (const ReadOp& op : plan->reads[i]) {
      TPX_RETURN_IF_ERROR(
          InTensor(plan->dir, targets[i].name, op.reader->ReadBytes(*op.entry, op.src, op.n,
                                                                     base + op.dst)));
    }
    return absl::OkStatus();
  });
  // Unstaged tensors that needed a host buffer (on a device) go over now,
  // from this thread (device copies use its current stream).
  for (size_t i = 0; i < targets.size() && local.ok() && !options.stage_in_host_memory; ++i) {
    if (!host[i].SharesStorageWith(targets[i].local)) {
      local = InTensor(plan->dir, targets[i].name, AssignFromShard(targets[i], host[i]));
    }
  }
  if (!local.ok() && !options.stage_in_host_memory) {
    local = absl::Status(local.code(), absl::StrCat(local.message(),
                                                    " (after every check had passed: the model "
                                                    "may be partly loaded)"));
  }
  TPX_RETURN_IF_ERROR(agree(local));
  if (options.stage_in_host_memory) {
    for (size_t i = 0; i < targets.size(); ++i) {
      TPX_RETURN_IF_ERROR(AssignFromShard(targets[i], host[i]));
    }
  }
  return std::move(plan->metadata);
}

}  // namespace

absl::StatusOr<CheckpointMetadata> LoadShardedStateLocal(const std::string& path,
                                                         absl::Span<const ShardedTensor> targets,
                                                         const LoadOptions& options) {
  return Load(nullptr, path, targets, options);
}

absl::StatusOr<CheckpointMetadata> LoadShardedState(comm::Communicator& comm,
                                                    const std::string& path,
                                                    absl::Span<const ShardedTensor> targets,
                                                    const LoadOptions& options) {
  return Load(&comm, path, targets, options);
}

}  // namespace tpx::sharded_state
