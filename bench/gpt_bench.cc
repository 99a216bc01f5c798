// Training throughput of the GPT example at TP=1 and TP=2 (one data-parallel
// replica), forking its own ranks, beside the same model in eager PyTorch
// (bench/peers/gpt_pytorch.py, run when python3 can import torch). One JSON
// line per TP size and per PyTorch thread setting:
//   {"bench":"gpt","impl":"tpx","tp":2,"dtype":"f32","threads":1,"tokens_per_s":...,
//    "final_loss":...,...}
//   {"bench":"gpt","impl":"pytorch","tp":1,"dtype":"f32","threads":2,"omp_threads":1,
//    "blas_threads":2,"tokens_per_s":...,...}
//
//   bazel run -c opt //bench:gpt -- [--steps=20] [--tps=1,2] [--dtype=bf16] [--d_model=128 ...]
//       [--pytorch_threads=1:1,1:2,2:2] [--python=/usr/bin/python3]
//       [--pytorch_openblas_core=auto|env]
// final_loss is the training loss of the last step (the same seed and
// batches for every dtype and TP size, so runs compare).
// tokens_per_s counts training tokens (batch x seq_len per step) over all
// steps, the first included; validation time is excluded.
// steady_tokens_per_s (with more than 2 x kSteadyAfter steps; -1 without)
// counts only the steps after the first kSteadyAfter, which also pay for
// first touches of memory (a huge page's first fault can cost milliseconds
// in a virtual machine) and oneDNN's kernel generation; first_step_ms is
// the first step's time. The PyTorch lines carry both as well. Each rank gets
// cores / TP GEMM threads unless TPX_NUM_THREADS says otherwise ("threads").
// The PyTorch peer runs at every TP size of --tps and the same dtype (bf16:
// CPU autocast). At TP=1 it runs once per "omp:blas" entry of
// --pytorch_threads (its OpenMP and OpenBLAS pools are separate; the best
// setting differs by machine); at TP>1 as tpx's ranks do: TP processes over
// gloo, each with cores / TP threads. --pytorch_threads= (empty) skips it.
//
// Shared hosts: --contend=N starts N busy-loop processes for the duration of
// each tpx measurement (killed after it, and bounded: they die with this
// process and after --contend_limit_s). --wait_policies=auto,passive,spin
// measures, instead of the above, tpx at TP=1 (all cores) once per
// OpenMP wait policy, each in a fresh process (libgomp reads its settings
// when it loads) started after the contenders: auto = the choice of
// //core:omp_wait_policy for the load it sees at start; passive =
// OMP_WAIT_POLICY=PASSIVE; spin = libgomp's default spinning, given
// explicitly as GOMP_SPINCOUNT=300000 so that no automatic choice replaces
// it; spincount=N = GOMP_SPINCOUNT=N. The policies alternate over --rounds
// (each round starting one policy later);
// a "gpt_wait_policy" line per policy gives the median tokens/s and its
// ratio to the best fixed (non-auto) policy:
//   {"bench":"gpt_wait_policy","wait_policy":"auto","contenders":1,"rounds":3,
//    "tokens_per_s":...,"vs_best_fixed":0.98}
// --dtype_ratio (with --pytorch_threads= and --steps > 10) measures, instead,
// tpx's bf16 over f32 steady tokens/s at each TP size of --tps: the two
// dtypes alternate over --rounds, each run a fresh process, and one line per
// TP size gives the medians and the median of the rounds' ratios:
//   {"bench":"gpt_dtype_ratio","tp":1,"threads_per_rank":2,"rounds":3,
//    "f32_steady_tokens_per_s":...,"bf16_steady_tokens_per_s":...,"bf16_over_f32":1.61}
// --vs_pytorch measures, instead, tpx against the PyTorch peer at each TP
// size of --tps: over --rounds, tpx and the peer under every --pytorch_threads
// setting (at TP>1 the per-rank one) alternate, each run a fresh process (a
// round starts with tpx or with the peer in turn), and one line per TP size
// gives the medians, PyTorch's best setting and tpx over it, counting all
// steps (the first included) and the steady ones:
//   {"bench":"gpt_vs_pytorch","tp":1,"dtype":"f32","rounds":3,"tpx_tokens_per_s":...,
//    "pytorch_tokens_per_s":...,"pytorch_best_threads":"2:2","tpx_over_pytorch":1.52,
//    "tpx_steady_tokens_per_s":...,"pytorch_steady_tokens_per_s":...,
//    "tpx_over_pytorch_steady":1.64}
// Every tpx line carries "wait_policy" ("auto" when the library chose the
// setting, "environment" otherwise, or the --wait_policies entry),
// "omp_wait" (the settings in effect) and "contenders".
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/pytorch_peer.h"
#include "comm/init.h"
#include "core/gemm.h"
#include "core/omp_wait_policy.h"
#include "examples/gpt/dataset.h"
#include "examples/gpt/model_flags.h"
#include "examples/gpt/trainer.h"
#include "launch/local_job.h"

