// GEMM throughput of tpx::ops::Matmul versus a direct OpenBLAS cblas_sgemm,
// both as a fraction of the core's measured FMA peak (bench/fma_peak.h).
//
//   bazel run -c opt //bench:gemm [-- --threads=1,2 --cases=gpt --rounds=2
//                                     --openblas_core=auto|env]
//
// First, per thread count, the peak (the best of its measurements, before
// each round and after the last):
//   {"bench":"fma_peak","threads":1,"f32_isa":"avx512","f32_gflops":..,
//    "bf16_isa":"amx_bf16","bf16_gflops":..,"avx512_bf16_gflops":..,"measurements":3}
// (bf16_isa is the faster bf16 unit, whose rate is the bf16 peak; on a
// Sapphire Rapids core AMX's tiles run many times vdpbf16ps's rate, which
// avx512_bf16_gflops gives.)
// then for each case, thread count and tpx dtype (f32, bf16):
//   {"case":"mlp_fc1","shape":"2048x1024x4096","op":"NT","batch":1,"threads":1,
//    "rounds":2,"dtype":"f32","tpx_gflops":..,"openblas_gflops":..,"ratio":..,
//    "peak_gflops":..,"tpx_frac_of_peak":..,"sustained_peak_gflops":..,
//    "tpx_frac_of_sustained_peak":..,"openblas_frac_of_peak":..}
// shape is MxKxN of C[M,N] = op(A)[M,K] op(B)[K,N]; op is N/T for A and B
// (T: stored transposed, as a linear layer's forward "NT" and weight
// gradient "TN" use them); batch > 1 is a strided batched product (attention).
// The cases are the square sizes, the MLP of bench:tp_mlp at TP=1 and 2 and
// the GEMMs of the GPT example's default model (bench:gpt), forward and
// backward. bf16 lines compare against the bf16 peak and add "vs_tpx_f32";
// the OpenBLAS baseline is always f32. After the cases of a thread count,
// per dtype, the one furthest below the peak (the goal is >= 0.9 on all)
// and the one furthest below the sustained peak, and how many of the cases
// reach 0.9 of each (at more than one thread also "concurrent_at_goal":
// how many reach it when each thread multiplies its own whole copy, the
// cases where the cores working at once leave room for the goal):
//   {"bench":"gemm_min","threads":1,"dtype":"f32","case":..,"tpx_frac_of_peak":..,
//    "sustained_case":..,"tpx_frac_of_sustained_peak":..,"cases":39,"at_goal":..,
//    "at_goal_sustained":..}
// The peak is the best of ~1 ms rounds of an FMA chain. The sustained peak
// is the same chain's best round when the rounds are as long as tpx's
// repetitions of the case and interleaved with them: a product that takes
// tens of milliseconds cannot catch the short windows in which a shared
// host's core runs fastest, and this yardstick asks no more of it than the
// FMA chain itself attains over as long (bench/fma_peak.h).
// At more than one thread, a tpx line also gives what the cores attain
// without splitting the product: each thread multiplies its own copy of
// the operands on its own, all at once ("concurrent_frac_of_peak": their
// flops together over the peak), and tpx's split against that
// ("split_vs_concurrent"). On a shared host the cores' caches and memory
// are shared too, so this, not the FMA peak (which touches no memory),
// separates what the split costs from what running every core costs.
// Each figure is the best of 7 to 300 timed repetitions (until 0.1 s of
// them) after one warm-up, as the peak is: on a shared host the best case
// is the one that compares (a median measures the neighbours). The cases
// run in --rounds rounds, one case after another in each, and a figure is
// the best of its rounds: a round of all the cases takes a minute or two,
// and a slow stretch of the host as long as one case's measurement then
// marks no case on its own. Lines are printed after the last round.
#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/fma_peak.h"
#include "core/gemm.h"
#include "core/ops.h"

