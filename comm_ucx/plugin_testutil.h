// Test helpers that drive the UCX plugin directly through its C ABI: load the
// plugin, fork N rank processes that rendezvous through a FileStore, run a
// body on each and collect the outcome.
//
//   std::string failure = RunRanks(3, [](RankEnv& env) -> std::string {
//     std::vector<float> x(8, env.rank);
//     return RunOp(env, AllReduceArgs(x.data(), x.data(), 8, TPX_DTYPE_F32, TPX_REDUCE_SUM));
//   });
//   EXPECT_EQ(failure, "");
#ifndef TPX_COMM_UCX_PLUGIN_TESTUTIL_H_
#define TPX_COMM_UCX_PLUGIN_TESTUTIL_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "comm/plugin_abi.h"

namespace tpx::ucx::testing {

// The plugin's path: $TPX_UCX_PLUGIN, else the runfiles of this binary.
std::string PluginPath();
// dlopens the plugin and checks its header; null with `error` set on failure.
const tpx_comm_plugin_v1_t* LoadPlugin(std::string* error);

struct RankEnv {
  int rank;
  int world;
  const tpx_comm_plugin_v1_t* plugin;
  tpx_comm_t comm;
  const tpx_comm_config_v1_t* config;
};

struct RunOptions {
  int64_t comm_timeout_ms = 20000;
  // Ranks allowed to die by a signal (failure tests).
  std::set<int> may_die;
  // Whole-run limit; ranks still running then are killed and reported.
  int64_t run_timeout_ms = 120000;
  // Environment variables set in each rank before the plugin loads. UCX's
  // TCP transport is kept on the loopback device: ranks here share a host.
  std::vector<std::pair<std::string, std::string>> env = {{"UCX_NET_DEVICES", "lo"}};
  // Runs first in each rank process, after `env` is set (e.g. to move it onto
  // an emulated host, testing/emulated_hosts.h); "" or why it failed.
  std::function<std::string(int rank)> enter_rank_host;
};

// Forks `world` processes. Each loads the plugin, creates a communicator
// and runs `body`, which returns "" on success or a description of what went
// wrong. Returns "" if every rank succeeded, else one line per failed rank.
std::string RunRanks(int world, const std::function<std::string(RankEnv&)>& body,
                     const RunOptions& options = RunOptions());

// Posts `args` and waits for it; "" on success, else "<code>: <message>".
// `code_out` (optional) receives the status code.
std::string RunOp(RankEnv& env, const tpx_coll_args_v1_t& args, int* code_out = nullptr);

// Argument builders (struct_size filled in).
tpx_coll_args_v1_t MakeArgs(tpx_coll_kind_t kind, tpx_dtype_t dtype);

}  // namespace tpx::ucx::testing

#endif  // TPX_COMM_UCX_PLUGIN_TESTUTIL_H_
