// Megatron MLP block (ColumnParallelLinear h->4h, fused bias + GeLU,
// RowParallelLinear 4h->h with bias) forward + backward step time at TP=1
// (one process, 2 GEMM threads) and TP=2 (two forked ranks over UCX, one
// GEMM thread each), with and without sequence parallelism, in f32 and/or
// bf16 mixed precision (bf16 parameters and activations, f32 main_grad
// weight gradients), beside the same block in eager PyTorch
// (bench/peers/tp_mlp_pytorch.py, run when python3 can import torch). One
// JSON line per configuration:
//   {"bench":"tp_mlp","impl":"tpx","tp":2,"sequence_parallel":false,"dtype":"f32",
//    "threads_per_rank":1,"step_ms":...,"gemm_only_ms":...,"step_over_gemm":...,
//    "forward_ms":...,"gemm_only_forward_ms":...}
//   {"bench":"tp_mlp","impl":"pytorch","tp":1,"dtype":"f32","omp_threads":1,
//    "blas_threads":2,"step_ms":...}
// step_ms: median over timed steps, max over ranks; gemm_only_ms: the same
// GEMMs (same shapes, dtypes and threads) without communication, GeLU, bias
// or autograd; forward_ms and gemm_only_forward_ms: the forward's share of
// each (fc2's forward all-reduce is in forward_ms). A line per TP>1 configuration ("tp_mlp_overlap") gives the
// fc1 backward timeline: the dgrad collective's post -> wait interval, the
// wgrad GEMM interval, whether the collective had completed when the GEMM
// ended, and the collective's time alone. Last, one "tp_mlp_vs" line per tpx
// configuration compares with PyTorch's best thread setting at the same TP
// size (medians over --rounds): tpx's speedup over PyTorch f32 and over
// PyTorch in the same dtype. PyTorch runs without sequence parallelism (gloo
// in PyTorch 1.13 has no reduce-scatter), so SP lines compare with non-SP.
//
//   bazel run -c opt //bench:tp_mlp -- [--steps=6] [--tokens=2048] [--hidden=1024] [--only_tp=2]
//       [--dtype=f32,bf16] [--rounds=3] [--pytorch_threads=1:2,2:1,2:2] [--python=/usr/bin/python3]
//       [--pytorch_openblas_core=auto|env]
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/pytorch_peer.h"
#include "core/autograd/engine.h"
#include "core/autograd/ops.h"
#include "core/gemm.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "layers/parallel_linear.h"
#include "parallel/shard_comm.h"
#include "testing/multiprocess.h"

ABSL_FLAG(int, steps, 6, "timed steps per configuration (after 2 warm-up steps)");
ABSL_FLAG(int64_t, tokens, 2048, "tokens per step (seq 512 x batch 4)");
ABSL_FLAG(int64_t, hidden, 1024, "hidden size h (ffn = 4h)");
ABSL_FLAG(int, only_tp, 0, "run only the configurations with this TP size (0: all)");
ABSL_FLAG(std::string, dtype, "f32",
          "f32, bf16 (mixed precision: bf16 parameters and activations, f32 main_grad), or "
          "both as a list (f32,bf16)");
ABSL_FLAG(int, rounds, 1,
          "rounds of all measurements, interleaved; tp_mlp_vs lines take medians over them");
ABSL_FLAG(std::string, pytorch_threads, "1:2,2:1,2:2",
          "PyTorch peer thread settings at TP=1, omp:blas each (the best is compared); at TP=2 "
          "each process gets 1:1; empty = no PyTorch peer");

namespace tpx {
namespace {

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
void Die(const absl::Status& s) {
  std::fprintf(stderr, "tp_mlp: %s\n", std::string(s.message()).c_str());
  std::exit(1);
}
#define BENCH_OK(expr)                 \
  do {                                 \
    absl::Status _s = (expr);          \
    if (!_s.ok()) Die(_s);             \
  } while (0)
template <typename T>
T Get(absl::StatusOr<T> v) {
  if (!v.ok()) Die(v.status());
  return *std::move(v);
}

Tensor Random(const Shape& shape, uint32_t seed, DType dtype = DType::kF32) {
  std::vector<float> v(static_cast<size_t>(NumElements(shape)));
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) / 16777216.0f - 0.5f;
  }
  Tensor t = Get(Tensor::FromVector<float>(v, shape));
  return dtype == DType::kF32 ? t : Get(t.To(dtype));
}