ABSL_FLAG(std::string, tps, "1,2", "Tensor-parallel sizes to measure (world = TP).");
ABSL_FLAG(int64_t, steps, 20, "Optimizer steps per measurement.");
ABSL_FLAG(std::string, pytorch_threads, "1:1,1:2,2:1,2:2",
          "PyTorch peer thread settings to measure, omp:blas each; empty = none.");

ABSL_FLAG(int, contend, 0,
          "Busy-loop processes competing with each tpx measurement (0-64), started before it "
          "and killed after it.");
ABSL_FLAG(int, contend_limit_s, 1800, "A contender exits on its own after this many seconds.");
ABSL_FLAG(std::string, wait_policies, "",
          "Measure tpx TP=1 (all cores) under each OpenMP wait policy instead: a list of auto, "
          "passive, spin, spincount=N.");
ABSL_FLAG(int, rounds, 1,
          "Rounds of --wait_policies or --dtype_ratio, the runs alternating (1-100).");
ABSL_FLAG(bool, vs_pytorch, false,
          "Measure tpx against the PyTorch peer at each TP size of --tps instead: both "
          "alternating over --rounds, each in a fresh process, with a summary line per TP size.");
ABSL_FLAG(bool, dtype_ratio, false,
          "Measure tpx's bf16 / f32 steady tokens/s at each TP size of --tps instead: f32 and "
          "bf16 alternating over --rounds, each in a fresh process.");

namespace tpx::gpt {
namespace {

// steady_tokens_per_s leaves out this many first steps.
constexpr int64_t kSteadyAfter = 5;
// Set for a --wait_policies child: its policy entry and the number of
// contenders its parent keeps running.
constexpr char kPolicyEnv[] = "TPX_GPT_BENCH_WAIT_POLICY";
constexpr char kContendersEnv[] = "TPX_GPT_BENCH_CONTENDERS";

std::string EnvOr(const char* name, const char* otherwise) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : otherwise;
}

// The OpenMP wait settings in effect ("default" when none).
std::string OmpWaitInEffect() {
  std::string s;
  for (const char* name : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"}) {
    if (const char* v = std::getenv(name); v != nullptr) {
      absl::StrAppend(&s, s.empty() ? "" : " ", name, "=", v);
    }
  }
  return s.empty() ? "default" : s;
}

// "auto" when //core:omp_wait_policy chose the setting in effect.
std::string WaitPolicyLabel() {
  if (const char* label = std::getenv(kPolicyEnv); label != nullptr) return label;
  const std::string marker = EnvOr(kOmpWaitAutoVariable, "");
  const size_t colon = marker.find(':');
  return colon != std::string::npos && marker.substr(colon + 1) == OmpWaitInEffect()
             ? "auto"
             : "environment";
}

int ContenderCount() {
  int n = 0;
  if (absl::SimpleAtoi(EnvOr(kContendersEnv, ""), &n)) return n;
  return absl::GetFlag(FLAGS_contend);
}

// Busy-loop processes, killed when this goes out of scope.
class Contenders {
 public:
  explicit Contenders(int n) {
    const pid_t parent = getpid();
    const unsigned limit = static_cast<unsigned>(std::max(1, absl::GetFlag(FLAGS_contend_limit_s)));
    for (int i = 0; i < n; ++i) {
      std::fflush(nullptr);
      const pid_t pid = fork();
      if (pid == 0) {
        // Dies with the bench, and on its own after the limit.
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(0);
        alarm(limit);
        volatile uint64_t spin = 0;
        for (;;) spin = spin + 1;
      }
      if (pid < 0) {
        std::perror("gpt bench: fork of a contender");
        break;
      }
      pids_.push_back(pid);
    }
  }
  // False when fewer than asked could be started.
  bool ok(int n) const { return static_cast<int>(pids_.size()) == n; }
  ~Contenders() {
    for (pid_t pid : pids_) kill(pid, SIGKILL);
    for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  }
  Contenders(const Contenders&) = delete;
  Contenders& operator=(const Contenders&) = delete;

