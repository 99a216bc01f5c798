#include "comm/init.h"

#include <cstdlib>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "comm/plugin_host/plugin_communicator.h"
#include "comm/plugin_host/plugin_loader.h"
#include "comm/store/tcp_store.h"
#include "core/status_macros.h"

ABSL_FLAG(std::string, tpx_comm_backend, "ucx",
          "Communication backend plugin (libtpx_comm_<name>.so); env TPX_COMM_BACKEND wins.");
ABSL_FLAG(int64_t, tpx_comm_timeout_ms, 300000,
          "Longest any communication may wait for a peer; env TPX_COMM_TIMEOUT_MS wins.");

namespace tpx::comm {

std::string ResolveBackend(const InitOptions& options) {
  if (!options.backend.empty()) return options.backend;
  if (const char* env = std::getenv("TPX_COMM_BACKEND"); env != nullptr && env[0] != '\0') {
    return env;
  }
  return absl::GetFlag(FLAGS_tpx_comm_backend);
}

absl::StatusOr<absl::Duration> ResolveTimeout(const InitOptions& options) {
  if (options.timeout.has_value()) return *options.timeout;
  int64_t ms = absl::GetFlag(FLAGS_tpx_comm_timeout_ms);
  if (const char* env = std::getenv("TPX_COMM_TIMEOUT_MS"); env != nullptr && env[0] != '\0') {
    if (!absl::SimpleAtoi(env, &ms)) {
      return absl::InvalidArgumentError(
          absl::StrCat("TPX_COMM_TIMEOUT_MS='", env, "' is not an integer number of ms"));
    }
  }
  if (ms <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("comm timeout must be > 0 ms, got ", ms));
  }
  return absl::Milliseconds(ms);
}

absl::StatusOr<std::unique_ptr<Communicator>> Init(const InitOptions& options) {
  LaunchEnv launch;
  if (options.launch.has_value()) {
    launch = *options.launch;
  } else {
    TPX_ASSIGN_OR_RETURN(launch, ReadLaunchEnv());
  }
  TPX_ASSIGN_OR_RETURN(absl::Duration timeout, ResolveTimeout(options));
  const std::string backend = ResolveBackend(options);
  // Load first: a missing plugin should not leave peers waiting on the store.
  TPX_ASSIGN_OR_RETURN(std::shared_ptr<const Plugin> plugin, LoadPlugin(backend));

  std::shared_ptr<TcpStoreServer> server;
  int port = launch.store_port;
  if (launch.rank == 0 && !launch.store_hosted_by_launcher) {
    TcpStoreServerOptions store_options;
    store_options.secret = launch.store_secret;
    auto listening = TcpStoreServer::Listen(launch.store_host, port, store_options);
    if (!listening.ok()) {
      return absl::Status(listening.status().code(),
                          absl::StrCat("rank 0 hosts the rendezvous store: ",
                                       listening.status().message()));
    }
    TPX_RETURN_IF_ERROR((*listening)->Start());
    port = (*listening)->port();
    server = std::move(*listening);
  }
  auto store = TcpStore::Connect(launch.store_host, port, timeout, launch.store_secret);
  if (!store.ok()) {
    return absl::Status(store.status().code(), absl::StrCat("rank ", launch.rank, " of ",
                                                            launch.world_size, ": ",
                                                            store.status().message()));
  }
  CommOptions comm_options;
  comm_options.rank = launch.rank;
  comm_options.size = launch.world_size;
  comm_options.name = "world";
  comm_options.timeout = timeout;
  // A device backend binds each rank to the CUDA device of its local rank;
  // a host backend gets no device (comm/plugin_abi.h, config.device).
  comm_options.device = plugin->device_memory() ? launch.local_rank : -1;
  comm_options.debug_checks = DebugChecksFromEnv();
  return PluginCommunicator::Create(std::move(plugin), comm_options,
                                    std::shared_ptr<Store>(std::move(*store)), std::move(server));
}

}  // namespace tpx::comm
