#include "comm/launch_env.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tpx::comm {
namespace {

struct Scheme {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

// kSchemes[0] is tpx's own; kSchemes[1] torchrun's, which launchers also write.
constexpr Scheme kSchemes[] = {
    {"tpx", "TPX_RANK", "TPX_WORLD_SIZE", "TPX_LOCAL_RANK", "TPX_LOCAL_WORLD_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
};

constexpr const char kStoreAddr[] = "TPX_STORE_ADDR";
constexpr const char kStorePort[] = "TPX_STORE_PORT";
constexpr const char kStoreHosted[] = "TPX_STORE_HOSTED";
constexpr const char kStoreSecret[] = "TPX_STORE_SECRET";
constexpr const char kMasterAddr[] = "MASTER_ADDR";
constexpr const char kMasterPort[] = "MASTER_PORT";

// Parses variable `name` as an int in [min, max]; `fallback` when unset.
absl::StatusOr<int> ReadInt(const EnvLookup& env, const char* name, int fallback, int min,
                            int max) {
  const char* text = env(name);
  if (text == nullptr || text[0] == '\0') return fallback;
  int value = 0;
  // Slurm writes e.g. "4(x2)" for NTASKS_PER_NODE; the leading number is what we need.
  absl::string_view view(text);
  if (size_t paren = view.find('('); paren != absl::string_view::npos) view = view.substr(0, paren);
  if (!absl::SimpleAtoi(view, &value) || value < min || value > max) {
    return absl::InvalidArgumentError(absl::StrCat("environment variable ", name, "='", text,
                                                   "' must be an integer in [", min, ", ", max,
                                                   "]"));
  }
  return value;
}

// The first host of a Slurm node list: "gpu[03-05,9]x,cpu1" -> "gpu03x".
std::string FirstSlurmHost(absl::string_view list) {
  std::string out;
  bool in_brackets = false, first_range_done = false;
  for (char c : list) {
    if (!in_brackets && c == ',') break;
    if (c == '[') {
      in_brackets = true;
    } else if (c == ']') {
      in_brackets = false;
    } else if (!in_brackets) {
      out += c;
    } else if (c == ',' || c == '-') {
      first_range_done = true;
    } else if (!first_range_done) {
      out += c;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<LaunchEnv> ReadLaunchEnv(const EnvLookup& env) {
  LaunchEnv out;
  for (const Scheme& s : kSchemes) {
    if (env(s.rank) == nullptr) continue;
    out.launcher = s.launcher;
    if (env(s.size) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(s.rank, " is set but ", s.size, " is not (launcher: ", s.launcher, ")"));
    }
    TPX_ASSIGN_OR_RETURN(out.world_size, ReadInt(env, s.size, 1, 1, 1 << 24));
    TPX_ASSIGN_OR_RETURN(out.rank, ReadInt(env, s.rank, 0, 0, out.world_size - 1));
    TPX_ASSIGN_OR_RETURN(out.local_world_size,
                         ReadInt(env, s.local_size, out.world_size, 1, out.world_size));
    TPX_ASSIGN_OR_RETURN(out.local_rank, ReadInt(env, s.local_rank, out.rank % out.local_world_size,
                                                 0, out.world_size - 1));
    break;
  }
  const char* host_var = env(kStoreAddr) ? kStoreAddr : kMasterAddr;
  const char* port_var = env(kStorePort) ? kStorePort : kMasterPort;
  if (const char* host = env(host_var); host != nullptr && host[0] != '\0') out.store_host = host;
  TPX_ASSIGN_OR_RETURN(out.store_port, ReadInt(env, port_var, 0, 0, 65534));
  // torchrun's own agent store already listens on MASTER_PORT: use the next one.
  if (out.store_port > 0 && env(kStorePort) == nullptr) ++out.store_port;
  if (out.launcher == "slurm") {
    // srun gives no rendezvous address: rank 0 runs on the step's first node
    // and the port follows from the job id (the same on every node).
    if (env(kStoreAddr) == nullptr && env(kMasterAddr) == nullptr) {
      for (const char* var : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
        if (const char* list = env(var); list != nullptr && list[0] != '\0') {
          out.store_host = FirstSlurmHost(list);
          break;
        }
      }
    }
    if (out.store_port == 0 && env("SLURM_JOB_ID") != nullptr) {
      TPX_ASSIGN_OR_RETURN(int job, ReadInt(env, "SLURM_JOB_ID", 0, 0, 1 << 30));
      out.store_port = 10000 + job % 20000;
    }
  }
  if (out.world_size > 1 && out.store_port == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", out.rank, " of ", out.world_size, " (launcher: ", out.launcher,
        "): no rendezvous store port; set TPX_STORE_PORT (and TPX_STORE_ADDR) or MASTER_PORT "
        "(and MASTER_ADDR), or start the job with tpxrun"));
  }
  const char* hosted = env(kStoreHosted);
  out.store_hosted_by_launcher = hosted != nullptr && absl::string_view(hosted) == "1";
  if (const char* secret = env(kStoreSecret); secret != nullptr) out.store_secret = secret;
  return out;
}

absl::StatusOr<LaunchEnv> ReadLaunchEnv() {
  return ReadLaunchEnv([](const char* name) { return std::getenv(name); });
}

std::vector<std::pair<std::string, std::string>> LaunchEnvVariables(const LaunchEnv& env) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Scheme& s : {kSchemes[0], kSchemes[1]}) {
    out.emplace_back(s.rank, absl::StrCat(env.rank));
    out.emplace_back(s.size, absl::StrCat(env.world_size));
    out.emplace_back(s.local_rank, absl::StrCat(env.local_rank));
    out.emplace_back(s.local_size, absl::StrCat(env.local_world_size));
  }
  out.emplace_back(kStoreAddr, env.store_host);
  out.emplace_back(kStorePort, absl::StrCat(env.store_port));
  out.emplace_back(kStoreHosted, env.store_hosted_by_launcher ? "1" : "0");
  if (!env.store_secret.empty()) out.emplace_back(kStoreSecret, env.store_secret);
  out.emplace_back(kMasterAddr, env.store_host);
  out.emplace_back(kMasterPort, absl::StrCat(env.store_port));
  return out;
}

bool StartedByLauncher(const EnvLookup& env) {
  for (const Scheme& s : kSchemes) {
    if (env(s.rank) != nullptr) return true;
  }
  return false;
}

bool StartedByLauncher() {
  return StartedByLauncher([](const char* name) { return std::getenv(name); });
}

}  // namespace tpx::comm
