#include "launch/node_group.h"

#include <unistd.h>

#include <cstdio>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace tpx::launch {
namespace {

std::string NodeKey(int node) { return absl::StrCat("tpxrun/node/", node); }
std::string LeftKey(int node) { return absl::StrCat("tpxrun/left/", node); }
constexpr char kFailureKey[] = "tpxrun/failure";

// The nodes in [0, nnodes) other than `skip` whose key(node) is missing.
absl::StatusOr<std::vector<int>> Missing(comm::Store& store, int nnodes, int skip,
                                         std::string (*key)(int)) {
  std::vector<int> missing;
  for (int k = 0; k < nnodes; ++k) {
    if (k == skip) continue;
    absl::StatusOr<bool> there = store.Check(key(k));
    if (!there.ok()) return there.status();
    if (!*there) missing.push_back(k);
  }
  return missing;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NodeGroup>> NodeGroup::Join(std::unique_ptr<comm::Store> store,
                                                           int nnodes, int node_rank,
                                                           absl::Duration timeout,
                                                           Options options) {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  absl::Status s = store->Set(NodeKey(node_rank), host);
  if (!s.ok()) return s;
  std::vector<std::string> keys;
  for (int k = 0; k < nnodes; ++k) keys.push_back(NodeKey(k));
  s = store->Wait(keys, timeout);
  if (s.code() == absl::StatusCode::kDeadlineExceeded) {
    absl::StatusOr<std::vector<int>> missing = Missing(*store, nnodes, -1, NodeKey);
    if (!missing.ok()) return missing.status();
    return absl::DeadlineExceededError(
        absl::StrCat("node rank(s) ", absl::StrJoin(*missing, ", "), " of ", nnodes,
                     " never joined within ", absl::FormatDuration(timeout),
                     " (is tpxrun running there with the same --master_addr/--master_port?)"));
  }
  if (!s.ok()) return s;
  return std::unique_ptr<NodeGroup>(new NodeGroup(std::move(store), nnodes, node_rank, options));
}

NodeGroup::~NodeGroup() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

void NodeGroup::Log(const std::string& line) const {
  if (options_.log_prefix.empty()) return;
  std::fprintf(stderr, "%s%s\n", options_.log_prefix.c_str(), line.c_str());
  std::fflush(stderr);
}

void NodeGroup::StartWatching() {
  if (!watcher_.joinable()) watcher_ = std::thread([this] { Watch(); });
}

void NodeGroup::Watch() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    Poll();
    lock.lock();
    wake_.wait_for(lock, absl::ToChronoMilliseconds(options_.poll_interval), [this] {
      return stopping_ || (own_stop_.has_value() && !own_stop_published_);
    });
  }
}

absl::StatusOr<std::optional<JobStop>> NodeGroup::ReadFailure() {
  absl::StatusOr<bool> there = store_->Check(kFailureKey);
  if (!there.ok()) return there.status();
  if (!*there) return std::optional<JobStop>();
  absl::StatusOr<std::string> value = store_->Get(kFailureKey, absl::Seconds(1));
  if (!value.ok()) return value.status();
  std::vector<std::string> parts = absl::StrSplit(*value, absl::MaxSplits(':', 2));
  JobStop stop;
  int node = -1;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &stop.exit_code) ||
      !absl::SimpleAtoi(parts[1], &node)) {
    return absl::DataLossError(absl::StrCat("malformed ", kFailureKey, " '", *value, "'"));
  }
  stop.reason = node == node_rank_ ? parts[2]
                                   : absl::StrCat("the job failed on node ", node, ": ", parts[2]);
  return stop;
}

void NodeGroup::Poll() {
  std::optional<JobStop> publish;
  absl::Time started;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (own_stop_.has_value() && own_stop_published_) return;  // nothing left to watch
    if (own_stop_.has_value()) publish = own_stop_;
    if (!publish.has_value() && remote_stop_.has_value()) return;
    started = call_since_ = absl::Now();
  }
  absl::Status status;
  std::optional<JobStop> remote;
  if (publish.has_value()) {
    // The first failure recorded wins; a later one is this node's echo of it.
    const std::string value =
        absl::StrCat(publish->exit_code, ":", node_rank_, ":", publish->reason);
    status = store_->CompareSet(kFailureKey, "", value).status();
  } else {
    absl::StatusOr<std::optional<JobStop>> read = ReadFailure();
    status = read.status();
    if (read.ok()) remote = *read;
  }
  std::lock_guard<std::mutex> lock(mu_);
  call_since_ = absl::InfiniteFuture();
  if (!status.ok()) {
    if (failing_since_ == absl::InfiniteFuture()) failing_since_ = started;
    store_error_ = status.ToString();
    return;
  }
  failing_since_ = absl::InfiniteFuture();
  if (publish.has_value()) own_stop_published_ = true;
  if (remote.has_value()) remote_stop_ = remote;
}

std::optional<JobStop> NodeGroup::StopRequest() {
  std::lock_guard<std::mutex> lock(mu_);
  if (remote_stop_.has_value()) return remote_stop_;
  const absl::Time now = absl::Now();
  const absl::Time bad_since = std::min(failing_since_, call_since_);
  if (now - bad_since < options_.store_loss_grace) return std::nullopt;
  return JobStop{1, absl::StrCat("the job's store has not answered for ",
                                 absl::FormatDuration(options_.store_loss_grace),
                                 store_error_.empty() ? "" : absl::StrCat(" (", store_error_, ")"))};
}

void NodeGroup::ReportStop(const JobStop& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (own_stop_.has_value()) return;
    own_stop_ = why;
  }
  wake_.notify_all();
}

std::optional<JobStop> NodeGroup::Leave(const std::optional<JobStop>& local) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  if (own_stop_.has_value() && !own_stop_published_) Poll();  // the watcher had no time
  absl::Status left = store_->Set(LeftKey(node_rank_), own_stop_.has_value() ? "failed"
                                                       : local.has_value()   ? "stopped"
                                                                             : "done");
  absl::StatusOr<std::optional<JobStop>> job = ReadFailure();
  if (node_rank_ == 0 && left.ok()) {
    // Every other node needs this node's store until it has left.
    const bool failed = local.has_value() || (job.ok() && job->has_value());
    const absl::Duration wait = failed ? options_.failed_leave_wait : options_.leave_wait;
    std::vector<std::string> keys;
    for (int k = 1; k < nnodes_; ++k) keys.push_back(LeftKey(k));
    if (!store_->Wait(keys, wait).ok()) {
      absl::StatusOr<std::vector<int>> missing = Missing(*store_, nnodes_, 0, LeftKey);
      Log(absl::StrCat("node(s) ",
                       missing.ok() ? absl::StrJoin(*missing, ", ") : std::string("?"),
                       " did not finish within ", absl::FormatDuration(wait),
                       "; closing the store"));
    }
    job = ReadFailure();  // a node may have failed meanwhile
  }
  if (!job.ok() || !job->has_value()) return local;
  if (!local.has_value() || local->reason != (**job).reason) Log((**job).reason);  // news here
  return *job;
}

}  // namespace tpx::launch
