#include "comm/progress.h"

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tpx::comm {

std::string FormatRankList(const std::vector<int>& ranks) {
  if (ranks.empty()) return "no rank";
  if (ranks.size() == 1) return absl::StrCat("rank ", ranks[0]);
  std::vector<int> head(ranks.begin(), ranks.end() - 1);
  return absl::StrCat("ranks ", absl::StrJoin(head, ", "), " and ", ranks.back());
}

ProgressTracker::ProgressTracker(Store* store, std::string comm_name, int rank, int size,
                                 absl::Duration period)
    : store_(store),
      prefix_(std::move(comm_name) + "/tpx_progress/"),
      rank_(rank),
      size_(size),
      period_(period) {
  thread_ = std::thread([this] { Run(); });
}

ProgressTracker::~ProgressTracker() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void ProgressTracker::Completed(uint64_t seq) {
  uint64_t current = completed_.load(std::memory_order_relaxed);
  while (seq > current &&
         !completed_.compare_exchange_weak(current, seq, std::memory_order_relaxed)) {
  }
}

absl::Status ProgressTracker::Publish() {
  absl::MutexLock lock(&publish_mu_);
  const uint64_t entered = entered_.load(), completed = completed_.load();
  if (entered == published_entered_ && completed == published_completed_) {
    return absl::OkStatus();
  }
  absl::Status status =
      store_->Set(absl::StrCat(prefix_, rank_), absl::StrCat(entered, " ", completed));
  if (status.ok()) {
    published_entered_ = entered;
    published_completed_ = completed;
  }
  return status;
}

void ProgressTracker::Run() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    mu_.AwaitWithTimeout(absl::Condition(&stop_), period_);
    if (stop_) break;
    mu_.Unlock();
    // A store failure here is not this thread's to report; Explain() says
    // what it can when it matters.
    Publish().IgnoreError();
    mu_.Lock();
  }
}

std::string ProgressTracker::Explain(uint64_t seq, absl::Duration read_timeout) {
  Publish().IgnoreError();
  std::vector<int> missing, silent, stalled;
  std::vector<std::string> last_completed;
  absl::Time deadline = absl::Now() + read_timeout;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    absl::Duration left = std::max(deadline - absl::Now(), absl::Milliseconds(20));
    absl::StatusOr<std::string> value = store_->Get(absl::StrCat(prefix_, r), left);
    uint64_t entered = 0, completed = 0;
    if (value.ok()) {
      std::vector<std::string> parts = absl::StrSplit(*value, ' ');
      if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &entered) ||
          !absl::SimpleAtoi(parts[1], &completed)) {
        continue;
      }
    } else if (value.status().code() != absl::StatusCode::kDeadlineExceeded) {
      return absl::StrCat("progress of peers unknown (store: ", value.status().message(), ")");
    }
    if (!value.ok()) {
      silent.push_back(r);
      missing.push_back(r);
    } else if (entered < seq) {
      missing.push_back(r);
      last_completed.push_back(completed == 0 ? absl::StrCat("rank ", r, " completed none")
                                              : absl::StrCat("rank ", r, " last completed #",
                                                             completed));
    } else if (completed < seq) {
      stalled.push_back(r);
    }
  }
  std::string out;
  if (!missing.empty()) {
    absl::StrAppend(&out, FormatRankList(missing), missing.size() == 1 ? " never entered it" :
                                                                         " never entered it");
    if (!last_completed.empty()) absl::StrAppend(&out, "; ", absl::StrJoin(last_completed, ", "));
    if (!silent.empty()) {
      absl::StrAppend(&out, "; ", FormatRankList(silent), " never reported progress");
    }
  } else {
    absl::StrAppend(&out, "every rank entered it");
    if (!stalled.empty()) {
      absl::StrAppend(&out, "; ", FormatRankList(stalled), " had not completed it");
    }
  }
  return out;
}

}  // namespace tpx::comm
