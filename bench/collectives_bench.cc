// Collective benchmark of the UCX backend beside Open MPI, measured in the
// same run: --rounds interleaved rounds (tpx, then Open MPI), each timing
// every (op, size) as the median of --reps repetitions; printed is the
// median over rounds, one JSON line per (impl, op, size):
//
//   bazel run -c opt //bench:collectives -- [--nproc=2] [--rounds=3] [--cross_host] [--dtype=bf16]
//   {"bench":"collectives","impl":"tpx","hosts":1,"world_size":2,"op":"all_reduce",
//    "bytes":1048576,"time_us":...,"busbw_gbps":...,"best_us":...,"vs_openmpi":1.12}
//   {"bench":"collectives","impl":"openmpi",...}
//
// tpx ranks are forked processes over the UCX plugin (shared memory on one
// host). The Open MPI peer is bench/peers/collectives_mpi.c, compiled with
// Debian's `mpicc` (libopenmpi-dev) when the bench starts and run with
// `mpirun --bind-to none` (tpx's ranks are not bound either); without MPI it
// prints a "skipped" line and tpx is measured alone. vs_openmpi is tpx's
// busbw over Open MPI's (> 1: tpx faster). best_us is the fastest
// repetition of all rounds: on a busy machine the medians carry the load,
// the best times show what each implementation can do.
//
// --cross_host puts the ranks on 2 emulated hosts (network namespaces on a
// bridge, testing/emulated_hosts.h; needs root, else a "skipped" line): tpx
// talks UCX over TCP between them, Open MPI its TCP BTL (`--mca pml ob1
// --mca btl tcp,self`), its daemon on the second host started through
// bench/peers/emulated_host_rsh.sh.
//
// Buffers: tpx's ranks take theirs from tpx's CPU allocator, the memory
// CPU tensors live in (from 128 KiB mostly on transparent huge pages,
// core/huge_pages.h; TPX_CPU_ALLOCATOR_HUGE_PAGES=0 turns that off), for
// each (op, size) of exactly the sizes the op reads and writes, as a
// program's tensors would be: a small collective gets no huge pages from a
// large neighbour. The
// Open MPI peer runs every size in one malloc'd send and receive buffer of
// the largest size (--openmpi_huge_pages: mapped as tpx's allocator maps
// large blocks, to show what huge pages alone give it). The "huge_pages"
// field of each line says which.
//
// The same loops also run through comm::Communicator, the public API that
// layers and models call (validation, numbering, Work, the plugin host),
// in ranks started by launch/local_job.h, in the same rounds (--api, one
// host; not all_to_all): "impl":"tpx_api" lines, with "api_overhead_us",
// their time minus the plugin ABI's, what tpx's host layer adds to each
// operation.
//
// On one host the same rounds also time the bare exchange tpx's small
// messages cannot do without (bench/shm_exchange_floor.h: a copy into
// shared memory, a flag, a read of the peers' copies; --floor, f32, two
// ranks or more, up to --floor_max_bytes): "impl":"shm_floor" lines, and "over_floor" on
// the tpx and tpx_api lines, their time over the floor's. What a host's
// caches take to move a few KiB between cores varies several-fold between
// machines; the floor tells what of a small collective's time is tpx's.
//
// --rewrite_send writes the send buffer before each op in every series (the
// Open MPI peer too), so that the data comes as a layer just produced it;
// without it the buffers are written once and read clean from the caches.
//
// `bytes` is nccl-tests' size: the full buffer (all_reduce, broadcast),
// the gathered output (all_gather), the scattered input (reduce_scatter) or
// one rank's send buffer (all_to_all); busbw as nccl-tests defines it.
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "bench/shm_exchange_floor.h"
#include "comm/communicator.h"
#include "comm/init.h"
#include "comm/launch_env.h"
#include "comm/plugin_abi.h"
#include "comm_ucx/plugin_testutil.h"
#include "core/allocator.h"
#include "launch/local_job.h"
#include "testing/emulated_hosts.h"

ABSL_FLAG(int, nproc, 2, "Ranks (with --cross_host: split evenly over the 2 hosts).");
ABSL_FLAG(int, reps, 7, "Timed repetitions of each (op, size) per round; a round keeps their median.");
ABSL_FLAG(int, rounds, 3, "Interleaved rounds (tpx, then Open MPI); printed: the median over rounds.");
ABSL_FLAG(std::string, ops, "all_reduce,all_gather,reduce_scatter",
          "Collectives; also broadcast and all_to_all (tpx only).");