 private:
  std::vector<pid_t> pids_;
};

int MeasureRank(int tp) {
  auto world = comm::Init();
  if (!world.ok()) {
    std::fprintf(stderr, "gpt bench: %s\n", world.status().ToString().c_str());
    return 1;
  }
  // The text only feeds batches; a repeated sentence is as fast as any.
  std::string text;
  while (text.size() < 200000) text += "In the beginning God created the heaven and the earth.\n";
  auto data = ByteDataset::FromText(text, 0.1);
  if (!data.ok()) return 1;
  TrainOptions o;
  auto config = GptConfigFromFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "gpt bench: %s\n", config.status().ToString().c_str());
    return 1;
  }
  o.model = *config;
  o.tp = tp;
  o.batch = absl::GetFlag(FLAGS_batch);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.warmup_steps = 1;
  // One log record at step kSteadyAfter: the start of the steady part.
  const bool steady = o.steps > 2 * kSteadyAfter;
  o.log_interval = steady ? kSteadyAfter : 0;
  o.eval_interval = 0;
  o.eval_batches = 1;
  o.sample_tokens = 0;
  auto r = Train(**world, *data, o);
  if (!r.ok()) {
    std::fprintf(stderr, "gpt bench: %s\n", r.status().ToString().c_str());
    return 1;
  }
  if ((*world)->rank() == 0) {
    const double tokens_per_step = static_cast<double>(o.batch * o.model.seq_len);
    double steady_tokens_per_s = -1, first_step_ms = -1;
    for (const StepRecord& rec : r->log) {
      // Step 1 is always logged.
      if (rec.step == 1) first_step_ms = 1000.0 * rec.elapsed_s;
      if (!steady || rec.step != kSteadyAfter) continue;
      // No evaluation before the last step: the record's time is all training.
      const double train_s = tokens_per_step * static_cast<double>(o.steps) / r->tokens_per_s;
      steady_tokens_per_s = tokens_per_step * static_cast<double>(o.steps - kSteadyAfter) /
                            std::max(train_s - rec.elapsed_s, 1e-9);
    }
    std::printf(
        "{\"bench\":\"gpt\",\"impl\":\"tpx\",\"tp\":%d,\"dtype\":\"%s\",\"threads\":%d,"
        "\"tokens_per_s\":%.1f,\"steady_tokens_per_s\":%.1f,\"step_ms\":%.2f,"
        "\"first_step_ms\":%.2f,"
        "\"final_loss\":%.5f,\"params\":%lld,"
        "\"steps\":%lld,\"batch\":%lld,\"seq_len\":%lld,\"d_model\":%lld,\"n_layers\":%lld,"
        "\"sequence_parallel\":%s,\"recompute\":%s,\"gemm_threads_per_rank\":%d,"
        "\"wait_policy\":\"%s\",\"omp_wait\":\"%s\",\"contenders\":%d}\n",
        tp, std::string(DTypeName(o.model.dtype)).c_str(), GemmThreads(), r->tokens_per_s,
        steady_tokens_per_s, 1000.0 * tokens_per_step / r->tokens_per_s, first_step_ms,
        r->losses.empty() ? -1.0 : r->losses.back(), static_cast<long long>(r->num_parameters),
        static_cast<long long>(o.steps), static_cast<long long>(o.batch),
        static_cast<long long>(o.model.seq_len), static_cast<long long>(o.model.d_model),
        static_cast<long long>(o.model.n_layers), o.model.sequence_parallel ? "true" : "false",
        o.model.activation_checkpointing ? "true" : "false", GemmThreads(),
        WaitPolicyLabel().c_str(), OmpWaitInEffect().c_str(), ContenderCount());
    std::fflush(stdout);
  }
  return 0;
}