double MaxOverRanks(comm::Communicator& c, double v) {
  float f = static_cast<float>(v);
  BENCH_OK(c.AllReduce(&f, 1, DType::kF32, comm::ReduceOp::kMax).Wait());
  return f;
}

struct Config {
  int tp;
  bool sp;
  int threads;
  DType dtype;
};

// What rank 0 measured, in memory shared with the parent (the ranks are
// forked children).
struct Measured {
  double step_ms;
  double gemm_ms;
};

void RunConfig(comm::Communicator& tp, const Config& cfg, Measured* measured) {
  const int64_t T = absl::GetFlag(FLAGS_tokens), h = absl::GetFlag(FLAGS_hidden), f = 4 * h;
  const int steps = absl::GetFlag(FLAGS_steps);
  const int n = tp.size();
  const DType dt = cfg.dtype;
  SetGemmThreads(cfg.threads);
  layers::LinearBackwardTimeline timeline;
  layers::ColumnParallelLinearOptions o1;
  o1.sequence_parallel = cfg.sp;
  o1.gradient_accumulation_fusion = true;
  o1.timeline = &timeline;
  o1.params_dtype = dt;
  // Megatron's form (and examples/gpt's): fc1's bias goes into the fused
  // bias + GeLU, whose backward is one pass cheaper than GeLU's after a
  // bias-in-GEMM (measured at [2048, 2048] f32, 1 thread: 4.6 ms against
  // 6.3 ms).
  o1.skip_bias_add = true;
  layers::RowParallelLinearOptions o2;
  o2.input_is_parallel = true;
  o2.sequence_parallel = cfg.sp;
  o2.gradient_accumulation_fusion = true;
  o2.params_dtype = dt;
  auto fc1 = Get(layers::ColumnParallelLinear::Create(tp, h, f, o1));
  auto fc2 = Get(layers::RowParallelLinear::Create(tp, f, h, o2));
  Variable w1 = fc1.weight(), w2 = fc2.weight();
  // Weight gradients accumulate in f32 in either dtype (Megatron's main_grad).
  w1.set_main_grad(Get(Tensor::Zeros(w1.shape())));
  w2.set_main_grad(Get(Tensor::Zeros(w2.shape())));
  const int64_t local_tokens = cfg.sp ? T / n : T;
  const Tensor x_value = Random({local_tokens, h}, 1 + tp.rank(), dt);
  const Tensor dy = Random({local_tokens, h}, 7 + tp.rank(), dt);

  // The same six GEMMs alone (per-rank shapes), timed in alternation with
  // the full steps so that both see the same machine load.
  const int64_t fl = f / n;
  const Tensor xt = Random({T, h}, 3, dt), w1s = w1.value(), w2s = w2.value();
  const Tensor hid = Random({T, fl}, 4, dt), dy_full = Random({T, h}, 5, dt);
  const Tensor dh = Random({T, fl}, 6, dt);
  Tensor mg1 = Get(Tensor::Zeros(w1.shape())), mg2 = Get(Tensor::Zeros(w2.shape()));
  // Returns the forward GEMMs' share of the time (ms).
  auto gemms_only = [&]() {
    const double t0 = NowMs();
    Tensor r1 = Get(ops::Matmul(xt, w1s, false, true));               // fc1 forward
    Tensor r2 = Get(ops::Matmul(hid, w2s, false, true));              // fc2 forward
    const double forward = NowMs() - t0;
    Tensor r3 = Get(ops::Matmul(dy_full, w2s));                       // fc2 dgrad
    BENCH_OK(ops::MatmulInto(mg2, dy_full, hid, true, false, 1, 1));  // fc2 wgrad
    Tensor r4 = Get(ops::Matmul(dh, w1s));                            // fc1 dgrad
    BENCH_OK(ops::MatmulInto(mg1, dh, xt, true, false, 1, 1));        // fc1 wgrad
    return forward;
  };
  // Returns the forward's share of the time (ms).
  auto step = [&]() {
    const double t0 = NowMs();
    Variable x(x_value, true);
    auto a = Get(fc1.Forward(x));
    Variable g = Get(ag::BiasGelu(a.output, a.output_bias));
    auto y = Get(fc2.Forward(g));
    const double forward = NowMs() - t0;
    BENCH_OK(Backward(y.output, dy));
    return forward;
  };
  std::vector<double> step_ms, gemm_ms, step_fwd_ms, gemm_fwd_ms;
  for (int s = 0; s < steps + 2; ++s) {
    BENCH_OK(tp.Barrier().Wait());
    double t0 = NowMs();
    const double step_fwd = step();
    double t1 = NowMs();
    if (s >= 2) {
      step_ms.push_back(t1 - t0);
      step_fwd_ms.push_back(step_fwd);
    }
    BENCH_OK(tp.Barrier().Wait());
    t0 = NowMs();
    const double gemm_fwd = gemms_only();
    t1 = NowMs();
    if (s >= 2) {
      gemm_ms.push_back(t1 - t0);
      gemm_fwd_ms.push_back(gemm_fwd);
    }
  }
  const double step_median = MaxOverRanks(tp, Median(step_ms));
  const double gemm = MaxOverRanks(tp, Median(gemm_ms));
  const double step_fwd = MaxOverRanks(tp, Median(step_fwd_ms));
  const double gemm_fwd = MaxOverRanks(tp, Median(gemm_fwd_ms));
  if (tp.rank() == 0) {
    *measured = {step_median, gemm};
    std::printf(
        "{\"bench\":\"tp_mlp\",\"impl\":\"tpx\",\"tp\":%d,\"sequence_parallel\":%s,"
        "\"dtype\":\"%s\",\"threads_per_rank\":%d,\"step_ms\":%.2f,\"gemm_only_ms\":%.2f,"
        "\"step_over_gemm\":%.3f,\"forward_ms\":%.2f,\"gemm_only_forward_ms\":%.2f}\n",
        cfg.tp, cfg.sp ? "true" : "false", std::string(DTypeName(dt)).c_str(), cfg.threads,
        step_median, gemm, step_median / gemm, step_fwd, gemm_fwd);
    std::fflush(stdout);
  }
  if (n > 1) {
    // The dgrad collective alone, same size as in fc1's backward.
    const Tensor dx = Random({T, h}, 8, dt);
    std::vector<double> comm_ms;
    for (int s = 0; s < 5; ++s) {
      BENCH_OK(tp.Barrier().Wait());
      const double t0 = NowMs();
      if (cfg.sp) {
        Get(parallel::ReduceScatterAlongDim(tp, dx, 0, std::vector<int64_t>(n, T / n)));
      } else {
        Get(parallel::AllReduceSum(tp, dx));
      }
      comm_ms.push_back(NowMs() - t0);
    }
    const double comm_alone = Median(comm_ms);
    const double ns = 1e-6;
    const double post = timeline.dgrad_comm_posted_ns * ns;
    std::printf(
        "{\"bench\":\"tp_mlp_overlap\",\"rank\":%d,\"tp\":%d,\"sequence_parallel\":%s,"
        "\"dtype\":\"%s\",\"dgrad_comm\":\"%s\",\"comm_post_ms\":0,\"wgrad_start_ms\":%.3f,"
        "\"wgrad_end_ms\":%.3f,\"comm_wait_returned_ms\":%.3f,"
        "\"comm_done_at_wgrad_end\":%s,\"comm_alone_ms\":%.3f}\n",
        tp.rank(), cfg.tp, cfg.sp ? "true" : "false", std::string(DTypeName(dt)).c_str(),
        cfg.sp ? "reduce_scatter" : "all_reduce", timeline.wgrad_gemm_start_ns * ns - post,
        timeline.wgrad_gemm_end_ns * ns - post, timeline.dgrad_comm_waited_ns * ns - post,
        timeline.dgrad_comm_done_at_wgrad_end ? "true" : "false", comm_alone);
    std::fflush(stdout);
  }
}

