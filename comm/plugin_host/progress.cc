#include "comm/plugin_host/progress.h"

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

std::string ProgressTracker::Ranks(const std::vector<int>& ranks) const {
  std::string out = FormatRankList(ranks);
  if (world_ranks_.empty() || ranks.empty()) return out;
  std::vector<int> world;
  bool renumbered = false;
  for (int r : ranks) {
    const int w = r < static_cast<int>(world_ranks_.size()) ? world_ranks_[r] : r;
    renumbered |= w != r;
    world.push_back(w);
  }
  if (!renumbered) return out;
  std::string in_world = FormatRankList(world);
  return absl::StrCat(out, " (world ", in_world, ")");
}

ProgressTracker::ProgressTracker(Store* store, std::string comm_name, int rank, int size,
                                 absl::Duration period)
    : store_(store),
      prefix_(std::move(comm_name) + "/tpx_progress/"),
      rank_(rank),
      size_(size),
      period_(period) {
  // Publish "0 0" at once, so a rank that dies before its first heartbeat
  // still shows up as "completed none" rather than as silent.
  Publish().IgnoreError();
  thread_ = std::thread([this] { Run(); });
}

ProgressTracker::~ProgressTracker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void ProgressTracker::Completed(uint64_t seq) {
  uint64_t current = completed_.load(std::memory_order_relaxed);
  while (seq > current &&
         !completed_.compare_exchange_weak(current, seq, std::memory_order_relaxed)) {
  }
}

absl::Status ProgressTracker::Publish() {
  std::lock_guard<std::mutex> lock(publish_mu_);
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
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, absl::ToChronoMicroseconds(period_), [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    // A store failure here is not this thread's to report; Explain() says
    // what it can when it matters.
    Publish().IgnoreError();
    lock.lock();
  }
}

std::string ProgressTracker::Explain(uint64_t seq, absl::Duration read_timeout) {
  Publish().IgnoreError();
  // Peers publish at most once per period, so a live peer that did enter
  // `seq` may not show it yet: re-read for up to two periods before calling
  // anyone missing. Only failures pay this wait.
  const absl::Duration settle = std::min(2 * period_ + absl::Milliseconds(100), absl::Seconds(3));
  const absl::Time settle_until = absl::Now() + settle;
  const absl::Time deadline = absl::Now() + std::max(read_timeout, settle);
  struct Peer {
    bool known = false;
    uint64_t entered = 0, completed = 0;
  };
  std::vector<Peer> peers(size_);
  while (true) {
    bool all_entered = true;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_ || (peers[r].known && peers[r].entered >= seq)) continue;
      absl::StatusOr<std::string> value =
          store_->Get(absl::StrCat(prefix_, r), absl::Milliseconds(50));
      if (value.ok()) {
        std::vector<std::string> parts = absl::StrSplit(*value, ' ');
        Peer p;
        if (parts.size() == 2 && absl::SimpleAtoi(parts[0], &p.entered) &&
            absl::SimpleAtoi(parts[1], &p.completed)) {
          p.known = true;
          peers[r] = p;
        }
      } else if (value.status().code() != absl::StatusCode::kDeadlineExceeded) {
        return absl::StrCat("progress of peers unknown (store: ", value.status().message(), ")");
      }
      if (!peers[r].known || peers[r].entered < seq) all_entered = false;
    }
    const absl::Time now = absl::Now();
    if (all_entered || now >= settle_until || now >= deadline) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  std::vector<int> missing, silent, stalled;
  std::vector<std::string> last_completed;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const Peer& p = peers[r];
    if (!p.known) {
      missing.push_back(r);
      silent.push_back(r);
    } else if (p.entered < seq) {
      missing.push_back(r);
      last_completed.push_back(p.completed == 0
                                   ? absl::StrCat(Ranks({r}), " completed none")
                                   : absl::StrCat(Ranks({r}), " last completed #", p.completed));
    } else if (p.completed < seq) {
      stalled.push_back(r);
    }
  }
  std::string out;
  if (!missing.empty()) {
    absl::StrAppend(&out, Ranks(missing), " never entered it");
    if (!last_completed.empty()) absl::StrAppend(&out, "; ", absl::StrJoin(last_completed, ", "));
    if (!silent.empty()) {
      absl::StrAppend(&out, "; ", Ranks(silent), " never reported progress");
    }
  } else {
    absl::StrAppend(&out, "every rank entered it");
    if (!stalled.empty()) {
      absl::StrAppend(&out, "; ", Ranks(stalled), " had not completed it");
    }
  }
  return out;
}

}  // namespace tpx::comm