ABSL_FLAG(std::string, sizes, "4096,16384,65536,262144,1048576,4194304,16777216,67108864",
          "Sizes in bytes (see the header for what `bytes` means per op).");
ABSL_FLAG(int64_t, max_bytes, 0, "Drops sizes above this (0: none).");
ABSL_FLAG(bool, openmpi, true, "Measure the Open MPI peer in the same rounds.");
ABSL_FLAG(bool, rewrite_send, false,
          "Write the part of the send buffer an op reads before each op, inside the timed loop, "
          "in every series: the data then arrives as a layer's output does, just written by the "
          "producing core, instead of clean in the caches (which flatters single-copy reads of a "
          "peer's buffer, tpx's and Open MPI's). Times include the write.");
ABSL_FLAG(bool, api, true,
          "Also measure through comm::Communicator (tpx's public API) in the same rounds "
          "(one host only).");
ABSL_FLAG(bool, floor, true,
          "Also time the bare exchange through shared memory (bench/shm_exchange_floor.h) for "
          "f32 all_reduce, all_gather and reduce_scatter up to --floor_max_bytes, in the same "
          "rounds (one host): \"impl\":\"shm_floor\" lines, and \"over_floor\" on tpx's.");
ABSL_FLAG(int64_t, floor_max_bytes, 65536, "Largest size of the shm_floor series.");
ABSL_FLAG(std::string, dtype, "f32",
          "Element type of tpx's buffers: f32, or bf16 (reduced in f32 and rounded once; Open MPI "
          "has no bf16, so the peer is skipped).");
ABSL_FLAG(bool, openmpi_huge_pages, false,
          "Give the Open MPI peer buffers on transparent huge pages, as tpx's CPU allocator "
          "maps blocks of 2 MiB and more (default: malloc's).");
ABSL_FLAG(bool, cross_host, false,
          "Ranks on 2 emulated hosts (network namespaces, TCP between them); needs root.");
ABSL_FLAG(std::string, mpicc, "/usr/bin/mpicc", "Open MPI's compiler wrapper for the peer.");
ABSL_FLAG(std::string, mpirun, "/usr/bin/mpirun", "Open MPI's launcher for the peer.");

