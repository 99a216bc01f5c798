// The launchers of a multi-node job (one tpxrun per node) share the job's
// state through its rendezvous store, as torchrun's agents do: they wait for
// each other before any rank starts; a node whose rank fails records that
// in the store and every other node, watching it, stops its own ranks; node
// 0, which hosts the store, keeps it up until every node has left.
//
//   TPX_ASSIGN_OR_RETURN(auto group, NodeGroup::Join(std::move(store), nnodes, node_rank,
//                                                   absl::Seconds(300)));
//   ... start this node's ranks (RankProcesses) ...
//   group->StartWatching();
//   SuperviseOptions supervise;
//   supervise.should_stop = [&] { return group->StopRequest(); };
//   supervise.on_stop = [&](const JobStop& why) { group->ReportStop(why); };
//   JobResult local = ranks.Supervise(supervise);
//   std::optional<JobStop> job = group->Leave(local.failure);  // the job's first failure
//
// A store that stays unreachable for Options::store_loss_grace also stops
// the job. Which failure is "first" is decided by the store (the first to
// record it); a rank that fails because of another node's failure may win
// that race when the ranks notice before the launchers do.
// Store keys: tpxrun/node/<k> (joined), tpxrun/failure
// ("<exit code>:<node>:<reason>"), tpxrun/left/<k>.
#ifndef TPX_LAUNCH_NODE_GROUP_H_
#define TPX_LAUNCH_NODE_GROUP_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/store/store.h"
#include "launch/rank_processes.h"

namespace tpx::launch {

class NodeGroup {
 public:
  struct Options {
    // How often the watcher looks at the job's state.
    absl::Duration poll_interval = absl::Milliseconds(200);
    // The store failing (or not answering) this long stops the job.
    absl::Duration store_loss_grace = absl::Seconds(5);
    // How long node 0 keeps the store up for nodes that have not left,
    // after a clean finish and after a failure.
    absl::Duration leave_wait = absl::Seconds(60);
    absl::Duration failed_leave_wait = absl::Seconds(15);
    // Prefix of the lines Leave prints (nodes it waited for in vain, a
    // failure elsewhere this node had not been told of); "" prints none.
    std::string log_prefix;
  };

  // Announces node `node_rank` of `nnodes` and waits until every node did;
  // DeadlineExceeded after `timeout` naming the node ranks still missing.
  static absl::StatusOr<std::unique_ptr<NodeGroup>> Join(std::unique_ptr<comm::Store> store,
                                                         int nnodes, int node_rank,
                                                         absl::Duration timeout,
                                                         Options options);
  static absl::StatusOr<std::unique_ptr<NodeGroup>> Join(std::unique_ptr<comm::Store> store,
                                                         int nnodes, int node_rank,
                                                         absl::Duration timeout) {
    return Join(std::move(store), nnodes, node_rank, timeout, Options());
  }
  ~NodeGroup();
  NodeGroup(const NodeGroup&) = delete;
  NodeGroup& operator=(const NodeGroup&) = delete;

  // Starts the watcher thread (after this node's ranks were forked).
  void StartWatching();
  // Non-blocking: why this node must stop its ranks (another node recorded
  // a failure, or the store has been unreachable too long), if it must.
  std::optional<JobStop> StopRequest();
  // This node stops the job for `why` (its rank failed, it got a signal):
  // recorded for the other nodes by the watcher, at once. Non-blocking.
  void ReportStop(const JobStop& why);
  // This node's ranks have all exited (`local`: why Supervise stopped them,
  // if it did): records that this node left; node 0 then waits (bounded)
  // until every node has left. Returns the job's first failure as the store
  // recorded it (another node's reason reads "the job failed on node k:
  // ..."; printed when it is news here), else `local` when the store cannot
  // say; none: a clean finish everywhere this node knows of.
  std::optional<JobStop> Leave(const std::optional<JobStop>& local);

 private:
  NodeGroup(std::unique_ptr<comm::Store> store, int nnodes, int node_rank, Options options)
      : store_(std::move(store)), nnodes_(nnodes), node_rank_(node_rank), options_(options) {}
  void Watch();
  // One look at the store: publishes a pending stop, or reads another
  // node's. Called without mu_ held.
  void Poll();
  absl::StatusOr<std::optional<JobStop>> ReadFailure();
  void Log(const std::string& line) const;

  std::unique_ptr<comm::Store> store_;
  const int nnodes_;
  const int node_rank_;
  const Options options_;
  std::thread watcher_;

  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::optional<JobStop> own_stop_;    // what ReportStop said
  bool own_stop_published_ = false;
  std::optional<JobStop> remote_stop_;  // another node's failure, as StopRequest tells it
  absl::Time failing_since_ = absl::InfiniteFuture();  // first store error of a bad spell
  absl::Time call_since_ = absl::InfiniteFuture();     // start of a store call in flight
  std::string store_error_;
};

}  // namespace tpx::launch

#endif  // TPX_LAUNCH_NODE_GROUP_H_
