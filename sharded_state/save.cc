#include "sharded_state/save.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <thread>
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
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  const bool ok = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok)
    return absl::InternalError(absl::StrCat("cannot fsync ", path, ": ", std::strerror(err)));
  return absl::OkStatus();
}

// Writes `text` to `path` durably and atomically (temp file, fsync, rename).
absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot create ", tmp, ": ", std::strerror(errno)));
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
    absl::StrAppend(&s, t.name, ":", ShapeString(t.global_shape), ":",
                    std::string(DTypeName(t.dtype)));
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
  if (ec)
    return absl::InternalError(
        absl::StrCat("cannot create ", root, "/", tag, ".tmp: ", ec.message()));
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

absl::Status Annotate(const std::string& root, absl::string_view what, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(),
                      absl::StrCat("saving checkpoint under ", root, ": ", what, s.message()));
}

}  // namespace

// One save in progress on one rank.
struct PendingSave::Job {
  const parallel::ParallelState* parallel = nullptr;
  std::string root, tag;
  SaveOptions options;
  CheckpointMetadata metadata;
  std::vector<std::string> names;  // what this rank writes ...
  std::vector<Tensor> data;        // ... from these host tensors
  std::thread writer;
  absl::Status written;
};

namespace {

// Steps 1 and 2, collective: checks, tag, temp dir; and what this rank writes
// (copied to host memory when `snapshot`, so the caller may change the model).
absl::StatusOr<std::unique_ptr<PendingSave::Job>> Begin(const parallel::ParallelState& parallel,
                                                        const std::string& root,
                                                        absl::Span<const ShardedTensor> state,
                                                        const SaveOptions& options,
                                                        bool snapshot) {
  comm::Communicator& world = parallel.world();
  const int tp_rank = parallel.tensor_parallel_rank(), tp_size = parallel.tensor_parallel_size();
  // 1. Same state everywhere, valid layouts.
  TPX_RETURN_IF_ERROR(
      AgreeOnStatus(world, Annotate(root, "", CheckLayouts(state, tp_rank, tp_size))));
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
  auto job = std::make_unique<PendingSave::Job>();
  job->parallel = &parallel;
  job->root = root;
  job->options = options;
  job->metadata = BuildMetadata(state, tp_size, parallel.data_parallel_size(), options);
  // The data: replica 0 of every TP rank writes its shards, TP rank 0 the
  // replicated tensors.
  absl::Status local;
  if (parallel.data_parallel_rank() == 0) {
    for (const ShardedTensor& t : state) {
      if (t.replicated() && t.replica_id != 0) continue;
      absl::StatusOr<Tensor> h = !t.local.device().is_cpu() ? t.local.To(Device::CPU())
                                 : snapshot                 ? t.local.Clone()
                                                            : absl::StatusOr<Tensor>(t.local);
      if (!h.ok()) {
        local = Annotate(root, absl::StrCat("copying '", t.name, "' to host memory: "), h.status());
        break;
      }
      job->names.push_back(t.name);
      job->data.push_back(*std::move(h));
    }
  }
  TPX_RETURN_IF_ERROR(AgreeOnStatus(world, local));
  // 2. Rank 0 picks the tag and creates the temp dir.
  job->tag = options.tag.empty() ? absl::StrFormat("step-%08d", options.step) : options.tag;
  if (job->tag.find('/') != std::string::npos || job->tag[0] == '.' || job->tag.size() > 200) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint tag '", job->tag, "' is not a plain name"));
  }
  if (world.rank() == 0) {
    auto picked = PrepareRoot(root, job->tag);
    if (picked.ok()) job->tag = *picked;
    local = picked.status();
  }
  TPX_RETURN_IF_ERROR(AgreeOnStatus(world, local));
  TPX_RETURN_IF_ERROR(BroadcastString(world, &job->tag, 0));
  if (options.on_point) options.on_point("begin");
  return job;
}

