// tpxrun: starts N local ranks of a program with the environment comm::Init
// reads, hosts their rendezvous store, prefixes every output line with
// "[rank r] ", stops everything on the first failure and forwards
// SIGINT/SIGTERM.
//
//   tpxrun --nproc 4 [--master_port 29500] [--master_addr 127.0.0.1]
//          [--store_on_rank0] -- ./my_trainer --tpx_comm_backend=ucx
//
// Several nodes (torchrun's options): one tpxrun per node, the same
// --nnodes/--nproc/--master_addr/--master_port everywhere and a distinct
// --node_rank. Node 0 hosts the store on master_addr:master_port (the
// address given, not every interface); node k's local rank r is global rank
// k * nproc + r; every node needs the same TPX_STORE_SECRET in its
// environment. Ranks start only once every node arrived; a node missing
// after --rdzv_timeout seconds (default 300) is an error naming the missing
// node ranks. The nodes share the job's state through the store
// (launch/node_group.h): when a rank fails on one node, every other node
// stops its ranks within about a second, saying "the job failed on node k:
// rank r exited with code c". Node 0 keeps the store up until every node
// has left (at most 60 s after its own ranks finished, 15 s after a failure).
//
//   host-a$ tpxrun --nnodes 2 --node_rank 0 --nproc 4 --master_addr 10.0.0.1
//                  --master_port 29500 -- ./my_trainer
//   host-b$ tpxrun --nnodes 2 --node_rank 1 --nproc 4 --master_addr 10.0.0.1
//                  --master_port 29500 -- ./my_trainer
//
// Exit status: 0 when every rank exits 0; otherwise that of the first rank
// to fail (128 + signal number for a rank killed by a signal; across nodes,
// the first failure the store recorded), or 128 + signal number when tpxrun
// got SIGINT/SIGTERM.
//
// Each rank runs in its own process group (signals reach its children too)
// and dies with tpxrun, even when tpxrun is killed with SIGKILL (parent-death
// signal). The store admits only the job's ranks: tpxrun passes them a
// random TPX_STORE_SECRET (or the one in its own environment).
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "comm/launch_env.h"
#include "comm/store/tcp_store.h"
#include "launch/job_store.h"
#include "launch/node_group.h"
#include "launch/rank_processes.h"

namespace {

struct Args {
  int nproc = 0;
  int master_port = 0;
  std::string master_addr = "127.0.0.1";
  bool store_on_rank0 = false;
  int nnodes = 1;
  int node_rank = 0;
  int rdzv_timeout_s = 300;
  std::vector<std::string> command;
};

void Usage() {
  std::fprintf(stderr,
               "usage: tpxrun --nproc N [--master_port P] [--master_addr HOST] "
               "[--store_on_rank0] [--nnodes N --node_rank K --master_port P "
               "[--rdzv_timeout S]] -- program [args...]\n");
}

bool ParseArgs(int argc, char** argv, Args* args) {
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    auto value = [&](const std::string& name, std::string* out) {
      if (a == name && i + 1 < argc) {
        *out = argv[++i];
        return true;
      }
      if (a.rfind(name + "=", 0) == 0) {
        *out = a.substr(name.size() + 1);
        return true;
      }
      return false;
    };
    std::string v;
    if (value("--nproc", &v) || value("--nproc_per_node", &v)) {
      if (!absl::SimpleAtoi(v, &args->nproc) || args->nproc < 1) {
        std::fprintf(stderr, "tpxrun: --nproc must be a positive integer, got '%s'\n", v.c_str());
        return false;
      }
    } else if (value("--master_port", &v)) {
      if (!absl::SimpleAtoi(v, &args->master_port) || args->master_port < 0 ||
          args->master_port > 65535) {
        std::fprintf(stderr, "tpxrun: --master_port must be in [0, 65535], got '%s'\n",
                     v.c_str());
        return false;
      }
    } else if (value("--master_addr", &v)) {
      args->master_addr = v;
    } else if (value("--nnodes", &v)) {
      if (!absl::SimpleAtoi(v, &args->nnodes) || args->nnodes < 1) {
        std::fprintf(stderr, "tpxrun: --nnodes must be a positive integer, got '%s'\n", v.c_str());
        return false;
      }
    } else if (value("--node_rank", &v)) {
      if (!absl::SimpleAtoi(v, &args->node_rank) || args->node_rank < 0) {
        std::fprintf(stderr, "tpxrun: --node_rank must be a non-negative integer, got '%s'\n",
                     v.c_str());
        return false;
      }
    } else if (value("--rdzv_timeout", &v)) {
      if (!absl::SimpleAtoi(v, &args->rdzv_timeout_s) || args->rdzv_timeout_s < 1) {
        std::fprintf(stderr, "tpxrun: --rdzv_timeout must be a positive number of seconds, got '%s'\n",
                     v.c_str());
        return false;
      }
    } else if (a == "--store_on_rank0") {
      args->store_on_rank0 = true;
    } else if (a == "-h" || a == "--help") {
      return false;
    } else {
      std::fprintf(stderr, "tpxrun: unknown option '%s'\n", a.c_str());
      return false;
    }
  }
  for (; i < argc; ++i) args->command.push_back(argv[i]);
  if (args->nproc < 1 || args->command.empty()) {
    std::fprintf(stderr, "tpxrun: need --nproc and a program after --\n");
    return false;
  }
  if (args->node_rank >= args->nnodes) {
    std::fprintf(stderr, "tpxrun: --node_rank %d must be below --nnodes %d\n", args->node_rank,
                 args->nnodes);
    return false;
  }
  if (args->nnodes > 1 && (args->master_port == 0 || args->store_on_rank0)) {
    std::fprintf(stderr, "tpxrun: --nnodes %d needs --master_port (every node must know it) and "
                 "does not support --store_on_rank0\n", args->nnodes);
    return false;
  }
  return true;
}