namespace {

using tpx::ucx::testing::MakeArgs;
using tpx::ucx::testing::RankEnv;
using tpx::ucx::testing::RunOp;

constexpr const char* kMpiPeerSource = "bench/peers/collectives_mpi.c";
constexpr const char* kRshAgent = "bench/peers/emulated_host_rsh.sh";
constexpr int kHosts = 2;

bool MpiHasOp(const std::string& op) {
  return op == "all_reduce" || op == "all_gather" || op == "reduce_scatter";
}

// The element type of the measured collectives (--dtype), read once: the
// timed loop asks for it on every operation, and reading a string flag takes
// a lock and copies the string (about a tenth of a 4 KiB all-gather).
tpx_dtype_t BenchDType() {
  static const tpx_dtype_t dtype =
      absl::GetFlag(FLAGS_dtype) == "bf16" ? TPX_DTYPE_BF16 : TPX_DTYPE_F32;
  return dtype;
}
int64_t BenchElementSize() { return BenchDType() == TPX_DTYPE_BF16 ? 2 : 4; }

// Runs `op` on buffers for `bytes`; returns "" or an error.
std::string RunOne(RankEnv& env, const std::string& op, int64_t bytes, float* send, float* recv,
                   std::vector<int64_t>& counts, std::vector<int64_t>& displs) {
  const int n = env.world;
  const tpx_dtype_t dtype = BenchDType();
  const int64_t total = bytes / BenchElementSize();
  if (op == "all_reduce") {
    auto a = MakeArgs(TPX_COLL_ALL_REDUCE, dtype);
    a.count = total;
    a.send = send;
    a.recv = recv;
    return RunOp(env, a);
  }
  if (op == "broadcast") {
    auto a = MakeArgs(TPX_COLL_BROADCAST, dtype);
    a.count = total;
    a.send = a.recv = recv;
    return RunOp(env, a);
  }
  const int64_t block = total / n;
  for (int i = 0; i < n; ++i) {
    counts[i] = block;
    displs[i] = i * block;
  }
  if (op == "all_gather") {
    auto a = MakeArgs(TPX_COLL_ALL_GATHER_V, dtype);
    a.count = block;
    a.send = send;
    a.recv = recv;
    a.recv_counts = counts.data();
    a.recv_displs = displs.data();
    return RunOp(env, a);
  }
  if (op == "reduce_scatter") {
    auto a = MakeArgs(TPX_COLL_REDUCE_SCATTER_V, dtype);
    a.count = block;
    a.send = send;
    a.recv = recv;
    a.send_counts = counts.data();
    a.send_displs = displs.data();
    return RunOp(env, a);
  }
  auto a = MakeArgs(TPX_COLL_ALL_TO_ALL_V, dtype);
  a.send = send;
  a.recv = recv;
  a.send_counts = a.recv_counts = counts.data();
  a.send_displs = a.recv_displs = displs.data();
  return RunOp(env, a);
}

// As RunOne, through comm::Communicator: the calls a layer makes.
std::string RunOneThroughApi(tpx::comm::Communicator& c, const std::string& op, int64_t bytes,
                             float* send, float* recv) {
  const int n = c.size();
  const tpx::DType dtype = BenchDType() == TPX_DTYPE_BF16 ? tpx::DType::kBF16 : tpx::DType::kF32;
  const int64_t total = bytes / BenchElementSize();
  using tpx::comm::ReduceOp;
  absl::Status s;
  if (op == "all_reduce") {
    s = c.AllReduce(send, recv, total, dtype, ReduceOp::kSum).Wait();
  } else if (op == "broadcast") {
    s = c.Broadcast(recv, total, dtype, /*root=*/0).Wait();
  } else if (op == "all_gather") {
    s = c.AllGather(send, recv, total / n, dtype).Wait();
  } else if (op == "reduce_scatter") {
    s = c.ReduceScatter(send, recv, total / n, dtype, ReduceOp::kSum).Wait();
  } else {
    return op + " is not measured through the API";
  }
  return s.ok() ? "" : s.ToString();
}

// The bytes `op` of size `bytes` reads from its send buffer and writes to
// its receive buffer on each of `n` ranks.
std::pair<int64_t, int64_t> BufferBytes(const std::string& op, int64_t bytes, int n) {
  const int64_t block = bytes / BenchElementSize() / n * BenchElementSize();
  if (op == "all_gather") return {block, bytes};
  if (op == "reduce_scatter") return {bytes, block};
  if (op == "broadcast") return {0, bytes};
  return {bytes, bytes};
}

// A block from tpx's CPU allocator, filled with `value`, freed on scope exit.
class TensorMemory {
 public:
  TensorMemory(int64_t bytes, float value)
      : bytes_(std::max<int64_t>(bytes, 4)),
        data_(static_cast<float*>(tpx::GetCpuAllocator().Allocate(bytes_))) {
    if (data_ != nullptr) std::fill(data_, data_ + bytes_ / 4, value);
  }
  ~TensorMemory() { tpx::GetCpuAllocator().Deallocate(data_, bytes_); }
  TensorMemory(const TensorMemory&) = delete;
  TensorMemory& operator=(const TensorMemory&) = delete;
  float* data() const { return data_; }