// Runs the PyTorch peer with one thread setting (its JSON line copied to
// stdout, and also to *output when given); prints a "skipped" line when it
// cannot run. False when the setting is malformed.
bool RunPytorchPeer(int tp, absl::string_view setting, std::string* output = nullptr) {
  const absl::StatusOr<bench::PeerThreads> threads = bench::ParsePeerThreads(setting);
  if (!threads.ok()) {
    std::fprintf(stderr, "gpt bench: %s\n", std::string(threads.status().message()).c_str());
    return false;
  }
  absl::StatusOr<GptConfig> config = GptConfigFromFlags();
  const std::string dtype = config.ok() ? std::string(DTypeName(config->dtype)) : "f32";
  auto skipped = [&](absl::string_view why) {
    std::printf(
        "{\"bench\":\"gpt\",\"impl\":\"pytorch\",\"tp\":%d,\"dtype\":\"%s\",\"threads\":%d,"
        "\"omp_threads\":%d,\"blas_threads\":%d,\"skipped\":\"%s\"}\n",
        tp, dtype.c_str(), std::max(threads->omp, threads->blas), threads->omp, threads->blas,
        std::string(why).c_str());
    std::fflush(stdout);
    return true;
  };
  if (!config.ok()) return skipped(config.status().message());
  const GptConfig& c = *config;
  absl::StatusOr<std::string> out = bench::RunPytorchPeer(
      "bench/peers/gpt_pytorch.py",
      {absl::StrCat("--steps=", absl::GetFlag(FLAGS_steps)),
       absl::StrCat("--batch=", absl::GetFlag(FLAGS_batch)), absl::StrCat("--seq_len=", c.seq_len),
       absl::StrCat("--d_model=", c.d_model), absl::StrCat("--n_heads=", c.n_heads),
       absl::StrCat("--n_layers=", c.n_layers), absl::StrCat("--d_ff=", c.d_ff),
       absl::StrCat("--tp=", tp), absl::StrCat("--dtype=", dtype)},
      *threads);
  if (!out.ok()) return skipped(out.status().message());
  if (output != nullptr) output->append(*out);
  return true;
}

// The environment entry of a --wait_policies entry ("" for auto: the
// library chooses), or false when the entry is malformed.
bool WaitPolicySetting(absl::string_view policy, std::string* setting) {
  int64_t spins = 0;
  if (policy == "auto") {
    *setting = "";
  } else if (policy == "passive") {
    *setting = "OMP_WAIT_POLICY=PASSIVE";
  } else if (policy == "spin") {
    *setting = "GOMP_SPINCOUNT=300000";  // libgomp's default, made explicit
  } else if (absl::ConsumePrefix(&policy, "spincount=") && absl::SimpleAtoi(policy, &spins) &&
             spins >= 0) {
    *setting = absl::StrCat("GOMP_SPINCOUNT=", spins);
  } else {
    return false;
  }
  return true;
}

// The last value of "key" in JSON lines `text`, or -1.
double LastValue(absl::string_view text, absl::string_view key) {
  const std::string quoted = absl::StrCat("\"", key, "\":");
  double value = -1;
  for (size_t at = text.find(quoted); at != absl::string_view::npos;
       at = text.find(quoted, at + 1)) {
    value = std::strtod(std::string(text.substr(at + quoted.size(), 32)).c_str(), nullptr);
  }
  return value;
}

// Runs this program again with the environment minus the variables named
// in `drop` (prefixes of "NAME=") plus `add_env`, and argv plus `add_args`
// (later flags win); copies its output (also to *output when given).
// Returns the last value of "key" it printed, or a negative value when it
// failed (`what` names it then).
double RunSelf(const std::vector<std::string>& drop, const std::vector<std::string>& add_env,
               const std::vector<std::string>& add_args, const char* key, const std::string& what,
               int argc, char** argv, std::string* output = nullptr) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const absl::string_view entry(*e);
    if (std::any_of(drop.begin(), drop.end(),
                    [&](const std::string& d) { return absl::StartsWith(entry, d); })) {
      continue;
    }
    env.emplace_back(entry);
  }
  env.insert(env.end(), add_env.begin(), add_env.end());
  std::vector<std::string> args(argv, argv + argc);
  args.insert(args.end(), add_args.begin(), add_args.end());
  std::vector<char*> envp, argp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (std::string& a : args) argp.push_back(a.data());
  argp.push_back(nullptr);
  int fds[2];
  if (pipe(fds) != 0) return -1;
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execve("/proc/self/exe", argp.data(), envp.data());
    _exit(127);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return -1;
  }
  FILE* out = fdopen(fds[0], "r");
  std::string text;
  char buf[4096];
  while (out != nullptr && std::fgets(buf, sizeof(buf), out) != nullptr) {
    std::fputs(buf, stdout);
    text.append(buf);
  }
  const double value = LastValue(text, key);
  if (output != nullptr) *output = text;
  std::fflush(stdout);
  if (out != nullptr) fclose(out);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "gpt bench: the %s run failed (status %d)\n", what.c_str(), status);
    return -1;
  }
  return value;
}

