// The Communicator for every backend plugin (comm/plugin_abi.h): turns
// validated CollectiveArgs into plugin posts, numbers collectives, keeps the
// progress heartbeat and turns backend timeouts and peer failures into
// messages that name the op and the ranks that never arrived. With
// `debug_checks` every collective is preceded by an exchange of its
// descriptor that reports ranks issuing a different op/dtype/count/root.
//
//   TPX_ASSIGN_OR_RETURN(auto plugin, LoadPlugin("ucx"));
//   TPX_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> world,
//       PluginCommunicator::Create(plugin, {.rank = r, .size = n}, store));
#ifndef TPX_COMM_PLUGIN_HOST_PLUGIN_COMMUNICATOR_H_
#define TPX_COMM_PLUGIN_HOST_PLUGIN_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "comm/plugin_host/plugin_loader.h"
#include "comm/store/store.h"

namespace tpx::comm {

struct CommOptions {
  int rank = 0;
  int size = 1;
  std::string name = "world";
  // No operation blocks longer; a dead or stalled peer becomes an error.
  absl::Duration timeout = absl::Minutes(5);
  int device = -1;
  // Check that all ranks issue matching collectives (costs one small
  // exchange per collective). Default from TPX_COMM_DEBUG=1.
  bool debug_checks = false;
  // Heartbeat period of the progress tracker.
  absl::Duration heartbeat_period = absl::Milliseconds(500);
};

class PluginCommunicator {
 public:
  // Collective over options.size ranks. `store` is shared with subgroup
  // communicators; `keep_alive` (e.g. a store server) lives as long as any
  // communicator derived from this one.
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(
      std::shared_ptr<const Plugin> plugin, const CommOptions& options,
      std::shared_ptr<Store> store, std::shared_ptr<void> keep_alive = nullptr);
};

// True when TPX_COMM_DEBUG is set to a non-empty value other than "0".
bool DebugChecksFromEnv();

}  // namespace tpx::comm

#endif  // TPX_COMM_PLUGIN_HOST_PLUGIN_COMMUNICATOR_H_