 private:
  int64_t bytes_;
  float* data_;
};

double BusBwFactor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Writes the first `n` floats of `send` (a value that changes each time,
// small integers: sums stay exact), as bench/peers/collectives_mpi.c does.
void RewriteSend(float* send, int64_t n, int it) {
  std::fill(send, send + n, static_cast<float>(1 + (it & 7)));
}

// How a rank runs a barrier and one operation (op, bytes, send, recv):
// through the plugin's C ABI or through comm::Communicator; "" or an error.
struct Runner {
  int world;
  int rank;
  std::function<std::string()> barrier;
  std::function<std::string(const std::string&, int64_t, float*, float*)> one;
};

// The per-rank count and displacement arrays RunOne fills live in the
// runner, allocated once.
Runner PluginRunner(RankEnv& env) {
  return Runner{
      env.world, env.rank, [&env] { return RunOp(env, MakeArgs(TPX_COLL_BARRIER, TPX_DTYPE_F32)); },
      [&env, counts = std::vector<int64_t>(env.world), displs = std::vector<int64_t>(env.world)](
          const std::string& op, int64_t bytes, float* send, float* recv) mutable {
        return RunOne(env, op, bytes, send, recv, counts, displs);
      }};
}

Runner ApiRunner(tpx::comm::Communicator& c) {
  return Runner{c.size(), c.rank(),
                [&c]() -> std::string {
                  absl::Status s = c.Barrier().Wait();
                  return s.ok() ? "" : s.ToString();
                },
                [&c](const std::string& op, int64_t bytes, float* send, float* recv) {
                  return RunOneThroughApi(c, op, bytes, send, recv);
                }};
}

// Times every (op, size) on this rank; rank 0 writes "op bytes median_us
// best_us" lines to `results`. The same loop as bench/peers/collectives_mpi.c.
std::string MeasureRank(const Runner& run, const std::vector<std::string>& ops,
                        const std::vector<int64_t>& sizes, int reps, const std::string& results) {
  std::string lines;
  for (const std::string& op : ops) {
    for (int64_t bytes : sizes) {
      // Enough iterations per repetition to dwarf the clock and the barrier.
      const int iters = static_cast<int>(std::clamp<int64_t>((8 << 20) / bytes, 1, 500));
      const bool rewrite = absl::GetFlag(FLAGS_rewrite_send);
      const auto [send_bytes, recv_bytes] = BufferBytes(op, bytes, run.world);
      TensorMemory send(send_bytes, 1.0f), recv(recv_bytes, 0.0f);
      if (send.data() == nullptr || recv.data() == nullptr) return "out of memory";
      std::vector<double> per_op_us;
      for (int rep = -1; rep < reps; ++rep) {  // rep -1 warms up
        if (std::string e = run.barrier(); !e.empty()) return e;
        auto start = std::chrono::steady_clock::now();
        for (int it = 0; it < iters; ++it) {
          if (rewrite) RewriteSend(send.data(), send_bytes / 4, it);
          if (std::string e = run.one(op, bytes, send.data(), recv.data()); !e.empty()) {
            return op + ": " + e;
          }
        }
        std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
        if (rep >= 0) per_op_us.push_back(took.count() / iters);
      }
      absl::StrAppend(&lines, op, " ", bytes, " ", Median(per_op_us), " ",
                      *std::min_element(per_op_us.begin(), per_op_us.end()), "\n");
    }
  }
  if (run.rank != 0) return "";
  FILE* f = std::fopen(results.c_str(), "w");
  if (f == nullptr) return "cannot write " + results;
  const bool written = std::fputs(lines.c_str(), f) >= 0;
  return std::fclose(f) == 0 && written ? "" : "cannot write " + results;
}

// Per-round times of one (op, size), in microseconds.
struct Times {
  std::vector<double> medians;
  double best = 1e300;
};
using Samples = std::map<std::pair<std::string, int64_t>, Times>;

// Parses "op bytes median best" lines (tpx) or the peer's JSON lines into `out`;
// false if no line parsed.
bool ParseTimes(const std::string& text, Samples* out) {
  bool any = false;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    char op[64];
    long long bytes = 0;
    double us = 0, best = 0;
    const std::string l(line);
    if (std::sscanf(l.c_str(), "%63s %lld %lf %lf", op, &bytes, &us, &best) == 4 ||
        std::sscanf(l.c_str(), "{\"op\":\"%63[^\"]\",\"bytes\":%lld,\"time_us\":%lf,\"best_us\":%lf}",
                    op, &bytes, &us, &best) == 4) {
      Times& t = (*out)[{op, bytes}];
      t.medians.push_back(us);
      t.best = std::min(t.best, best);
      any = true;
    }
  }
  return any;
}

std::string ReadFile(const std::string& path) {
  std::string out;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    std::fclose(f);
  }
  return out;
}

// Runs a shell command; its stdout (and stderr), and whether it exited 0.
bool Shell(const std::string& command, std::string* output) {
  std::fflush(stdout);
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return false;
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) *output += buf;
  const int rc = pclose(p);
  return rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
}

std::string Quote(const std::string& s) { return "'" + s + "'"; }

struct Setup {
  std::vector<std::string> ops;
  std::vector<int64_t> sizes;
  int nproc;
  int reps;
  std::string dir;  // scratch directory of this run
  tpx::testing::EmulatedHosts* hosts = nullptr;  // cross-host mode
};

