// Fuzzes the launch-environment parser (comm/launch_env.h). Input: an
// environment as "NAME=VALUE" lines. Checks: no crash or UB, and a layout
// that parses is consistent (ranks within the world, a usable port).
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "absl/strings/str_split.h"
#include "comm/launch_env.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::map<std::string, std::string> vars;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(reinterpret_cast<const char*>(data), size), '\n')) {
    size_t eq = line.find('=');
    if (eq == absl::string_view::npos) continue;
    // Environment strings end at their first NUL.
    std::string value(line.substr(eq + 1));
    value = value.c_str();
    vars[std::string(line.substr(0, eq))] = value;
  }
  absl::StatusOr<tpx::comm::LaunchEnv> env =
      tpx::comm::ReadLaunchEnv([&](const char* name) -> const char* {
        auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
      });
  if (!env.ok()) {
    if (env.status().message().empty()) std::abort();
    return 0;
  }
  const tpx::comm::LaunchEnv& e = *env;
  if (e.world_size < 1 || e.rank < 0 || e.rank >= e.world_size) std::abort();
  if (e.local_world_size < 1 || e.local_world_size > e.world_size) std::abort();
  if (e.local_rank < 0 || e.local_rank >= e.world_size) std::abort();
  if (e.store_port < 0 || e.store_port > 65535) std::abort();
  if (e.world_size > 1 && e.store_port == 0) std::abort();
  if (e.store_host.empty()) std::abort();
  return 0;
}
