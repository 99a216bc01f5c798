// comm::Init(): the one call a program makes to join its job and get the
// world communicator.
//
//   int main(int argc, char** argv) {
//     absl::ParseCommandLine(argc, argv);        // --tpx_comm_backend, --tpx_comm_timeout_ms
//     auto world = tpx::comm::Init();
//     if (!world.ok()) { std::cerr << world.status() << "\n"; return 1; }
//     (*world)->AllReduce(...);
//   }
//
// Init reads the launcher's environment (comm/launch_env.h), hosts the
// TcpStore on rank 0 unless the launcher hosts it (TPX_STORE_HOSTED=1),
// connects to it, loads the backend plugin and creates "world".
// Backend: --tpx_comm_backend (default "ucx"), overridden by TPX_COMM_BACKEND.
// Timeout: --tpx_comm_timeout_ms (default 300000), overridden by
// TPX_COMM_TIMEOUT_MS. TPX_COMM_DEBUG=1 turns on cross-rank call checks.
#ifndef TPX_COMM_INIT_H_
#define TPX_COMM_INIT_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "comm/launch_env.h"

ABSL_DECLARE_FLAG(std::string, tpx_comm_backend);
ABSL_DECLARE_FLAG(int64_t, tpx_comm_timeout_ms);

namespace tpx::comm {

struct InitOptions {
  // Empty: from TPX_COMM_BACKEND, else --tpx_comm_backend.
  std::string backend;
  // Unset: from TPX_COMM_TIMEOUT_MS, else --tpx_comm_timeout_ms.
  std::optional<absl::Duration> timeout;
  // Unset: read from the environment.
  std::optional<LaunchEnv> launch;
};

absl::StatusOr<std::unique_ptr<Communicator>> Init(const InitOptions& options = {});

// The backend and timeout Init would use (flags and environment resolved).
std::string ResolveBackend(const InitOptions& options = {});
absl::StatusOr<absl::Duration> ResolveTimeout(const InitOptions& options = {});

}  // namespace tpx::comm

#endif  // TPX_COMM_INIT_H_
