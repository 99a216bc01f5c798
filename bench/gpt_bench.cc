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
// final_loss is the training loss of the last step (the same seed and
// batches for every dtype and TP size, so runs compare).
// tokens_per_s counts training tokens (batch x seq_len per step) over all
// steps, the first included; validation time is excluded. Each rank gets
// cores / TP GEMM threads unless TPX_NUM_THREADS says otherwise ("threads").
// The PyTorch peer runs at every TP size of --tps and the same dtype (bf16:
// CPU autocast). At TP=1 it runs once per "omp:blas" entry of
// --pytorch_threads (its OpenMP and OpenBLAS pools are separate; the best
// setting differs by machine); at TP>1 as tpx's ranks do: TP processes over
// gloo, each with cores / TP threads. --pytorch_threads= (empty) skips it.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "comm/init.h"
#include "core/gemm.h"
#include "examples/gpt/dataset.h"
#include "examples/gpt/model_flags.h"
#include "examples/gpt/trainer.h"
#include "launch/local_job.h"

ABSL_FLAG(std::string, tps, "1,2", "Tensor-parallel sizes to measure (world = TP).");
ABSL_FLAG(int64_t, steps, 20, "Optimizer steps per measurement.");
ABSL_FLAG(std::string, pytorch_threads, "1:1,1:2,2:1,2:2",
          "PyTorch peer thread settings to measure, omp:blas each; empty = none.");
ABSL_FLAG(std::string, python, "/usr/bin/python3",
          "Interpreter for the PyTorch peer (Debian's python3-torch is under /usr/bin).");

namespace tpx::gpt {
namespace {

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
  o.log_interval = 0;
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
    std::printf(
        "{\"bench\":\"gpt\",\"impl\":\"tpx\",\"tp\":%d,\"dtype\":\"%s\",\"threads\":%d,"
        "\"tokens_per_s\":%.1f,\"step_ms\":%.2f,\"final_loss\":%.5f,\"params\":%lld,"
        "\"steps\":%lld,\"batch\":%lld,\"seq_len\":%lld,\"d_model\":%lld,\"n_layers\":%lld,"
        "\"sequence_parallel\":%s,\"recompute\":%s,\"gemm_threads_per_rank\":%d}\n",
        tp, std::string(DTypeName(o.model.dtype)).c_str(), GemmThreads(), r->tokens_per_s,
        1000.0 * tokens_per_step / r->tokens_per_s, r->losses.empty() ? -1.0 : r->losses.back(),
        static_cast<long long>(r->num_parameters), static_cast<long long>(o.steps),
        static_cast<long long>(o.batch), static_cast<long long>(o.model.seq_len),
        static_cast<long long>(o.model.d_model), static_cast<long long>(o.model.n_layers),
        o.model.sequence_parallel ? "true" : "false", o.model.activation_checkpointing ? "true" : "false",
        GemmThreads());
    std::fflush(stdout);
  }
  return 0;
}

// Runs the PyTorch peer with one thread setting and copies its JSON line;
// prints a "skipped" line when it cannot run. False when the setting is
// malformed.
bool ParseThreadSetting(absl::string_view setting, int* omp, int* blas) {
  std::vector<std::string> parts = absl::StrSplit(setting, ':');
  if (parts.size() == 2 && absl::SimpleAtoi(parts[0], omp) && absl::SimpleAtoi(parts[1], blas) &&
      *omp >= 1 && *blas >= 1) {
    return true;
  }
  std::fprintf(stderr, "gpt bench: bad --pytorch_threads entry '%s' (want omp:blas, both >= 1)\n",
               std::string(setting).c_str());
  return false;
}

bool RunPytorchPeer(int tp, absl::string_view setting) {
  int omp = 0, blas = 0;
  if (!ParseThreadSetting(setting, &omp, &blas)) return false;
  absl::StatusOr<GptConfig> config = GptConfigFromFlags();
  const std::string dtype = config.ok() ? std::string(DTypeName(config->dtype)) : "f32";
  const char* script = "bench/peers/gpt_pytorch.py";
  auto skipped = [&](const std::string& why) {
    std::printf(
        "{\"bench\":\"gpt\",\"impl\":\"pytorch\",\"tp\":%d,\"dtype\":\"%s\",\"threads\":%d,"
        "\"omp_threads\":%d,\"blas_threads\":%d,\"skipped\":\"%s\"}\n",
        tp, dtype.c_str(), std::max(omp, blas), omp, blas, why.c_str());
    std::fflush(stdout);
    return true;
  };
  if (access(script, R_OK) != 0) return skipped("bench/peers/gpt_pytorch.py not found");
  const std::string python = absl::GetFlag(FLAGS_python);
  if (access(python.c_str(), X_OK) != 0) return skipped("no python at " + python);
  if (!config.ok()) return skipped(std::string(config.status().message()));
  const GptConfig& c = *config;
  const std::string cmd = absl::StrCat(
      "'", python, "' ", script, " --steps=", absl::GetFlag(FLAGS_steps),
      " --batch=", absl::GetFlag(FLAGS_batch), " --seq_len=", c.seq_len,
      " --d_model=", c.d_model, " --n_heads=", c.n_heads, " --n_layers=", c.n_layers,
      " --d_ff=", c.d_ff, " --omp_threads=", omp, " --blas_threads=", blas, " --tp=", tp,
      " --dtype=", dtype);
  std::fflush(stdout);
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return skipped("could not start python");
  char buf[4096];
  bool printed = false;
  while (std::fgets(buf, sizeof(buf), pipe) != nullptr) {
    std::fputs(buf, stdout);
    printed = true;
  }
  const int rc = pclose(pipe);
  if (!printed || rc != 0) return skipped(absl::StrCat("peer exited with status ", rc));
  std::fflush(stdout);
  return true;
}

}  // namespace
}  // namespace tpx::gpt

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string settings = absl::GetFlag(FLAGS_pytorch_threads);
  if (!settings.empty()) {
    for (absl::string_view s : absl::StrSplit(settings, ',')) {
      int omp = 0, blas = 0;
      if (!tpx::gpt::ParseThreadSetting(s, &omp, &blas)) return 2;
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
  for (int tp : tps) {
    if (tpx::launch::RunLocalRanks(tp, [tp] { return tpx::gpt::MeasureRank(tp); }) != 0) ++failures;
  }
  if (!settings.empty()) {
    for (int tp : tps) {
      if (tp == 1) {
        for (absl::string_view s : absl::StrSplit(settings, ',')) {
          if (!tpx::gpt::RunPytorchPeer(1, s)) return 2;
        }
        continue;
      }
      // Like tpx's ranks: the cores split evenly over the TP processes.
      const int per_rank = std::max(1, tpx::GemmThreads() / tp);
      const std::string setting = absl::StrCat(per_rank, ":", per_rank);
      if (!tpx::gpt::RunPytorchPeer(tp, setting)) return 2;
    }
  }
  return failures == 0 ? 0 : 1;
}
