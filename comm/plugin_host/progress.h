// Per-communicator progress heartbeat, used to explain failures: which op a
// rank is stuck in and which peers never reached it.
//
//   ProgressTracker progress(store, "world", rank, size);
//   progress.Entered(seq);  ... progress.Completed(seq);   // cheap: atomics only
//   // On a timeout:
//   std::string why = progress.Explain(seq);  // "ranks 3 and 5 never entered it; ..."
//
// A background thread publishes this rank's (last entered, last completed)
// sequence numbers to the store at most once per `period`, and only when
// they changed, so collectives never pay a store round trip. Explain()
// publishes immediately, then reads every peer's last published state.
#ifndef TPX_COMM_PLUGIN_HOST_PROGRESS_H_
#define TPX_COMM_PLUGIN_HOST_PROGRESS_H_

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "comm/store/store.h"

namespace tpx::comm {

class ProgressTracker {
 public:
  // `store` must outlive the tracker. Keys live under
  // "<comm_name>/tpx_progress/<rank>".
  ProgressTracker(Store* store, std::string comm_name, int rank, int size,
                  absl::Duration period = absl::Milliseconds(500));
  ~ProgressTracker();
  ProgressTracker(const ProgressTracker&) = delete;
  ProgressTracker& operator=(const ProgressTracker&) = delete;

  void Entered(uint64_t seq) { entered_.store(seq, std::memory_order_relaxed); }
  void Completed(uint64_t seq);

  uint64_t entered() const { return entered_.load(std::memory_order_relaxed); }
  uint64_t completed() const { return completed_.load(std::memory_order_relaxed); }

  // Says which ranks never entered collective `seq` and what they last
  // completed, e.g. "ranks 3 and 5 never entered it; rank 3 last completed
  // #1040, rank 5 last completed #1040". Blocks for at most ~`read_timeout`.
  std::string Explain(uint64_t seq, absl::Duration read_timeout = absl::Seconds(1));

  // Writes the current state to the store now (if it changed).
  absl::Status Publish();

  // World rank of each rank of this communicator (a split's ranks are
  // renumbered); messages then name both. Empty: the ranks are world ranks.
  void SetWorldRanks(std::vector<int> world_ranks) { world_ranks_ = std::move(world_ranks); }
  // "rank 1 (world rank 3)", "ranks 0 and 1 (world ranks 2 and 3)".
  std::string Ranks(const std::vector<int>& ranks) const;

 private:
  void Run();

  Store* store_;
  std::string prefix_;
  int rank_, size_;
  absl::Duration period_;
  std::atomic<uint64_t> entered_{0}, completed_{0};
  // std::mutex rather than absl::Mutex: Debian's prebuilt Abseil is not
  // instrumented, so ThreadSanitizer would not see absl locks.
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by mu_
  std::mutex publish_mu_;
  uint64_t published_entered_ = ~0ull;   // guarded by publish_mu_
  uint64_t published_completed_ = ~0ull;  // guarded by publish_mu_
  std::vector<int> world_ranks_;
  std::thread thread_;
};

// "rank 3", "ranks 3 and 5", "ranks 1, 2 and 7".
std::string FormatRankList(const std::vector<int>& ranks);

}  // namespace tpx::comm

#endif  // TPX_COMM_PLUGIN_HOST_PROGRESS_H_
