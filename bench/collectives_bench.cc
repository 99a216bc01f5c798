// Collective benchmark for the UCX backend: starts --nproc rank processes on
// this host and prints one JSON line per (op, size) with the median time per
// operation and the bus bandwidth as nccl-tests defines it.
//
//   bazel run -c opt //bench:collectives -- --nproc=4
//   {"op":"all_reduce","backend":"ucx","world_size":4,"bytes":1048576,"time_us":...,"busbw_gbps":...}
//
// `bytes` is nccl-tests' size: the full f32 buffer (all_reduce, broadcast),
// the gathered output (all_gather), the scattered input (reduce_scatter) or
// one rank's send buffer (all_to_all).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/plugin_abi.h"
#include "comm_ucx/plugin_testutil.h"

namespace {

using tpx::ucx::testing::MakeArgs;
using tpx::ucx::testing::RankEnv;
using tpx::ucx::testing::RunOp;

// Runs `op` on buffers for `bytes`; returns "" or an error.
std::string RunOne(RankEnv& env, const std::string& op, int64_t bytes, std::vector<float>& send,
                   std::vector<float>& recv, std::vector<int64_t>& counts,
                   std::vector<int64_t>& displs) {
  const int n = env.world;
  const int64_t total = bytes / 4;
  if (op == "all_reduce") {
    auto a = MakeArgs(TPX_COLL_ALL_REDUCE, TPX_DTYPE_F32);
    a.count = total;
    a.send = send.data();
    a.recv = recv.data();
    return RunOp(env, a);
  }
  if (op == "broadcast") {
    auto a = MakeArgs(TPX_COLL_BROADCAST, TPX_DTYPE_F32);
    a.count = total;
    a.send = a.recv = recv.data();
    return RunOp(env, a);
  }
  const int64_t block = total / n;
  for (int i = 0; i < n; ++i) {
    counts[i] = block;
    displs[i] = i * block;
  }
  if (op == "all_gather") {
    auto a = MakeArgs(TPX_COLL_ALL_GATHER_V, TPX_DTYPE_F32);
    a.count = block;
    a.send = send.data();
    a.recv = recv.data();
    a.recv_counts = counts.data();
    a.recv_displs = displs.data();
    return RunOp(env, a);
  }
  if (op == "reduce_scatter") {
    auto a = MakeArgs(TPX_COLL_REDUCE_SCATTER_V, TPX_DTYPE_F32);
    a.count = block;
    a.send = send.data();
    a.recv = recv.data();
    a.send_counts = counts.data();
    a.send_displs = displs.data();
    return RunOp(env, a);
  }
  auto a = MakeArgs(TPX_COLL_ALL_TO_ALL_V, TPX_DTYPE_F32);
  a.send = send.data();
  a.recv = recv.data();
  a.send_counts = a.recv_counts = counts.data();
  a.send_displs = a.recv_displs = displs.data();
  return RunOp(env, a);
}

double BusBwFactor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;
}

std::string Bench(RankEnv& env, const std::vector<std::string>& ops,
                  const std::vector<int64_t>& sizes, int reps) {
  const int64_t max_bytes = *std::max_element(sizes.begin(), sizes.end());
  std::vector<float> send(max_bytes / 4, 1.0f), recv(max_bytes / 4, 0.0f);
  std::vector<int64_t> counts(env.world), displs(env.world);
  auto barrier = MakeArgs(TPX_COLL_BARRIER, TPX_DTYPE_F32);
  for (const std::string& op : ops) {
    for (int64_t bytes : sizes) {
      // Enough iterations per repetition to dwarf the clock and the barrier.
      const int iters = static_cast<int>(std::clamp<int64_t>((8 << 20) / bytes, 1, 500));
      std::vector<double> per_op_us;
      for (int rep = -1; rep < reps; ++rep) {  // rep -1 warms up
        if (std::string e = RunOp(env, barrier); !e.empty()) return e;
        auto start = std::chrono::steady_clock::now();
        for (int it = 0; it < iters; ++it) {
          if (std::string e = RunOne(env, op, bytes, send, recv, counts, displs); !e.empty()) {
            return op + ": " + e;
          }
        }
        std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
        if (rep >= 0) per_op_us.push_back(took.count() / iters);
      }
      std::sort(per_op_us.begin(), per_op_us.end());
      const double us = per_op_us[per_op_us.size() / 2];
      if (env.rank == 0) {
        const double busbw = bytes / (us * 1e3) * BusBwFactor(op, env.world);
        std::printf(
            "{\"op\":\"%s\",\"backend\":\"ucx\",\"world_size\":%d,\"bytes\":%lld,"
            "\"time_us\":%.2f,\"busbw_gbps\":%.3f}\n",
            op.c_str(), env.world, static_cast<long long>(bytes), us, busbw);
        std::fflush(stdout);
      }
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  int nproc = 2, reps = 7;
  std::vector<std::string> ops = {"all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                  "all_to_all"};
  std::vector<int64_t> sizes = {4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--nproc=", 0) == 0) {
      nproc = std::atoi(arg.c_str() + 8);
    } else if (arg.rfind("--reps=", 0) == 0) {
      reps = std::max(1, std::atoi(arg.c_str() + 7));
    } else if (arg.rfind("--ops=", 0) == 0) {
      ops.clear();
      std::string list = arg.substr(6);
      for (size_t pos = 0; pos <= list.size();) {
        size_t comma = list.find(',', pos);
        if (comma == std::string::npos) comma = list.size();
        ops.push_back(list.substr(pos, comma - pos));
        pos = comma + 1;
      }
    } else if (arg.rfind("--sizes=", 0) == 0) {
      sizes.clear();
      for (const char* p = arg.c_str() + 8; *p != '\0';) {
        char* end = nullptr;
        sizes.push_back(std::strtoll(p, &end, 10));
        p = (*end == ',') ? end + 1 : end;
        if (end == p && *p != '\0') break;
      }
    } else if (arg.rfind("--max_bytes=", 0) == 0) {
      const long long max_bytes = std::atoll(arg.c_str() + 12);
      sizes.erase(std::remove_if(sizes.begin(), sizes.end(),
                                 [&](int64_t s) { return s > max_bytes; }),
                  sizes.end());
    } else {
      std::fprintf(stderr,
                   "usage: collectives [--nproc=N] [--reps=R] [--ops=a,b] [--sizes=B,B] [--max_bytes=B]\n");
      return 2;
    }
  }
  if (nproc < 1 || sizes.empty()) {
    std::fprintf(stderr, "collectives: need --nproc >= 1 and at least one size\n");
    return 2;
  }
  tpx::ucx::testing::RunOptions options;
  options.run_timeout_ms = 600000;
  options.comm_timeout_ms = 60000;
  std::string failure = tpx::ucx::testing::RunRanks(
      nproc, [&](RankEnv& env) { return Bench(env, ops, sizes, reps); }, options);
  if (!failure.empty()) {
    std::fprintf(stderr, "collectives: %s", failure.c_str());
    return 1;
  }
  return 0;
}
