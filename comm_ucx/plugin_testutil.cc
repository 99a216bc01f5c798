#include "comm_ucx/plugin_testutil.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "comm/store/file_store.h"
#include "comm/store/store_abi.h"

namespace tpx::ucx::testing {
namespace {

bool Exists(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

std::string TempDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/ucx_ranks_XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return "";
  return tmpl;
}

// Body of one rank process; returns the exit code.
int RankMain(int rank, int world, const std::string& dir,
             const std::function<std::string(RankEnv&)>& body, const RunOptions& options) {
  for (const auto& [name, value] : options.env) setenv(name.c_str(), value.c_str(), 1);
  if (options.enter_rank_host) {
    if (std::string e = options.enter_rank_host(rank); !e.empty()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, e.c_str());
      return 1;
    }
  }
  std::string error;
  const tpx_comm_plugin_v1_t* plugin = LoadPlugin(&error);
  if (plugin == nullptr) {
    std::fprintf(stderr, "rank %d: %s\n", rank, error.c_str());
    return 1;
  }
  auto store = comm::FileStore::Open(dir);
  if (!store.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, std::string(store.status().message()).c_str());
    return 1;
  }
  comm::StoreAbi store_abi(store->get());
  tpx_comm_config_v1_t config{};
  config.struct_size = sizeof(config);
  config.rank = rank;
  config.size = world;
  config.name = "world";
  config.timeout_ms = options.comm_timeout_ms;
  config.device = -1;
  config.store = store_abi.get();
  tpx_error_t err{};
  if (int code = plugin->init(&err); code != TPX_OK) {
    std::fprintf(stderr, "rank %d: init failed (%d): %s\n", rank, code, err.message);
    return 1;
  }
  tpx_comm_t comm = nullptr;
  if (int code = plugin->comm_create(&config, &comm, &err); code != TPX_OK) {
    std::fprintf(stderr, "rank %d: comm_create failed (%d): %s\n", rank, code, err.message);
    return 1;
  }
  RankEnv env{rank, world, plugin, comm, &config};
  std::string failure = body(env);
  plugin->comm_destroy(comm, &err);
  if (!failure.empty()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, failure.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

std::string PluginPath() {
  if (const char* p = getenv("TPX_UCX_PLUGIN")) return p;
  const std::string rel = "/tpx/comm_ucx/libtpx_comm_ucx.so";
  for (const char* var : {"TEST_SRCDIR", "RUNFILES_DIR"}) {
    if (const char* d = getenv(var); d != nullptr && Exists(d + rel)) return d + rel;
  }
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = '\0';
    std::string runfiles = std::string(exe) + ".runfiles" + rel;
    if (Exists(runfiles)) return runfiles;
  }
  return "libtpx_comm_ucx.so";
}

const tpx_comm_plugin_v1_t* LoadPlugin(std::string* error) {
  const std::string path = PluginPath();
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    *error = "dlopen(" + path + "): " + dlerror();
    return nullptr;
  }
  auto entry = reinterpret_cast<tpx_comm_plugin_entry_fn>(dlsym(lib, TPX_COMM_PLUGIN_ENTRY_SYMBOL));
  if (entry == nullptr) {
    *error = path + " lacks " TPX_COMM_PLUGIN_ENTRY_SYMBOL;
    return nullptr;
  }
  // These tests drive the version-2 struct (init without host services).
  const tpx_comm_plugin_header_t* header = entry(2);
  if (header == nullptr || header->magic != TPX_COMM_PLUGIN_MAGIC || header->abi_version != 2) {
    *error = path + ": bad plugin header";
    return nullptr;
  }
  return reinterpret_cast<const tpx_comm_plugin_v1_t*>(header);
}

std::string RunRanks(int world, const std::function<std::string(RankEnv&)>& body,
                     const RunOptions& options) {
  const std::string dir = TempDir();
  if (dir.empty()) return "cannot create a temporary directory";
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids(world, -1);
  for (int rank = 0; rank < world; ++rank) {
    pid_t pid = fork();
    if (pid == 0) _exit(RankMain(rank, world, dir, body, options));
    pids[rank] = pid;
  }
  std::string failures;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options.run_timeout_ms);
  std::vector<bool> done(world, false);
  int remaining = world;
  while (remaining > 0) {
    bool progressed = false;
    for (int rank = 0; rank < world; ++rank) {
      if (done[rank]) continue;
      int wstatus = 0;
      if (waitpid(pids[rank], &wstatus, WNOHANG) != pids[rank]) continue;
      done[rank] = true;
      --remaining;
      progressed = true;
      if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) continue;
      if (WIFSIGNALED(wstatus) && options.may_die.count(rank)) continue;
      failures += "rank " + std::to_string(rank) +
                  (WIFEXITED(wstatus) ? " exited with " + std::to_string(WEXITSTATUS(wstatus))
                                      : " died of signal " + std::to_string(WTERMSIG(wstatus))) +
                  " (see its stderr)\n";
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (int rank = 0; rank < world; ++rank) {
        if (done[rank]) continue;
        kill(pids[rank], SIGKILL);
        waitpid(pids[rank], nullptr, 0);
        failures += "rank " + std::to_string(rank) + " hung and was killed\n";
      }
      break;
    }
    if (!progressed) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return failures;
}

std::string RunOp(RankEnv& env, const tpx_coll_args_v1_t& args, int* code_out) {
  tpx_error_t err;
  err.message[0] = '\0';  // the plugin fills it on failure; not 1 KiB of zeros per op
  tpx_request_t req = nullptr;
  int code = env.plugin->post(env.comm, &args, &req, &err);
  if (code == TPX_OK) {
    code = env.plugin->wait(req, -1, &err);
    env.plugin->request_free(req);
  }
  if (code_out != nullptr) *code_out = code;
  if (code == TPX_OK) return "";
  return std::to_string(code) + ": " + err.message;
}

tpx_coll_args_v1_t MakeArgs(tpx_coll_kind_t kind, tpx_dtype_t dtype) {
  tpx_coll_args_v1_t a{};
  a.struct_size = sizeof(a);
  a.kind = kind;
  a.dtype = dtype;
  a.op = TPX_REDUCE_SUM;
  return a;
}

}  // namespace tpx::ucx::testing
