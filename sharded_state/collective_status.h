// Agreement on success across ranks: every rank passes its own status and
// all of them return the same outcome, so a file error seen by one rank is
// reported (with that rank's message) by all and none goes on alone.
//
//   TPX_RETURN_IF_ERROR(AgreeOnStatus(world, local_status));
//
// Collective over `comm`. A communication failure is returned as is.
#ifndef TPX_SHARDED_STATE_COLLECTIVE_STATUS_H_
#define TPX_SHARDED_STATE_COLLECTIVE_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "comm/communicator.h"

namespace tpx::sharded_state {

// OK when every rank passed OK; otherwise the status of the lowest failing
// rank (its code, message prefixed "rank r: " on the other ranks).
absl::Status AgreeOnStatus(comm::Communicator& comm, const absl::Status& local);

// Sends `value` (at most 1023 bytes) from `root` to every rank.
absl::Status BroadcastString(comm::Communicator& comm, std::string* value, int root);

}  // namespace tpx::sharded_state

#endif  // TPX_SHARDED_STATE_COLLECTIVE_STATUS_H_