// One round of tpx measurements; "" or why it failed.
std::string RunTpxRound(const Setup& s, Samples* out) {
  const std::string results = s.dir + "/tpx_results";
  tpx::ucx::testing::RunOptions options;
  options.run_timeout_ms = 600000;
  options.comm_timeout_ms = 60000;
  if (s.hosts != nullptr) {
    const int per_host = s.nproc / kHosts;
    options.env.clear();  // Enter() picks the host's device
    options.enter_rank_host = [&s, per_host](int rank) {
      absl::Status entered = s.hosts->Enter(rank / per_host);
      return entered.ok() ? std::string() : entered.ToString();
    };
  }
  std::string failure = tpx::ucx::testing::RunRanks(
      s.nproc,
      [&](RankEnv& env) { return MeasureRank(PluginRunner(env), s.ops, s.sizes, s.reps, results); },
      options);
  if (!failure.empty()) return failure;
  if (!ParseTimes(ReadFile(results), out)) return "rank 0 reported no times";
  return "";
}

bool ApiHasOp(const std::string& op) { return op != "all_to_all"; }

// One round through comm::Communicator in ranks that launch/local_job.h
// starts (the environment comm::Init reads); "" or why it failed.
std::string RunApiRound(const Setup& s, Samples* out) {
  const std::string results = s.dir + "/api_results";
  std::vector<std::string> ops;
  for (const std::string& op : s.ops) {
    if (ApiHasOp(op)) ops.push_back(op);
  }
  if (ops.empty()) return "";
  const int code = tpx::launch::RunLocalRanks(s.nproc, [&]() -> int {
    absl::StatusOr<std::unique_ptr<tpx::comm::Communicator>> world = tpx::comm::Init();
    std::string e = world.ok() ? MeasureRank(ApiRunner(**world), ops, s.sizes, s.reps, results)
                               : world.status().ToString();
    if (e.empty()) return 0;
    std::fprintf(stderr, "collectives: api rank: %s\n", e.c_str());
    return 1;
  });
  if (code != 0) return absl::StrCat("a rank exited with ", code);
  if (!ParseTimes(ReadFile(results), out)) return "rank 0 reported no times";
  return "";
}

// One round of the shm_floor series (f32, two ranks or more: the ops and
// sizes up to --floor_max_bytes that ShmExchangeFloor covers) in ranks that
// launch/local_job.h starts; "" or why it failed.
std::string RunFloorRound(const Setup& s, Samples* out) {
  if (BenchDType() != TPX_DTYPE_F32 || s.nproc < 2) return "";
  // Slots no larger than the largest size asks for.
  const int64_t max_bytes = std::min(absl::GetFlag(FLAGS_floor_max_bytes),
                                     *std::max_element(s.sizes.begin(), s.sizes.end()));
  // A fresh mapping each round: its flags count this round's operations.
  auto floor = tpx::bench::ShmExchangeFloor::Create(s.nproc, max_bytes);
  if (!floor.ok()) return floor.status().ToString();
  std::vector<std::pair<std::string, int64_t>> cases;
  for (const std::string& op : s.ops) {
    for (int64_t bytes : s.sizes) {
      if (bytes <= max_bytes && (*floor)->Covers(op, bytes)) cases.emplace_back(op, bytes);
    }
  }
  if (cases.empty()) return "";
  const std::string results = s.dir + "/floor_results";
  const int code = tpx::launch::RunLocalRanks(s.nproc, [&]() -> int {
    absl::StatusOr<tpx::comm::LaunchEnv> place = tpx::comm::ReadLaunchEnv();
    if (!place.ok()) {
      std::fprintf(stderr, "collectives: floor rank: %s\n", place.status().ToString().c_str());
      return 1;
    }
    const int rank = place->rank;
    tpx::bench::ShmExchangeFloor& f = **floor;
    const Runner runner{s.nproc, rank, [&f, rank] { return f.Barrier(rank); },
                        [&f, rank](const std::string& op, int64_t bytes, float* send,
                                   float* recv) { return f.Run(rank, op, bytes, send, recv); }};
    std::string e;
    for (const auto& [op, bytes] : cases) {
      e = MeasureRank(runner, {op}, {bytes}, s.reps, results + "." + op + std::to_string(bytes));
      if (!e.empty()) break;
    }
    if (e.empty()) return 0;
    std::fprintf(stderr, "collectives: floor rank %d: %s\n", rank, e.c_str());
    return 1;
  });
  if (code != 0) return "a floor rank failed (exit " + std::to_string(code) + ")";
  for (const auto& [op, bytes] : cases) {
    if (!ParseTimes(ReadFile(results + "." + op + std::to_string(bytes)), out)) {
      return "rank 0 reported no floor time for " + op;
    }
  }
  return "";
}