ABSL_FLAG(std::string, threads, "1,2", "GEMM thread counts to measure.");
ABSL_FLAG(std::string, openblas_core, "auto",
          "OpenBLAS kernels of the baseline: auto (OpenBLAS's choice for this CPU: the bench "
          "restarts itself without the host's OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, which "
          "OpenBLAS reads when it loads; where OpenBLAS does not know the CPU model and falls "
          "back to SSE kernels, it restarts again on the newest kernel set the CPU's features "
          "allow, and the lines name both) or env (as the environment says).");
ABSL_FLAG(int, rounds, 2,
          "Rounds over all the selected cases per thread count, each figure the best of its "
          "rounds: a stretch of a minute in which a shared host runs slow then sinks no case "
          "(measured: attention's bf16 products at 0.63-0.67 of the peak in one run, 0.76-0.80 "
          "in the next).");
ABSL_FLAG(std::string, cases, "all",
          "Case groups: all, square, mlp (bench:tp_mlp sizes), gpt (bench:gpt sizes), gpt_tp2, "
          "decode (one to four rows; not in all); or case names (gpt_attn_dv,...).");

namespace tpx {
namespace {

// The goal: every case at >= this fraction of the peak.
constexpr double kGoalFrac = 0.9;

// Timed repetitions: at least kMinRepetitions, and more (up to
// kMaxRepetitions) until kMinTimedSeconds have been timed. A product of a
// fraction of a millisecond (the GPT's, at 2 threads) varies by a quarter
// between calls on a shared host; seven of them seldom include a call that
// ran undisturbed, which the best of a few hundred does.
constexpr int kMinRepetitions = 7;
constexpr int kMaxRepetitions = 300;
constexpr double kMinTimedSeconds = 0.1;
// Both libraries' worker threads keep spinning for a while after a call
// (OpenBLAS for about 2^28 cycles, OpenMP's for its spin count); measured
// right after the other library, a side ran beside those spinners on 2
// cores (one case at 0.05 of peak). Each measurement first waits this long.
constexpr auto kQuietBefore = std::chrono::milliseconds(150);

// The best time of `run`. After each timed repetition `beside` (when
// given) runs with that repetition's seconds, so that a measurement of the
// host over windows as long as the repetitions interleaves with them.
template <typename F>
double BestSeconds(F&& run, const std::function<void(double)>& beside = nullptr) {
  std::this_thread::sleep_for(kQuietBefore);
  run();  // warm-up: primitive creation, page faults
  double best = 0, timed = 0;
  for (int r = 0; r < kMinRepetitions || (timed < kMinTimedSeconds && r < kMaxRepetitions);
       ++r) {
    auto start = std::chrono::steady_clock::now();
    run();
    const double t =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = r == 0 ? t : std::min(best, t);
    timed += t;
    if (beside) beside(t);
  }
  return best;
}

Tensor Filled(const Shape& shape, DType dtype, float scale) {
  std::vector<float> v(static_cast<size_t>(NumElements(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>((i * 7919) % 97) / 97.0f;
  return *Tensor::FromVector<float>(v, shape, dtype);
}

struct Case {
  const char* group;
  const char* name;
  int64_t batch, m, k, n;
  bool trans_a, trans_b;
};

// GEMMs of the default GPT example (tokens 2048 = batch 16 x seq 128,
// d_model 128, d_ff 512, 4 heads of 32, vocabulary 256: every linear
// layer's forward, input gradient and weight gradient at TP=1 and, as
// each rank runs them, at TP=2 (group gpt_tp2: the main job's shapes), and
// attention's per-head products, which the example's fused attention does
// not call through Matmul) and of bench:tp_mlp (tokens 2048, hidden 1024,
// ffn 4096, per rank at TP=2).
const std::vector<Case>& Cases() {
  static const auto* cases = new std::vector<Case>{
      {"square", "square1024", 1, 1024, 1024, 1024, false, false},
      {"square", "square2048", 1, 2048, 2048, 2048, false, false},
      {"mlp", "mlp_fc1_fwd", 1, 2048, 1024, 4096, false, true},
      {"mlp", "mlp_fc2_fwd", 1, 2048, 4096, 1024, false, true},
      {"mlp", "mlp_fc1_wgrad", 1, 4096, 2048, 1024, true, false},
      {"mlp", "mlp_tp2_fc1_fwd", 1, 2048, 1024, 2048, false, true},
      {"mlp", "mlp_tp2_fc2_fwd", 1, 2048, 2048, 1024, false, true},
      {"mlp", "mlp_tp2_fc2_dgrad", 1, 2048, 1024, 2048, false, false},
      {"mlp", "mlp_tp2_fc1_wgrad", 1, 2048, 2048, 1024, true, false},
      {"gpt", "gpt_qkv_fwd", 1, 2048, 128, 384, false, true},
      {"gpt", "gpt_qkv_dgrad", 1, 2048, 384, 128, false, false},
      {"gpt", "gpt_qkv_wgrad", 1, 384, 2048, 128, true, false},
      {"gpt", "gpt_proj_fwd", 1, 2048, 128, 128, false, true},
      {"gpt", "gpt_proj_dgrad", 1, 2048, 128, 128, false, false},
      {"gpt", "gpt_proj_wgrad", 1, 128, 2048, 128, true, false},
      {"gpt", "gpt_fc1_fwd", 1, 2048, 128, 512, false, true},
      {"gpt", "gpt_fc1_dgrad", 1, 2048, 512, 128, false, false},
      {"gpt", "gpt_fc1_wgrad", 1, 512, 2048, 128, true, false},
      {"gpt", "gpt_fc2_fwd", 1, 2048, 512, 128, false, true},
      {"gpt", "gpt_fc2_dgrad", 1, 2048, 128, 512, false, false},
      {"gpt", "gpt_fc2_wgrad", 1, 128, 2048, 512, true, false},
      {"gpt", "gpt_logits_fwd", 1, 2048, 128, 256, false, true},
      {"gpt", "gpt_logits_dgrad", 1, 2048, 256, 128, false, false},
      {"gpt", "gpt_logits_wgrad", 1, 256, 2048, 128, true, false},
      {"gpt_tp2", "gpt_tp2_qkv_fwd", 1, 2048, 128, 192, false, true},
      {"gpt_tp2", "gpt_tp2_qkv_dgrad", 1, 2048, 192, 128, false, false},
      {"gpt_tp2", "gpt_tp2_qkv_wgrad", 1, 192, 2048, 128, true, false},
      {"gpt_tp2", "gpt_tp2_proj_fwd", 1, 2048, 64, 128, false, true},
      {"gpt_tp2", "gpt_tp2_proj_dgrad", 1, 2048, 128, 64, false, false},
      {"gpt_tp2", "gpt_tp2_proj_wgrad", 1, 128, 2048, 64, true, false},
      {"gpt_tp2", "gpt_tp2_fc1_fwd", 1, 2048, 128, 256, false, true},
      {"gpt_tp2", "gpt_tp2_fc1_dgrad", 1, 2048, 256, 128, false, false},
      {"gpt_tp2", "gpt_tp2_fc1_wgrad", 1, 256, 2048, 128, true, false},
      {"gpt_tp2", "gpt_tp2_fc2_fwd", 1, 2048, 256, 128, false, true},
      {"gpt_tp2", "gpt_tp2_fc2_dgrad", 1, 2048, 128, 256, false, false},
      {"gpt_tp2", "gpt_tp2_fc2_wgrad", 1, 128, 2048, 256, true, false},
      {"gpt", "gpt_attn_scores", 64, 128, 32, 128, false, true},
      {"gpt", "gpt_attn_ctx", 64, 128, 128, 32, false, false},
      {"gpt", "gpt_attn_dv", 64, 128, 128, 32, true, false},
      // Decoding steps: one token (and two to four, and eight: where the few-row
      // kernels hand over to oneDNN) through the GPT example's layers and
      // logits, and through bench:decode's d_model 512 model.
      // Bound by reading the weights, not by the FMA peak: only with
      // --cases=decode, and left out of the gemm_min lines.
      {"decode", "decode_qkv", 1, 1, 128, 384, false, true},
      {"decode", "decode_proj", 1, 1, 128, 128, false, true},
      {"decode", "decode_fc1", 1, 1, 128, 512, false, true},
      {"decode", "decode_fc2", 1, 1, 512, 128, false, true},
      {"decode", "decode_logits", 1, 1, 128, 256, false, true},
      {"decode", "decode2_qkv", 1, 2, 128, 384, false, true},
      {"decode", "decode3_qkv", 1, 3, 128, 384, false, true},
      {"decode", "decode4_qkv", 1, 4, 128, 384, false, true},
      {"decode", "decode8_qkv", 1, 8, 128, 384, false, true},
      {"decode", "decode_d512_qkv", 1, 1, 512, 1536, false, true},
      {"decode", "decode_d512_fc2", 1, 1, 2048, 512, false, true},
      {"decode", "decode2_d512_qkv", 1, 2, 512, 1536, false, true},
      {"decode", "decode4_d512_qkv", 1, 4, 512, 1536, false, true},
      {"decode", "decode4_d512_fc2", 1, 4, 2048, 512, false, true},
      {"decode", "decode8_d512_qkv", 1, 8, 512, 1536, false, true},
      {"decode", "decode8_d512_fc2", 1, 8, 2048, 512, false, true},
  };
  return *cases;
}

// Stored operand shape for op(X) of [rows, cols] (optionally batched).
Shape Stored(int64_t batch, int64_t rows, int64_t cols, bool trans) {
  Shape s = trans ? Shape{cols, rows} : Shape{rows, cols};
  if (batch > 1) s.insert(s.begin(), batch);
  return s;
}

// C = op(A) op(B) for the case, exiting on an error.
void MultiplyOrExit(const Tensor& a, const Tensor& b, const Case& c) {
  absl::StatusOr<Tensor> out = ops::Matmul(a, b, c.trans_a, c.trans_b);
  if (!out.ok()) {
    std::fprintf(stderr, "Matmul failed: %s\n", out.status().ToString().c_str());
    std::exit(1);
  }
}

bool IsDecode(const Case& c) { return std::string(c.group) == "decode"; }

// Whether --cases names the case or its group ("all": every group but
// decode).
bool Selected(const std::string& cases, const Case& c) {
  if (cases == "all") return !IsDecode(c);
  for (absl::string_view entry : absl::StrSplit(cases, ',', absl::SkipEmpty())) {
    if (entry == c.group || entry == c.name) return true;
  }
  return false;
}

std::vector<int> ParseThreads() {
  std::vector<int> out;
  for (absl::string_view p : absl::StrSplit(absl::GetFlag(FLAGS_threads), ',', absl::SkipEmpty())) {
    int t = 0;
    if (!absl::SimpleAtoi(p, &t) || t < 1) {
      std::fprintf(stderr, "gemm bench: bad --threads entry '%s'\n", std::string(p).c_str());
      std::exit(2);
    }
    out.push_back(t);
  }
  return out;
}

// tpx's dtypes, in the order of CaseTimes' per-dtype figures.
constexpr DType kDTypes[2] = {DType::kF32, DType::kBF16};

// What a case measured, the best of its rounds: seconds per call (OpenBLAS;
// tpx per dtype; at more than one thread, the concurrent whole products)
// and the sustained peak in GFLOP/s.
struct CaseTimes {
  double blas = 0, tpx[2] = {0, 0}, concurrent[2] = {0, 0}, sustained_gflops[2] = {0, 0};
};

// A shorter time, where 0 is none yet.
void TakeBest(double seconds, double* best) {
  if (*best == 0 || seconds < *best) *best = seconds;
}

// One round of case s at `threads`, folded into *times.
void MeasureCase(const Case& s, int threads, const bench::FmaPeak& peak, CaseTimes* times) {
  Tensor a = Filled(Stored(s.batch, s.m, s.k, s.trans_a), DType::kF32, 1.0f);
  Tensor b = Filled(Stored(s.batch, s.k, s.n, s.trans_b), DType::kF32, 0.5f);
  std::vector<float> c(static_cast<size_t>(s.batch * s.m * s.n));
  TakeBest(BestSeconds([&] {
             const int64_t lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
             for (int64_t i = 0; i < s.batch; ++i) {
               cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
                           s.trans_b ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f,
                           a.data<float>() + i * s.m * s.k, lda, b.data<float>() + i * s.k * s.n,
                           ldb, 0.0f, c.data() + i * s.m * s.n, s.n);
             }
           }),
           &times->blas);
  for (int d = 0; d < 2; ++d) {
    const DType dtype = kDTypes[d];
    Tensor ta = *a.To(dtype);
    Tensor tb = *b.To(dtype);
    // The sustained peak: the FMA chain on every thread in rounds as
    // long as tpx's repetitions, one after each (bench/fma_peak.h).
    double& sustained_gflops = times->sustained_gflops[d];
    const auto sustained_round = [&](double seconds) {
      double gflops = 0;
#pragma omp parallel num_threads(threads) reduction(+ : gflops)
      gflops += bench::FmaChainRoundGflops(peak, threads, dtype == DType::kBF16, seconds);
      sustained_gflops = std::max(sustained_gflops, gflops);
    };
    TakeBest(BestSeconds([&] { MultiplyOrExit(ta, tb, s); }, sustained_round), &times->tpx[d]);
    if (threads == 1) continue;
    // One copy of the operands per thread, for the concurrent products
    // (inside a parallel region each Matmul runs on its calling thread).
    std::vector<Tensor> own_a, own_b;
    for (int t = 0; t < threads; ++t) {
      own_a.push_back(*ta.Clone());
      own_b.push_back(*tb.Clone());
    }
    TakeBest(BestSeconds([&] {
#pragma omp parallel num_threads(threads)
               {
                 const int t = omp_get_thread_num();
                 MultiplyOrExit(own_a[t], own_b[t], s);
               }
             }),
             &times->concurrent[d]);
  }
}

// Set when --openblas_core=auto replaced OpenBLAS's SSE fallback: the core
// OpenBLAS chose on its own (bench/peers/torch_peer.py does the same).
constexpr const char* kOwnCoreEnv = "TPX_OPENBLAS_OWN_CORE";

// OpenBLAS's SSE-only kernel sets: what a release falls back to on a CPU
// model it predates (0.3.21 runs "Prescott" on an Emerald Rapids Xeon, at a
// sixth of its AVX-512 kernels' f32 rate there), which would flatter tpx.
bool IsSseOnlyOpenBlasCore(absl::string_view name) {
  for (absl::string_view sse :
       {"katmai", "coppermine", "northwood", "prescott", "banias", "core2", "penryn", "dunnington",
        "nehalem", "atom", "opteron", "opteron_sse3", "barcelona", "bobcat", "nano"}) {
    if (absl::EqualsIgnoreCase(name, sse)) return true;
  }
  return false;
}

// The newest OpenBLAS kernel set this CPU's features allow, in the order
// newer OpenBLAS releases use for models they do not know; nullptr if none.
const char* OpenBlasCoreForCpu() {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
  if (avx512 && __builtin_cpu_supports("avx512bf16")) return "Cooperlake";
  if (avx512) return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  if (__builtin_cpu_supports("avx")) return "Sandybridge";
  return nullptr;
}

int Main() {
  const std::string groups = absl::GetFlag(FLAGS_cases);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  if (rounds < 1) {
    std::fprintf(stderr, "gemm bench: --rounds must be at least 1, not %d\n", rounds);
    return 2;
  }
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::fprintf(stderr, "gemm backend: %s; OPENBLAS_CORETYPE=%s\n",
               std::string(GemmBackendName()).c_str(), coretype ? coretype : "(unset)");
  std::vector<const Case*> selected;
  for (const Case& s : Cases()) {
    if (Selected(groups, s)) selected.push_back(&s);
  }
  for (int threads : ParseThreads()) {
    // The peak before each round and after the last, the best of each
    // dtype's: a host that speeds up during the run is held to its faster
    // rate.
    bench::FmaPeak peak = bench::MeasureFmaPeak(threads);
    auto remeasure_peak = [&] {
      const bench::FmaPeak again = bench::MeasureFmaPeak(threads);
      peak.f32_gflops = std::max(peak.f32_gflops, again.f32_gflops);
      peak.bf16_gflops = std::max(peak.bf16_gflops, again.bf16_gflops);
      peak.avx512_bf16_gflops = std::max(peak.avx512_bf16_gflops, again.avx512_bf16_gflops);
    };
    SetGemmThreads(threads);
    openblas_set_num_threads(threads);
    std::vector<CaseTimes> times(selected.size());
    for (int round = 0; round < rounds; ++round) {
      if (round > 0) remeasure_peak();
      for (size_t i = 0; i < selected.size(); ++i) {
        MeasureCase(*selected[i], threads, peak, &times[i]);
      }
    }
    remeasure_peak();
    std::printf(
        "{\"bench\":\"fma_peak\",\"threads\":%d,\"f32_isa\":\"%s\",\"f32_gflops\":%.1f,"
        "\"bf16_isa\":\"%s\",\"bf16_gflops\":%.1f,\"avx512_bf16_gflops\":%.1f,"
        "\"measurements\":%d}\n",
        threads, peak.f32_isa.c_str(), peak.f32_gflops, peak.bf16_isa.c_str(), peak.bf16_gflops,
        peak.avx512_bf16_gflops, rounds + 1);
    // Per dtype and yardstick (the peak, the sustained peak, the concurrent
    // products against the peak): the case furthest below it, and how many
    // cases reach the goal.
    struct Tally {
      const char* name = nullptr;
      double frac = 0.0;
      int cases = 0, at_goal = 0;
      void Take(const char* case_name, double case_frac) {
        ++cases;
        if (name == nullptr || case_frac < frac) {
          name = case_name;
          frac = case_frac;
        }
        // As printed, to two decimals: a line that reads 0.90 counts.
        if (std::round(case_frac * 100) >= kGoalFrac * 100) ++at_goal;
      }
    };
    Tally of_peak[2], of_sustained[2], of_concurrent[2];
    for (size_t i = 0; i < selected.size(); ++i) {
      const Case& s = *selected[i];
      const CaseTimes& t = times[i];
      const double flops = 2.0 * s.batch * s.m * s.n * s.k;
      const double blas_gflops = flops / t.blas / 1e9;
      for (int d = 0; d < 2; ++d) {
        const DType dtype = kDTypes[d];
        const double tpx_gflops = flops / t.tpx[d] / 1e9;
        const double peak_gflops = d == 0 ? peak.f32_gflops : peak.bf16_gflops;
        auto frac = [&](double g) { return peak_gflops > 0 ? g / peak_gflops : 0.0; };
        const double sustained_frac =
            t.sustained_gflops[d] > 0 ? tpx_gflops / t.sustained_gflops[d] : 0.0;
        const double concurrent_gflops =
            threads > 1 ? threads * flops / t.concurrent[d] / 1e9 : tpx_gflops;
        if (!IsDecode(s)) {
          of_peak[d].Take(s.name, frac(tpx_gflops));
          of_sustained[d].Take(s.name, sustained_frac);
          of_concurrent[d].Take(s.name, frac(concurrent_gflops));
        }
        std::string line = absl::StrFormat(
            "{\"case\":\"%s\",\"shape\":\"%dx%dx%d\",\"op\":\"%c%c\",\"batch\":%d,"
            "\"threads\":%d,\"rounds\":%d,\"dtype\":\"%s\",\"tpx_gflops\":%.1f,"
            "\"openblas_gflops\":%.1f,\"ratio\":%.2f,\"peak_gflops\":%.1f,"
            "\"tpx_frac_of_peak\":%.2f,\"sustained_peak_gflops\":%.1f,"
            "\"tpx_frac_of_sustained_peak\":%.2f",
            s.name, s.m, s.k, s.n, s.trans_a ? 'T' : 'N', s.trans_b ? 'T' : 'N', s.batch, threads,
            rounds, std::string(DTypeName(dtype)), tpx_gflops, blas_gflops,
            tpx_gflops / blas_gflops, peak_gflops, frac(tpx_gflops), t.sustained_gflops[d],
            sustained_frac);
        if (threads > 1) {
          line += absl::StrFormat(",\"concurrent_frac_of_peak\":%.2f,\"split_vs_concurrent\":%.2f",
                                  frac(concurrent_gflops), tpx_gflops / concurrent_gflops);
        }
        if (d == 0) {
          line += absl::StrFormat(",\"openblas_frac_of_peak\":%.2f,\"openblas_core\":\"%s\"",
                                  frac(blas_gflops), openblas_get_corename());
          if (const char* own = std::getenv(kOwnCoreEnv); own != nullptr) {
            line += absl::StrFormat(",\"openblas_own_core\":\"%s\"", own);
          }
        } else {
          // The bf16 goal is relative to tpx's own f32 path.
          line += absl::StrFormat(",\"vs_tpx_f32\":%.2f", t.tpx[0] / t.tpx[1]);
        }
        std::printf("%s}\n", line.c_str());
      }
    }
    for (int d = 0; d < 2; ++d) {
      if (of_peak[d].name == nullptr) continue;
      std::string line = absl::StrFormat(
          "{\"bench\":\"gemm_min\",\"threads\":%d,\"dtype\":\"%s\",\"case\":\"%s\","
          "\"tpx_frac_of_peak\":%.2f,\"sustained_case\":\"%s\","
          "\"tpx_frac_of_sustained_peak\":%.2f,\"cases\":%d,\"at_goal\":%d,"
          "\"at_goal_sustained\":%d",
          threads, std::string(DTypeName(kDTypes[d])), of_peak[d].name, of_peak[d].frac,
          of_sustained[d].name, of_sustained[d].frac, of_peak[d].cases, of_peak[d].at_goal,
          of_sustained[d].at_goal);
      if (threads > 1)
        line += absl::StrFormat(",\"concurrent_at_goal\":%d", of_concurrent[d].at_goal);
      std::printf("%s}\n", line.c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace tpx

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string core = absl::GetFlag(FLAGS_openblas_core);
  if (core != "auto" && core != "env") {
    std::fprintf(stderr, "gemm: --openblas_core must be auto or env, not '%s'\n", core.c_str());
    return 2;
  }
  // OpenBLAS reads OPENBLAS_CORETYPE once, when it loads: hence restarts.
  if (core == "auto" && std::getenv(tpx::kOwnCoreEnv) == nullptr) {
    // A host that pins an older core type would halve OpenBLAS on AVX-512
    // CPUs and flatter tpx; once unset, the restarted bench keeps running.
    if (std::getenv("OPENBLAS_CORETYPE") != nullptr || std::getenv("OPENBLAS_L2_SIZE") != nullptr) {
      unsetenv("OPENBLAS_CORETYPE");
      unsetenv("OPENBLAS_L2_SIZE");
      execv("/proc/self/exe", argv);
      std::perror("gemm: restarting without OPENBLAS_CORETYPE");
      return 1;
    }
    const std::string own = openblas_get_corename();
    if (const char* better = tpx::IsSseOnlyOpenBlasCore(own) ? tpx::OpenBlasCoreForCpu() : nullptr;
        better != nullptr) {
      setenv(tpx::kOwnCoreEnv, own.c_str(), 1);
      setenv("OPENBLAS_CORETYPE", better, 1);
      execv("/proc/self/exe", argv);
      std::perror("gemm: restarting with OPENBLAS_CORETYPE");
      return 1;
    }
  }
  return tpx::Main();
}
