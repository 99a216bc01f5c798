#include "launch/job_store.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace tpx::launch {

absl::StatusOr<std::string> JobStoreSecret() {
  if (const char* s = std::getenv("TPX_STORE_SECRET"); s != nullptr && s[0] != '\0') return s;
  return comm::NewStoreSecret();
}

absl::StatusOr<std::unique_ptr<comm::TcpStoreServer>> ListenForJob(const std::string& host,
                                                                   int port,
                                                                   const std::string& secret) {
  comm::TcpStoreServerOptions options;
  options.secret = secret;
  auto server = comm::TcpStoreServer::Listen(host, port, options);
  if (!server.ok()) {
    return absl::Status(server.status().code(),
                        absl::StrCat("hosting the job's store: ", server.status().message()));
  }
  return server;
}

}  // namespace tpx::launch