// Compiles the Open MPI peer into s.dir; its path, or "" with `why` set.
std::string BuildMpiPeer(const Setup& s, std::string* why) {
  if (access(kMpiPeerSource, R_OK) != 0) {
    *why = std::string(kMpiPeerSource) + " not found (run from the runfiles, e.g. bazel run)";
    return "";
  }
  const std::string mpicc = absl::GetFlag(FLAGS_mpicc);
  if (access(mpicc.c_str(), X_OK) != 0 || access(absl::GetFlag(FLAGS_mpirun).c_str(), X_OK) != 0) {
    *why = "no " + mpicc + " / " + absl::GetFlag(FLAGS_mpirun) +
           " (Debian: openmpi-bin libopenmpi-dev)";
    return "";
  }
  const std::string binary = s.dir + "/collectives_mpi";
  std::string output;
  if (!Shell(absl::StrCat(Quote(mpicc), " -O2 -o ", Quote(binary), " ", kMpiPeerSource),
             &output)) {
    *why = "mpicc failed: " + output.substr(0, 300);
    return "";
  }
  return binary;
}

// One round of Open MPI measurements; "" or why it failed.
std::string RunMpiRound(const Setup& s, const std::string& binary, Samples* out) {
  std::vector<std::string> mpi_ops;
  for (const std::string& op : s.ops) {
    if (MpiHasOp(op)) mpi_ops.push_back(op);
  }
  if (mpi_ops.empty()) return "";
  std::vector<std::string> argv = {absl::GetFlag(FLAGS_mpirun), "--allow-run-as-root",
                                   "-np", std::to_string(s.nproc), "--bind-to", "none"};
  std::vector<std::string> peer_args = {
      binary, "--ops=" + absl::StrJoin(mpi_ops, ","), "--sizes=" + absl::StrJoin(s.sizes, ","),
      "--reps=" + std::to_string(s.reps)};
  if (absl::GetFlag(FLAGS_openmpi_huge_pages)) peer_args.push_back("--huge_pages");
  if (absl::GetFlag(FLAGS_rewrite_send)) peer_args.push_back("--rewrite_send");
  std::string output;
  if (s.hosts == nullptr) {
    argv.insert(argv.end(), peer_args.begin(), peer_args.end());
    std::string command;
    for (const std::string& a : argv) absl::StrAppend(&command, Quote(a), " ");
    if (!Shell(command, &output)) return "mpirun failed: " + output.substr(0, 600);
  } else {
    // mpirun on host 0; the daemon on host 1 comes through the rsh agent.
    const int per_host = s.nproc / kHosts;
    std::vector<std::string> host_list, agent_map;
    for (int h = 0; h < kHosts; ++h) {
      host_list.push_back(absl::StrCat(s.hosts->address(h), ":", per_host));
      const std::string netns = s.hosts->netns_path(h);
      agent_map.push_back(absl::StrCat(s.hosts->address(h), "=",
                                       netns.substr(netns.rfind('/') + 1), "=",
                                       s.hosts->hostname(h)));
    }
    char cwd[4096];
    if (getcwd(cwd, sizeof(cwd)) == nullptr) return "getcwd failed";
    const std::vector<std::string> mca = {
        "--host", absl::StrJoin(host_list, ","),
        "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
        "--mca", "btl_tcp_if_include", tpx::testing::EmulatedHosts::kDevice,
        "--mca", "oob_tcp_if_include", tpx::testing::EmulatedHosts::kDevice,
        "--mca", "plm_rsh_agent", absl::StrCat(cwd, "/", kRshAgent)};
    argv.insert(argv.end(), mca.begin(), mca.end());
    argv.insert(argv.end(), peer_args.begin(), peer_args.end());
    const std::string log = s.dir + "/mpi_cross_host.log";
    unlink(log.c_str());
    auto pid = s.hosts->Spawn(
        0, argv, log,
        {"TPX_EMULATED_HOSTS=" + absl::StrJoin(agent_map, " "), "OMPI_ALLOW_RUN_AS_ROOT=1",
         "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"});
    if (!pid.ok()) return pid.status().ToString();
    auto rc = tpx::testing::WaitForExit(*pid, absl::Seconds(600));
    output = ReadFile(log);
    if (!rc.ok() || *rc != 0) {
      return absl::StrCat("mpirun across hosts failed (",
                          rc.ok() ? absl::StrCat("exit ", *rc) : rc.status().ToString(),
                          "): ", output.substr(0, 600));
    }
  }
  if (!ParseTimes(output, out)) return "the peer printed no times: " + output.substr(0, 600);
  const size_t seen = output.find("{\"hosts_seen\":");
  const int want_hosts = s.hosts != nullptr ? kHosts : 1;
  if (seen == std::string::npos || std::atoi(output.c_str() + seen + 14) != want_hosts) {
    return absl::StrCat("the Open MPI ranks did not run on ", want_hosts, " host(s): ",
                        output.substr(0, 600));
  }
  return "";
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n' || c == '\t') {
      out += ' ';
    } else if (static_cast<unsigned char>(c) >= 0x20) {
      out += c;
    }
  }
  return out;
}