// Step 3, local: this rank's file (no communication, so it may run on a
// background thread).
absl::Status WriteRankFile(const PendingSave::Job& job) {
  if (job.parallel->data_parallel_rank() != 0) return absl::OkStatus();
  if (job.options.on_point) job.options.on_point("file-start");
  const int tp_rank = job.parallel->tensor_parallel_rank();
  std::vector<SafetensorsTensorView> views;
  for (size_t i = 0; i < job.names.size(); ++i) {
    views.push_back(
        {job.names[i], job.data[i].dtype(), job.data[i].shape(), job.data[i].raw_data()});
  }
  SafetensorsWriteOptions write;
  if (job.options.on_point) {
    write.on_tensor_written = [&](size_t) { job.options.on_point("tensor-written"); };
  }
  const std::string path =
      absl::StrCat(job.root, "/", job.tag, ".tmp/",
                   ShardFileName(tp_rank, job.parallel->tensor_parallel_size()));
  TPX_RETURN_IF_ERROR(Annotate(
      job.root, absl::StrCat("writing ", path, ": "),
      WriteSafetensors(path, views, {{"format", "pt"}, {"tpx_tp_rank", absl::StrCat(tp_rank)}},
                       write)));
  if (job.options.on_point) job.options.on_point("file-written");
  return absl::OkStatus();
}

// Step 4, collective: every file written? Then rank 0 commits.
absl::StatusOr<std::string> Finish(const PendingSave::Job& job) {
  comm::Communicator& world = job.parallel->world();
  TPX_RETURN_IF_ERROR(AgreeOnStatus(world, job.written));
  absl::Status local;
  if (world.rank() == 0) {
    local = Annotate(job.root, "", Commit(job.root, job.tag, job.metadata, job.options));
    if (local.ok() && job.options.on_point) job.options.on_point("committed");
  }
  TPX_RETURN_IF_ERROR(AgreeOnStatus(world, local));
  return absl::StrCat(job.root, "/", job.tag);
}

}  // namespace

absl::StatusOr<std::string> SaveShardedState(const parallel::ParallelState& parallel,
                                             const std::string& root,
                                             absl::Span<const ShardedTensor> state,
                                             const SaveOptions& options) {
  TPX_ASSIGN_OR_RETURN(std::unique_ptr<PendingSave::Job> job,
                       Begin(parallel, root, state, options, /*snapshot=*/false));
  job->written = WriteRankFile(*job);
  return Finish(*job);
}

absl::StatusOr<PendingSave> StartShardedSave(const parallel::ParallelState& parallel,
                                             const std::string& root,
                                             absl::Span<const ShardedTensor> state,
                                             const SaveOptions& options) {
  TPX_ASSIGN_OR_RETURN(std::unique_ptr<PendingSave::Job> job,
                       Begin(parallel, root, state, options, /*snapshot=*/true));
  PendingSave::Job* j = job.get();
  j->writer = std::thread([j] { j->written = WriteRankFile(*j); });
  return PendingSave(std::move(job));
}

PendingSave::PendingSave(std::unique_ptr<Job> job) : job_(std::move(job)) {}
PendingSave::PendingSave(PendingSave&&) noexcept = default;

PendingSave& PendingSave::operator=(PendingSave&& other) noexcept {
  if (this != &other) {
    Abandon();
    job_ = std::move(other.job_);
  }
  return *this;
}

PendingSave::~PendingSave() { Abandon(); }

void PendingSave::Abandon() {
  if (job_ != nullptr && job_->writer.joinable()) job_->writer.join();
  job_.reset();
}

absl::StatusOr<std::string> PendingSave::Wait() {
  if (job_ == nullptr) {
    return absl::FailedPreconditionError(
        "PendingSave::Wait: no save in progress (waited already?)");
  }
  job_->writer.join();
  absl::StatusOr<std::string> result = Finish(*job_);
  job_.reset();
  return result;
}

}  // namespace tpx::sharded_state
