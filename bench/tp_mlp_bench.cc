// Megatron MLP block (ColumnParallelLinear h->4h, GeLU, RowParallelLinear
// 4h->h) forward + backward step time at TP=1 (one process, 2 GEMM threads)
// and TP=2 (two forked ranks over UCX, one GEMM thread each), with and
// without sequence parallelism. One JSON line per configuration:
//   {"bench":"tp_mlp","tp":2,"sequence_parallel":false,"threads_per_rank":1,
//    "step_ms":...,"gemm_only_ms":...}
// step_ms: median over timed steps, max over ranks; gemm_only_ms: the same
// GEMMs (same shapes, same threads) without communication or autograd.
// A second line per TP>1 configuration ("tp_mlp_overlap") gives the fc1
// backward timeline: the dgrad collective's post -> wait interval, the wgrad
// GEMM interval, whether the collective had completed when the GEMM ended,
// and the collective's time alone.
//
//   bazel run -c opt //bench:tp_mlp -- [--steps=6] [--tokens=2048] [--hidden=1024] [--only_tp=2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
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

Tensor Random(const Shape& shape, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(NumElements(shape)));
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) / 16777216.0f - 0.5f;
  }
  return Get(Tensor::FromVector<float>(v, shape));
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
};

void RunConfig(comm::Communicator& tp, const Config& cfg) {
  const int64_t T = absl::GetFlag(FLAGS_tokens), h = absl::GetFlag(FLAGS_hidden), f = 4 * h;
  const int steps = absl::GetFlag(FLAGS_steps);
  const int n = tp.size();
  SetGemmThreads(cfg.threads);
  layers::LinearBackwardTimeline timeline;
  layers::ColumnParallelLinearOptions o1;
  o1.sequence_parallel = cfg.sp;
  o1.gradient_accumulation_fusion = true;
  o1.timeline = &timeline;
  layers::RowParallelLinearOptions o2;
  o2.input_is_parallel = true;
  o2.sequence_parallel = cfg.sp;
  o2.gradient_accumulation_fusion = true;
  auto fc1 = Get(layers::ColumnParallelLinear::Create(tp, h, f, o1));
  auto fc2 = Get(layers::RowParallelLinear::Create(tp, f, h, o2));
  Variable w1 = fc1.weight(), w2 = fc2.weight();
  w1.set_main_grad(Get(Tensor::Zeros(w1.shape())));
  w2.set_main_grad(Get(Tensor::Zeros(w2.shape())));
  const int64_t local_tokens = cfg.sp ? T / n : T;
  const Tensor x_value = Random({local_tokens, h}, 1 + tp.rank());
  const Tensor dy = Random({local_tokens, h}, 7 + tp.rank());

  // The same six GEMMs alone (per-rank shapes), timed in alternation with
  // the full steps so that both see the same machine load.
  const int64_t fl = f / n;
  const Tensor xt = Random({T, h}, 3), w1s = w1.value(), w2s = w2.value();
  const Tensor hid = Random({T, fl}, 4), dy_full = Random({T, h}, 5), dh = Random({T, fl}, 6);
  Tensor mg1 = Get(Tensor::Zeros(w1.shape())), mg2 = Get(Tensor::Zeros(w2.shape()));
  auto gemms_only = [&]() {
    Tensor r1 = Get(ops::Matmul(xt, w1s, false, true));               // fc1 forward
    Tensor r2 = Get(ops::Matmul(hid, w2s, false, true));              // fc2 forward
    Tensor r3 = Get(ops::Matmul(dy_full, w2s));                       // fc2 dgrad
    BENCH_OK(ops::MatmulInto(mg2, dy_full, hid, true, false, 1, 1));  // fc2 wgrad
    Tensor r4 = Get(ops::Matmul(dh, w1s));                            // fc1 dgrad
    BENCH_OK(ops::MatmulInto(mg1, dh, xt, true, false, 1, 1));        // fc1 wgrad
  };
  auto step = [&]() {
    Variable x(x_value, true);
    auto a = Get(fc1.Forward(x));
    Variable g = Get(ag::Gelu(a.output));
    auto y = Get(fc2.Forward(g));
    BENCH_OK(Backward(y.output, dy));
  };
  std::vector<double> step_ms, gemm_ms;
  for (int s = 0; s < steps + 2; ++s) {
    BENCH_OK(tp.Barrier().Wait());
    double t0 = NowMs();
    step();
    double t1 = NowMs();
    if (s >= 2) step_ms.push_back(t1 - t0);
    BENCH_OK(tp.Barrier().Wait());
    t0 = NowMs();
    gemms_only();
    t1 = NowMs();
    if (s >= 2) gemm_ms.push_back(t1 - t0);
  }
  const double step_median = MaxOverRanks(tp, Median(step_ms));
  const double gemm = MaxOverRanks(tp, Median(gemm_ms));
  if (tp.rank() == 0) {
    std::printf(
        "{\"bench\":\"tp_mlp\",\"tp\":%d,\"sequence_parallel\":%s,\"threads_per_rank\":%d,"
        "\"step_ms\":%.2f,\"gemm_only_ms\":%.2f}\n",
        cfg.tp, cfg.sp ? "true" : "false", cfg.threads, step_median, gemm);
    std::fflush(stdout);
  }
  if (n > 1) {
    // The dgrad collective alone, same size as in fc1's backward.
    const Tensor dx = Random({T, h}, 8);
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
        "\"dgrad_comm\":\"%s\",\"comm_post_ms\":0,\"wgrad_start_ms\":%.3f,"
        "\"wgrad_end_ms\":%.3f,\"comm_wait_returned_ms\":%.3f,"
        "\"comm_done_at_wgrad_end\":%s,\"comm_alone_ms\":%.3f}\n",
        tp.rank(), cfg.tp, cfg.sp ? "true" : "false", cfg.sp ? "reduce_scatter" : "all_reduce",
        timeline.wgrad_gemm_start_ns * ns - post, timeline.wgrad_gemm_end_ns * ns - post,
        timeline.dgrad_comm_waited_ns * ns - post,
        timeline.dgrad_comm_done_at_wgrad_end ? "true" : "false", comm_alone);
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace tpx

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using tpx::Config;
  const std::vector<Config> configs = {{1, false, 2}, {1, true, 2}, {2, false, 1}, {2, true, 1}};
  tpx::testing::RunOptions options;
  options.comm_timeout = absl::Seconds(60);
  options.deadline = absl::Seconds(600);
  for (const Config& cfg : configs) {
    if (absl::GetFlag(FLAGS_only_tp) != 0 && absl::GetFlag(FLAGS_only_tp) != cfg.tp) continue;
    std::vector<tpx::testing::RankOutcome> outcomes = tpx::testing::RunOnRanks(
        cfg.tp, [&cfg](tpx::testing::RankContext& ctx) { tpx::RunConfig(ctx.comm, cfg); },
        options);
    for (const auto& o : outcomes) {
      if (o.exit_code != 0 || o.signal != 0 || o.timed_out) {
        std::fprintf(stderr, "tp_mlp: a rank failed (exit %d, signal %d)\n", o.exit_code,
                     o.signal);
        return 1;
      }
    }
  }
  return 0;
}