void PrintSkipped(const std::string& impl, int hosts, const std::string& why) {
  std::printf("{\"bench\":\"collectives\",\"impl\":\"%s\",\"hosts\":%d,\"skipped\":\"%s\"}\n",
              impl.c_str(), hosts, JsonEscape(why).c_str());
  std::fflush(stdout);
}

bool ParseList(const std::string& flag, const std::string& text, std::vector<int64_t>* out) {
  for (absl::string_view v : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t b = 0;
    if (!absl::SimpleAtoi(v, &b) || b < 4) {
      std::fprintf(stderr, "collectives: bad %s entry '%s' (bytes >= 4)\n", flag.c_str(),
                   std::string(v).c_str());
      return false;
    }
    out->push_back(b);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  Setup s;
  s.nproc = absl::GetFlag(FLAGS_nproc);
  s.reps = std::max(1, absl::GetFlag(FLAGS_reps));
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  const bool cross_host = absl::GetFlag(FLAGS_cross_host);
  for (absl::string_view op : absl::StrSplit(absl::GetFlag(FLAGS_ops), ',', absl::SkipEmpty())) {
    const std::string o(op);
    if (!MpiHasOp(o) && o != "broadcast" && o != "all_to_all") {
      std::fprintf(stderr, "collectives: unknown --ops entry '%s'\n", o.c_str());
      return 2;
    }
    s.ops.push_back(o);
  }
  if (!ParseList("--sizes", absl::GetFlag(FLAGS_sizes), &s.sizes)) return 2;
  if (const int64_t max = absl::GetFlag(FLAGS_max_bytes); max > 0) {
    s.sizes.erase(std::remove_if(s.sizes.begin(), s.sizes.end(), [&](int64_t b) { return b > max; }),
                  s.sizes.end());
  }
  if (s.nproc < 1 || s.sizes.empty() || s.ops.empty()) {
    std::fprintf(stderr, "collectives: need --nproc >= 1, at least one op and one size\n");
    return 2;
  }
  if (cross_host && (s.nproc < kHosts || s.nproc % kHosts != 0)) {
    std::fprintf(stderr, "collectives: --cross_host needs --nproc a multiple of %d\n", kHosts);
    return 2;
  }
  const int num_hosts = cross_host ? kHosts : 1;
  std::unique_ptr<tpx::testing::EmulatedHosts> hosts;
  if (cross_host) {
    auto created = tpx::testing::EmulatedHosts::Create(kHosts);
    if (!created.ok()) {
      PrintSkipped("tpx", num_hosts,
                   "cannot emulate hosts with network namespaces (needs root): " +
                       created.status().ToString());
      return 0;
    }
    hosts = std::move(*created);
    s.hosts = hosts.get();
  }
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/tpx_collectives_XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) {
    std::fprintf(stderr, "collectives: cannot create a scratch directory\n");
    return 1;
  }
  s.dir = dir;

  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (dtype != "f32" && dtype != "bf16") {
    std::fprintf(stderr, "collectives: --dtype must be f32 or bf16, got '%s'\n", dtype.c_str());
    return 2;
  }
  std::string mpi_binary, mpi_skipped;
  if (dtype != "f32") {
    mpi_skipped = "Open MPI has no bf16 reductions";
  } else if (absl::GetFlag(FLAGS_openmpi)) {
    mpi_binary = BuildMpiPeer(s, &mpi_skipped);
  } else {
    mpi_skipped = "--noopenmpi";
  }
  bool api = absl::GetFlag(FLAGS_api);
  if (api && cross_host) {
    PrintSkipped("tpx_api", num_hosts, "the API series runs on one host");
    api = false;
  }
  const bool floor = absl::GetFlag(FLAGS_floor) && !cross_host;
  Samples tpx_times, mpi_times, api_times, floor_times;
  for (int round = 0; round < rounds; ++round) {
    if (std::string e = RunTpxRound(s, &tpx_times); !e.empty()) {
      std::fprintf(stderr, "collectives: tpx round %d: %s\n", round, e.c_str());
      return 1;
    }
    if (api) {
      if (std::string e = RunApiRound(s, &api_times); !e.empty()) {
        std::fprintf(stderr, "collectives: tpx_api round %d: %s\n", round, e.c_str());
        return 1;
      }
    }
    if (floor) {
      if (std::string e = RunFloorRound(s, &floor_times); !e.empty()) {
        std::fprintf(stderr, "collectives: shm_floor round %d: %s\n", round, e.c_str());
        return 1;
      }
    }
    if (mpi_binary.empty()) continue;
    if (std::string e = RunMpiRound(s, mpi_binary, &mpi_times); !e.empty()) {
      mpi_skipped = e;  // measured so far is dropped: rounds would not be comparable
      mpi_binary.clear();
      mpi_times.clear();
    }
  }
  if (!mpi_skipped.empty()) PrintSkipped("openmpi", num_hosts, mpi_skipped);
  for (const std::string& op : s.ops) {
    for (int64_t bytes : s.sizes) {
      const auto key = std::make_pair(op, bytes);
      const double factor = BusBwFactor(op, s.nproc);
      auto line = [&](const char* impl, const Times& t, bool huge_pages) {
        const double us = Median(t.medians);
        return absl::StrFormat(
            "{\"bench\":\"collectives\",\"impl\":\"%s\",\"hosts\":%d,\"world_size\":%d,"
            "\"op\":\"%s\",\"dtype\":\"%s\",\"bytes\":%d,\"time_us\":%.2f,\"busbw_gbps\":%.3f,"
            "\"best_us\":%.2f,\"rounds\":%d,\"huge_pages\":%s,\"rewrite_send\":%s",
            impl, num_hosts, s.nproc, op, dtype, bytes, us, bytes / (us * 1e3) * factor, t.best,
            rounds, huge_pages ? "true" : "false",
            absl::GetFlag(FLAGS_rewrite_send) ? "true" : "false");
      };
      const Times& tpx = tpx_times[key];
      const bool huge_pages = tpx::GetCpuAllocator().huge_pages();
      std::string tpx_line = line("tpx", tpx, huge_pages);
      auto mpi = mpi_times.find(key);
      auto vs_openmpi = [&](const Times& t) {
        return mpi == mpi_times.end()
                   ? std::string()
                   : absl::StrFormat(",\"vs_openmpi\":%.2f",
                                     Median(mpi->second.medians) / Median(t.medians));
      };
      auto floor_line = floor_times.find(key);
      auto over_floor = [&](const Times& t) {
        return floor_line == floor_times.end()
                   ? std::string()
                   : absl::StrFormat(",\"over_floor\":%.2f",
                                     Median(t.medians) / Median(floor_line->second.medians));
      };
      std::printf("%s%s%s}\n", tpx_line.c_str(), vs_openmpi(tpx).c_str(), over_floor(tpx).c_str());
      if (mpi != mpi_times.end()) {
        std::printf("%s}\n",
                    line("openmpi", mpi->second, absl::GetFlag(FLAGS_openmpi_huge_pages)).c_str());
      }
      if (auto a = api_times.find(key); a != api_times.end()) {
        std::printf("%s%s%s,\"api_overhead_us\":%.2f}\n",
                    line("tpx_api", a->second, huge_pages).c_str(), vs_openmpi(a->second).c_str(),
                    over_floor(a->second).c_str(), Median(a->second.medians) - Median(tpx.medians));
      }
      if (floor_line != floor_times.end()) {
        std::printf("%s}\n", line("shm_floor", floor_line->second, huge_pages).c_str());
      }
      std::fflush(stdout);
    }
  }
  return 0;
}