// Runs the PyTorch peer once (its JSON line copied to stdout); the step_ms it
// reported, or a negative value (and a "skipped" line saying why) when it
// could not run.
double RunPytorchPeer(int tp, absl::string_view dtype, const bench::PeerThreads& threads) {
  absl::StatusOr<std::string> out =
      bench::RunPytorchPeer("bench/peers/tp_mlp_pytorch.py",
                            {absl::StrCat("--steps=", absl::GetFlag(FLAGS_steps)),
                             absl::StrCat("--tokens=", absl::GetFlag(FLAGS_tokens)),
                             absl::StrCat("--hidden=", absl::GetFlag(FLAGS_hidden)),
                             absl::StrCat("--tp=", tp), absl::StrCat("--dtype=", dtype)},
                            threads);
  if (!out.ok()) {
    std::printf(
        "{\"bench\":\"tp_mlp\",\"impl\":\"pytorch\",\"tp\":%d,\"sequence_parallel\":false,"
        "\"dtype\":\"%s\",\"omp_threads\":%d,\"blas_threads\":%d,\"skipped\":\"%s\"}\n",
        tp, std::string(dtype).c_str(), threads.omp, threads.blas,
        std::string(out.status().message()).c_str());
    std::fflush(stdout);
    return -1.0;
  }
  // Negative when the peer printed a "skipped" line of its own.
  return bench::JsonNumber(*out, "step_ms", -1.0);
}

}  // namespace
}  // namespace tpx

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (const absl::Status peer_flags = tpx::bench::CheckPeerFlags(); !peer_flags.ok()) {
    std::fprintf(stderr, "tp_mlp: %s\n", std::string(peer_flags.message()).c_str());
    return 2;
  }
  using tpx::Config;
  using tpx::DType;
  std::vector<DType> dtypes;
  for (absl::string_view d : absl::StrSplit(absl::GetFlag(FLAGS_dtype), ',', absl::SkipEmpty())) {
    if (d == "f32" || d == "bf16") {
      dtypes.push_back(d == "f32" ? DType::kF32 : DType::kBF16);
    } else {
      std::fprintf(stderr, "tp_mlp: bad --dtype entry '%s' (want f32, bf16 or f32,bf16)\n",
                   std::string(d).c_str());
      return 2;
    }
  }
  const int rounds = absl::GetFlag(FLAGS_rounds);
  if (dtypes.empty() || rounds < 1 || rounds > 100 || absl::GetFlag(FLAGS_steps) < 1) {
    std::fprintf(stderr, "tp_mlp: need a --dtype, --rounds in [1, 100] and --steps >= 1\n");
    return 2;
  }
  std::vector<tpx::bench::PeerThreads> thread_settings;
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_pytorch_threads), ',', absl::SkipEmpty())) {
    const absl::StatusOr<tpx::bench::PeerThreads> threads = tpx::bench::ParsePeerThreads(s);
    if (!threads.ok()) {
      std::fprintf(stderr, "tp_mlp: %s\n", std::string(threads.status().message()).c_str());
      return 2;
    }
    thread_settings.push_back(*threads);
  }
  std::vector<Config> configs;
  for (DType dt : dtypes) {
    for (const Config& c : std::vector<Config>{
             {1, false, 2, dt}, {1, true, 2, dt}, {2, false, 1, dt}, {2, true, 1, dt}}) {
      if (absl::GetFlag(FLAGS_only_tp) == 0 || absl::GetFlag(FLAGS_only_tp) == c.tp) {
        configs.push_back(c);
      }
    }
  }
  // The PyTorch peer in every dtype asked for, and always in f32 (the
  // reference of bf16's goal).
  std::vector<std::string> peer_dtypes = {"f32"};
  for (DType dt : dtypes) {
    if (dt == DType::kBF16) peer_dtypes.push_back("bf16");
  }
  auto* shared = static_cast<tpx::Measured*>(mmap(nullptr, sizeof(tpx::Measured) * configs.size(),
                                                  PROT_READ | PROT_WRITE,
                                                  MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (shared == MAP_FAILED) {
    std::perror("tp_mlp: mmap");
    return 1;
  }
  tpx::testing::RunOptions options;
  options.comm_timeout = absl::Seconds(60);
  options.deadline = absl::Seconds(600);
  std::vector<std::vector<tpx::Measured>> tpx_runs(configs.size());
  // (tp, dtype) -> per round, the best step_ms over the thread settings.
  std::map<std::pair<int, std::string>, std::vector<double>> peer_best;
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < configs.size(); ++i) {
      const Config cfg = configs[i];
      tpx::Measured* slot = &shared[i];
      std::vector<tpx::testing::RankOutcome> outcomes = tpx::testing::RunOnRanks(
          cfg.tp,
          [&cfg, slot](tpx::testing::RankContext& ctx) { tpx::RunConfig(ctx.comm, cfg, slot); },
          options);
      for (const auto& o : outcomes) {
        if (o.exit_code != 0 || o.signal != 0 || o.timed_out) {
          std::fprintf(stderr, "tp_mlp: a rank failed (exit %d, signal %d)\n", o.exit_code,
                       o.signal);
          return 1;
        }
      }
      tpx_runs[i].push_back(*slot);
    }
    if (thread_settings.empty()) continue;
    for (const std::string& dtype : peer_dtypes) {
      for (int tp : {1, 2}) {
        if (absl::GetFlag(FLAGS_only_tp) != 0 && absl::GetFlag(FLAGS_only_tp) != tp) continue;
        std::vector<tpx::bench::PeerThreads> settings = thread_settings;
        if (tp > 1) settings = {{1, 1}};  // like tpx's ranks: one thread each
        double best = -1.0;
        for (const tpx::bench::PeerThreads& threads : settings) {
          const double ms = tpx::RunPytorchPeer(tp, dtype, threads);
          if (ms > 0 && (best < 0 || ms < best)) best = ms;
        }
        if (best > 0) peer_best[{tp, dtype}].push_back(best);
      }
    }
  }
  for (size_t i = 0; i < configs.size(); ++i) {
    const Config& cfg = configs[i];
    std::vector<double> step, ratio;
    for (const tpx::Measured& m : tpx_runs[i]) {
      step.push_back(m.step_ms);
      ratio.push_back(m.step_ms / m.gemm_ms);
    }
    const double tpx_step = tpx::Median(step);
    const std::string dtype(tpx::DTypeName(cfg.dtype));
    std::string line = absl::StrFormat(
        "{\"bench\":\"tp_mlp_vs\",\"tp\":%d,\"sequence_parallel\":%s,\"dtype\":\"%s\","
        "\"rounds\":%d,\"tpx_step_ms\":%.2f,\"step_over_gemm\":%.3f",
        cfg.tp, cfg.sp ? "true" : "false", dtype, rounds, tpx_step, tpx::Median(ratio));
    for (const std::string& peer_dtype : {std::string("f32"), dtype}) {
      auto it = peer_best.find({cfg.tp, peer_dtype});
      if (it == peer_best.end() || static_cast<int>(it->second.size()) != rounds) continue;
      const double peer = tpx::Median(it->second);
      absl::StrAppendFormat(&line, ",\"pytorch_%s_step_ms\":%.2f,\"speedup_vs_pytorch_%s\":%.3f",
                            peer_dtype, peer, peer_dtype, peer / tpx_step);
      if (dtype == "f32") break;
    }
    std::printf("%s}\n", line.c_str());
  }
  std::fflush(stdout);
  munmap(shared, sizeof(tpx::Measured) * configs.size());
  return 0;
}
