// Causal self-attention forward + backward on a fused qkv [t, b, 3 h d]:
// the fused op (ag::CausalSelfAttention) against the composed ops
// (ag::ComposedCausalSelfAttention), interleaved so both see the same load.
//
//   bazel run -c opt //bench:attention -- [--t=128] [--b=16] [--heads=4] [--head_dim=32]
//       [--between_mib=32]
//
// --between_mib streams that much memory between each forward and its
// backward (not timed), as a model's other layers do: without it the
// backward finds whatever the forward kept in cache, which no model step
// does.
// One JSON line per (dtype, implementation):
//   {"bench":"attention","impl":"fused"|"composed","dtype":"f32","t":128,..,"between_mib":0,
//    "step_ms":..,"gflops":..}
// step_ms: median wall time over --reps rounds, cpu_ms the median CPU time
// of the process (all threads; the better figure on a loaded host); gflops
// counts the full (unmasked) products, 4 t^2 d per head forward and 8 t^2 d
// backward, as the composed ops compute them.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/autograd/attention.h"
#include "core/autograd/engine.h"
#include "core/autograd/ops.h"
#include "core/gemm.h"
#include "core/ops.h"
#include "core/status_macros.h"

ABSL_FLAG(int64_t, t, 128, "sequence length");
ABSL_FLAG(int64_t, b, 16, "batch");
ABSL_FLAG(int64_t, heads, 4, "heads");
ABSL_FLAG(int64_t, head_dim, 32, "head dim");
ABSL_FLAG(int, reps, 15, "timed rounds (each runs both implementations once)");
ABSL_FLAG(std::string, impl, "both", "fused, composed or both");
ABSL_FLAG(std::string, dtypes, "f32,bf16", "dtypes to measure");
ABSL_FLAG(int64_t, between_mib, 0,
          "MiB of other memory traffic between each forward and its backward, not timed (a "
          "model's other layers run there); 0: the backward finds the forward's data in cache");

namespace tpx {
namespace {

// CPU seconds of this process: on a loaded host, closer to the work done
// than wall time (with one thread).
double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Times {
  double wall, cpu;
};

// Writes and reads `between` (--between_mib), pushing the forward's data
// out of the caches as the rest of a model's step would.
void TrafficBetween(std::vector<char>& between) {
  if (between.empty()) return;
  std::memset(between.data(), static_cast<int>(between[0]) + 1, between.size());
  volatile char sink = 0;
  for (size_t i = 0; i < between.size(); i += 64) sink = sink + between[i];
}

// One forward and backward; the traffic between them is not timed.
absl::StatusOr<Times> Step(bool fused, const Tensor& qkv, const Tensor& g, int64_t heads,
                           int64_t d, std::vector<char>& between) {
  auto start = std::chrono::steady_clock::now();
  double cpu_start = CpuSeconds();
  Variable x(qkv, /*requires_grad=*/true);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  TPX_ASSIGN_OR_RETURN(Variable ctx, fused ? ag::CausalSelfAttention(x, heads, d, scale)
                                           : ag::ComposedCausalSelfAttention(x, heads, d, scale));
  Times t{std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
          CpuSeconds() - cpu_start};
  TrafficBetween(between);
  start = std::chrono::steady_clock::now();
  cpu_start = CpuSeconds();
  TPX_RETURN_IF_ERROR(Backward(ctx, g));
  t.wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  t.cpu += CpuSeconds() - cpu_start;
  return t;
}

absl::Status Main() {
  const int64_t t = absl::GetFlag(FLAGS_t), b = absl::GetFlag(FLAGS_b);
  const int64_t heads = absl::GetFlag(FLAGS_heads), d = absl::GetFlag(FLAGS_head_dim);
  const int reps = absl::GetFlag(FLAGS_reps);
  const std::string impl = absl::GetFlag(FLAGS_impl);
  const bool run[2] = {impl != "fused", impl != "composed"};
  const int64_t between_mib = absl::GetFlag(FLAGS_between_mib);
  if (between_mib < 0 || between_mib > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("--between_mib must be in [0, 4096], got ", between_mib));
  }
  std::vector<char> between(static_cast<size_t>(between_mib) << 20);
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_dtypes), ',')) {
    if (name != "f32" && name != "bf16") {
      return absl::InvalidArgumentError(absl::StrCat("--dtypes: unknown dtype '", name, "'"));
    }
    const DType dtype = name == "f32" ? DType::kF32 : DType::kBF16;
    TPX_ASSIGN_OR_RETURN(Tensor qkv, Tensor::Empty({t, b, 3 * heads * d}, DType::kF32));
    float* p = qkv.data<float>();
    for (int64_t i = 0; i < qkv.numel(); ++i) p[i] = std::sin(0.37 * static_cast<double>(i));
    TPX_ASSIGN_OR_RETURN(qkv, qkv.To(dtype));
    TPX_ASSIGN_OR_RETURN(Tensor g, Tensor::Full({t, b, heads * d}, 0.01, dtype));
    std::vector<double> times[2], cpu[2];
    for (int r = -1; r < reps; ++r) {  // round -1 warms up
      for (int fused = 0; fused < 2; ++fused) {
        if (!run[fused]) continue;
        TPX_ASSIGN_OR_RETURN(Times s, Step(fused == 1, qkv, g, heads, d, between));
        if (r >= 0) {
          times[fused].push_back(s.wall);
          cpu[fused].push_back(s.cpu);
        }
      }
    }
    const double flops = 12.0 * static_cast<double>(b * heads * t * t * d);
    for (int fused = 0; fused < 2; ++fused) {
      if (!run[fused]) continue;
      std::vector<double>& v = times[fused];
      std::sort(v.begin(), v.end());
      std::sort(cpu[fused].begin(), cpu[fused].end());
      const double med = v[v.size() / 2], cpu_med = cpu[fused][v.size() / 2];
      std::printf("%s\n",
                  absl::StrFormat("{\"bench\":\"attention\",\"impl\":\"%s\",\"dtype\":\"%s\","
                                  "\"t\":%d,\"b\":%d,\"heads\":%d,\"head_dim\":%d,\"threads\":%d,"
                                  "\"between_mib\":%d,\"step_ms\":%.3f,\"cpu_ms\":%.3f,"
                                  "\"gflops\":%.2f}",
                                  fused ? "fused" : "composed", DTypeName(dtype), t, b, heads, d,
                                  GemmThreads(), between_mib, med * 1e3, cpu_med * 1e3,
                                  flops / med * 1e-9)
                      .c_str());
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tpx

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::Status s = tpx::Main();
  if (!s.ok()) {
    std::fprintf(stderr, "attention bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