// Picks a free port for a store rank 0 will host (a small race is accepted:
// the port could be taken between now and rank 0's bind).
int FreePort(const std::string& host) {
  auto server = tpx::comm::TcpStoreServer::Listen(host, 0);
  return server.ok() ? (*server)->port() : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) {
    Usage();
    return 2;
  }
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "tpxrun: %s\n", message.c_str());
    return 1;
  };

  if (args.nnodes > 1 && std::getenv("TPX_STORE_SECRET") == nullptr) {
    // A secret made up here would differ on every node.
    std::fprintf(stderr, "tpxrun: --nnodes %d needs TPX_STORE_SECRET, the same on every node "
                 "(e.g. from `openssl rand -hex 16`)\n", args.nnodes);
    return 2;
  }
  absl::StatusOr<std::string> secret = tpx::launch::JobStoreSecret();
  if (!secret.ok()) return fail(std::string(secret.status().message()));
  std::unique_ptr<tpx::comm::TcpStoreServer> server;
  int port = args.master_port;
  if (args.store_on_rank0) {
    if (port == 0) port = FreePort(args.master_addr);
  } else if (args.node_rank == 0) {  // other nodes use node 0's store
    auto listening = tpx::launch::ListenForJob(args.master_addr, port, *secret);
    if (!listening.ok()) return fail(std::string(listening.status().message()));
    server = std::move(*listening);
    port = server->port();
    // Serving before the ranks fork: other nodes join through it first.
    if (absl::Status s = server->Start(); !s.ok()) return fail(std::string(s.message()));
  }

  std::unique_ptr<tpx::launch::NodeGroup> nodes;
  if (args.nnodes > 1) {
    const absl::Duration timeout = absl::Seconds(args.rdzv_timeout_s);
    tpx::launch::NodeGroup::Options options;
    options.log_prefix = "tpxrun: ";
    auto store = tpx::comm::TcpStore::Connect(args.master_addr, port, timeout, *secret);
    auto joined = store.ok() ? tpx::launch::NodeGroup::Join(std::move(*store), args.nnodes,
                                                            args.node_rank, timeout, options)
                             : store.status();
    if (!joined.ok()) {
      return fail(absl::StrCat("node ", args.node_rank, " of ", args.nnodes, ": ",
                               joined.status().message()));
    }
    nodes = std::move(*joined);
  }

  ::signal(SIGPIPE, SIG_IGN);  // a closed terminal must not kill the launcher
  tpx::launch::RankProcesses ranks({.own_process_group = true, .prefix_output = true});
  tpx::comm::LaunchEnv place;
  place.world_size = args.nproc * args.nnodes;
  place.local_world_size = args.nproc;
  place.store_host = args.master_addr;
  place.store_port = port;
  place.store_hosted_by_launcher = server != nullptr || args.nnodes > 1;
  place.store_secret = *secret;
  for (int r = 0; r < args.nproc; ++r) {
    place.rank = args.nproc * args.node_rank + r;
    place.local_rank = r;
    tpx::launch::RankEnv env = tpx::launch::RankEnv::For(place);
    // All ranks are local: keep UCX off the machine's network interfaces
    // unless the user chose devices.
    if (args.nnodes == 1) env.defaults = {{"UCX_NET_DEVICES", "lo"}};
    if (absl::Status s = ranks.Exec(place.rank, args.command, env); !s.ok()) {
      // The ranks started so far die with `ranks`; other nodes must stop theirs.
      const tpx::launch::JobStop why{1, std::string(s.message())};
      if (nodes != nullptr) {
        nodes->ReportStop(why);
        nodes->Leave(why);
      }
      return fail(why.reason);
    }
  }

  tpx::launch::SuperviseOptions supervise;
  supervise.forward_signals = true;
  supervise.log_prefix = "tpxrun: ";
  if (nodes != nullptr) {
    nodes->StartWatching();
    supervise.should_stop = [&] { return nodes->StopRequest(); };
    supervise.on_stop = [&](const tpx::launch::JobStop& why) { nodes->ReportStop(why); };
  }
  tpx::launch::JobResult result = ranks.Supervise(supervise);
  if (nodes == nullptr) return result.exit_code();
  std::optional<tpx::launch::JobStop> job = nodes->Leave(result.failure);
  return job.has_value() ? job->exit_code : 0;
}