// Runs this program again (tpx at TP=1 only) under one wait policy with
// `contenders` busy processes already running; copies its output and
// returns its tokens/s, or a negative value when it failed.
double MeasureUnderPolicy(absl::string_view policy, int contenders, int argc, char** argv) {
  std::string setting;
  if (!WaitPolicySetting(policy, &setting)) return -1;
  std::vector<std::string> add_env;
  if (!setting.empty()) add_env.push_back(setting);
  add_env.push_back(absl::StrCat(kPolicyEnv, "=", policy));
  add_env.push_back(absl::StrCat(kContendersEnv, "=", contenders));
  return RunSelf({"OMP_WAIT_POLICY=", "GOMP_SPINCOUNT=", absl::StrCat(kOmpWaitAutoVariable, "="),
                  absl::StrCat(kPolicyEnv, "="), absl::StrCat(kContendersEnv, "=")},
                 add_env,
                 {"--tps=1", "--pytorch_threads=", "--wait_policies=", "--contend=0",
                  "--rounds=1"},
                 "tokens_per_s", absl::StrCat("wait policy '", policy, "'"), argc, argv);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// --dtype_ratio: per TP size, f32 and bf16 runs alternating over --rounds
// (each round starting with the other dtype), each a fresh process; then one
// summary line per TP size with the medians and the median of the rounds'
// bf16 / f32 ratios. Returns the exit code.
int SweepDtypes(const std::vector<int>& tps, int argc, char** argv) {
  if (absl::GetFlag(FLAGS_steps) <= 2 * kSteadyAfter) {
    std::fprintf(stderr, "gpt bench: --dtype_ratio compares steady rates: give --steps > %lld\n",
                 static_cast<long long>(2 * kSteadyAfter));
    return 2;
  }
  const int rounds = absl::GetFlag(FLAGS_rounds);
  for (int tp : tps) {
    std::map<std::string, std::vector<double>> runs;
    std::vector<double> ratios;
    for (int round = 0; round < rounds; ++round) {
      std::map<std::string, double> this_round;
      for (int i = 0; i < 2; ++i) {
        const std::string dtype = (i + round) % 2 == 0 ? "f32" : "bf16";
        const double tps_value =
            RunSelf({}, {},
                    {absl::StrCat("--tps=", tp), absl::StrCat("--dtype=", dtype),
                     "--pytorch_threads=", "--dtype_ratio=false", "--wait_policies=",
                     "--rounds=1"},
                    "steady_tokens_per_s", absl::StrCat(dtype, " at TP=", tp), argc, argv);
        if (tps_value <= 0) return 1;
        runs[dtype].push_back(tps_value);
        this_round[dtype] = tps_value;
      }
      ratios.push_back(this_round["bf16"] / this_round["f32"]);
    }
    std::printf(
        "{\"bench\":\"gpt_dtype_ratio\",\"tp\":%d,\"threads_per_rank\":%d,\"rounds\":%d,"
        "\"f32_steady_tokens_per_s\":%.1f,\"bf16_steady_tokens_per_s\":%.1f,"
        "\"bf16_over_f32\":%.3f}\n",
        tp, std::max(1, GemmThreads() / tp), rounds, Median(runs["f32"]), Median(runs["bf16"]),
        Median(ratios));
    std::fflush(stdout);
  }
  return 0;
}

// The PyTorch peer's thread settings at one TP size: every --pytorch_threads
// entry at TP=1; at TP>1, like tpx's ranks, the cores split evenly over the
// TP processes.
std::vector<std::string> PeerSettingsFor(int tp, const std::vector<std::string>& settings) {
  if (tp == 1) return settings;
  const int per_rank = std::max(1, GemmThreads() / tp);
  return {absl::StrCat(per_rank, ":", per_rank)};
}

// --vs_pytorch: per TP size, tpx and the PyTorch peer (every setting of
// `settings` at TP=1, the per-rank one at TP>1) alternating over --rounds,
// each a fresh process; then one summary line per TP size. Returns the exit
// code.
int SweepVsPytorch(const std::vector<int>& tps, const std::vector<std::string>& settings, int argc,
                   char** argv) {
  const int rounds = absl::GetFlag(FLAGS_rounds);
  absl::StatusOr<GptConfig> config = GptConfigFromFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "gpt bench: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  for (int tp : tps) {
    const std::vector<std::string> peer_settings = PeerSettingsFor(tp, settings);
    std::vector<double> tpx_all, tpx_steady;
    std::map<std::string, std::vector<double>> peer_all, peer_steady;
    for (int round = 0; round < rounds; ++round) {
      for (int i = 0; i < 2; ++i) {
        if ((i + round) % 2 == 0) {
          std::string out;
          const double all =
              RunSelf({}, {},
                      {absl::StrCat("--tps=", tp), "--pytorch_threads=", "--vs_pytorch=false",
                       "--dtype_ratio=false", "--wait_policies=", "--rounds=1"},
                      "tokens_per_s", absl::StrCat("tpx at TP=", tp), argc, argv, &out);
          if (all <= 0) return 1;
          tpx_all.push_back(all);
          tpx_steady.push_back(LastValue(out, "steady_tokens_per_s"));
          continue;
        }
        for (const std::string& setting : peer_settings) {
          std::string out;
          if (!RunPytorchPeer(tp, setting, &out)) return 2;
          const double all = LastValue(out, "tokens_per_s");
          if (all <= 0) {
            std::fprintf(stderr, "gpt bench: the PyTorch peer (%s) gave no figure\n",
                         setting.c_str());
            return 1;
          }
          peer_all[setting].push_back(all);
          peer_steady[setting].push_back(LastValue(out, "steady_tokens_per_s"));
        }
      }
    }
    std::string best;
    for (const auto& [setting, v] : peer_all) {
      if (best.empty() || Median(v) > Median(peer_all[best])) best = setting;
    }
    double best_steady = -1;
    for (const auto& [setting, v] : peer_steady) best_steady = std::max(best_steady, Median(v));
    const double tpx_m = Median(tpx_all), peer_m = Median(peer_all[best]);
    const double tpx_s = Median(tpx_steady);
    std::printf(
        "{\"bench\":\"gpt_vs_pytorch\",\"tp\":%d,\"dtype\":\"%s\",\"rounds\":%d,"
        "\"tpx_tokens_per_s\":%.1f,\"pytorch_tokens_per_s\":%.1f,"
        "\"pytorch_best_threads\":\"%s\",\"tpx_over_pytorch\":%.3f,"
        "\"tpx_steady_tokens_per_s\":%.1f,\"pytorch_steady_tokens_per_s\":%.1f,"
        "\"tpx_over_pytorch_steady\":%.3f}\n",
        tp, std::string(DTypeName(config->dtype)).c_str(), rounds, tpx_m, peer_m, best.c_str(),
        tpx_m / peer_m, tpx_s, best_steady, best_steady > 0 ? tpx_s / best_steady : -1.0);
    std::fflush(stdout);
  }
  return 0;
}

