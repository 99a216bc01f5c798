// The rendezvous store a launcher hosts for the ranks it starts, and the
// job's secret that store admits (comm/store/tcp_store.h).
//
//   TPX_ASSIGN_OR_RETURN(std::string secret, JobStoreSecret());
//   TPX_ASSIGN_OR_RETURN(auto server, ListenForJob("127.0.0.1", 0, secret));
//   ... start the ranks (fork before any thread) ...
//   TPX_RETURN_IF_ERROR(server->Start());
#ifndef TPX_LAUNCH_JOB_STORE_H_
#define TPX_LAUNCH_JOB_STORE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/store/tcp_store.h"

namespace tpx::launch {

// TPX_STORE_SECRET when this process has it (every node of a job must use
// the same), else a fresh random one.
absl::StatusOr<std::string> JobStoreSecret();

// A store server listening on host:port (0: a free port) for the job's
// ranks, not serving yet: Start() it once the ranks are forked.
absl::StatusOr<std::unique_ptr<comm::TcpStoreServer>> ListenForJob(const std::string& host,
                                                                   int port,
                                                                   const std::string& secret);

}  // namespace tpx::launch

#endif  // TPX_LAUNCH_JOB_STORE_H_