// --wait_policies: the policies alternating over --rounds, then one summary
// line per policy. Returns the exit code.
int SweepWaitPolicies(const std::vector<std::string>& policies, int argc, char** argv) {
  const int contenders = absl::GetFlag(FLAGS_contend);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  std::map<std::string, std::vector<double>> runs;
  for (int round = 0; round < rounds; ++round) {
    // Each round starts at the next policy, so that none always runs first.
    for (size_t i = 0; i < policies.size(); ++i) {
      const std::string& policy = policies[(i + round) % policies.size()];
      Contenders busy(contenders);
      if (!busy.ok(contenders)) return 1;
      const double tps = MeasureUnderPolicy(policy, contenders, argc, argv);
      if (tps <= 0) return 1;
      runs[policy].push_back(tps);
    }
  }
  double best_fixed = -1;
  for (const auto& [policy, v] : runs) {
    if (policy != "auto") best_fixed = std::max(best_fixed, Median(v));
  }
  for (const std::string& policy : policies) {
    if (runs[policy].size() != static_cast<size_t>(rounds)) continue;  // listed twice
    const double m = Median(runs[policy]);
    std::string line = absl::StrFormat(
        "{\"bench\":\"gpt_wait_policy\",\"wait_policy\":\"%s\",\"contenders\":%d,"
        "\"rounds\":%d,\"tokens_per_s\":%.1f",
        policy, contenders, rounds, m);
    if (best_fixed > 0) absl::StrAppendFormat(&line, ",\"vs_best_fixed\":%.3f", m / best_fixed);
    std::printf("%s}\n", line.c_str());
    runs[policy].clear();
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace tpx::gpt

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (const absl::Status peer_flags = tpx::bench::CheckPeerFlags(); !peer_flags.ok()) {
    std::fprintf(stderr, "gpt bench: %s\n", std::string(peer_flags.message()).c_str());
    return 2;
  }
  const int contend = absl::GetFlag(FLAGS_contend);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  if (contend < 0 || contend > 64 || rounds < 1 || rounds > 100) {
    std::fprintf(stderr, "gpt bench: --contend must be in [0, 64] and --rounds in [1, 100]\n");
    return 2;
  }
  std::vector<std::string> policies =
      absl::StrSplit(absl::GetFlag(FLAGS_wait_policies), ',', absl::SkipEmpty());
  for (const std::string& p : policies) {
    std::string setting;
    if (!tpx::gpt::WaitPolicySetting(p, &setting)) {
      std::fprintf(stderr,
                   "gpt bench: bad --wait_policies entry '%s' (want auto, passive, spin or "
                   "spincount=N)\n",
                   p.c_str());
      return 2;
    }
  }
  if (!policies.empty()) return tpx::gpt::SweepWaitPolicies(policies, argc, argv);
  const std::string settings = absl::GetFlag(FLAGS_pytorch_threads);
  if (!settings.empty()) {
    for (absl::string_view s : absl::StrSplit(settings, ',')) {
      if (const auto threads = tpx::bench::ParsePeerThreads(s); !threads.ok()) {
        std::fprintf(stderr, "gpt bench: %s\n", std::string(threads.status().message()).c_str());
        return 2;
      }
    }
  }
  int failures = 0;
  std::vector<int> tps;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_tps), ',', absl::SkipEmpty())) {
    int tp = 0;
    if (!absl::SimpleAtoi(s, &tp) || tp < 1) {
      std::fprintf(stderr, "gpt bench: bad --tps entry '%s'\n", std::string(s).c_str());
      return 2;
    }
    tps.push_back(tp);
  }
  if (absl::GetFlag(FLAGS_vs_pytorch)) {
    if (settings.empty() || contend != 0 || absl::GetFlag(FLAGS_dtype_ratio)) {
      std::fprintf(stderr,
                   "gpt bench: --vs_pytorch needs --pytorch_threads and no --contend or "
                   "--dtype_ratio\n");
      return 2;
    }
    std::vector<std::string> peer_settings = absl::StrSplit(settings, ',');
    return tpx::gpt::SweepVsPytorch(tps, peer_settings, argc, argv);
  }
  if (absl::GetFlag(FLAGS_dtype_ratio)) {
    if (!settings.empty() || contend != 0) {
      std::fprintf(stderr, "gpt bench: --dtype_ratio measures tpx alone: give --pytorch_threads= "
                           "and no --contend\n");
      return 2;
    }
    return tpx::gpt::SweepDtypes(tps, argc, argv);
  }
  for (int tp : tps) {
    tpx::gpt::Contenders busy(contend);
    if (!busy.ok(contend)) return 1;
    if (tpx::launch::RunLocalRanks(tp, [tp] { return tpx::gpt::MeasureRank(tp); }) != 0) ++failures;
  }
  if (!settings.empty()) {
    const std::vector<std::string> entries = absl::StrSplit(settings, ',');
    for (int tp : tps) {
      for (const std::string& setting : tpx::gpt::PeerSettingsFor(tp, entries)) {
        if (!tpx::gpt::RunPytorchPeer(tp, setting)) return 2;
      }
    }
  }
  return failures == 0 ? 0 : 1;
}
