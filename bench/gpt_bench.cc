// Training throughput of the GPT example at TP=1 and TP=2 (one data-parallel
// replica), forking its own ranks. One JSON line per TP size:
//   {"bench":"gpt","tp":2,"dtype":"f32","tokens_per_s":...,"step_ms":...,"final_loss":...,...}
//
//   bazel run -c opt //bench:gpt -- [--steps=20] [--tps=1,2] [--dtype=bf16] [--d_model=128 ...]
// final_loss is the training loss of the last step (the same seed and
// batches for every dtype and TP size, so runs compare).
// tokens_per_s counts training tokens (batch x seq_len per step) over all
// steps, the first included; validation time is excluded. Each rank gets
// cores / TP GEMM threads unless TPX_NUM_THREADS says otherwise.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "comm/init.h"
#include "core/gemm.h"
#include "examples/gpt/dataset.h"
#include "examples/gpt/launch.h"
#include "examples/gpt/model_flags.h"
#include "examples/gpt/trainer.h"

ABSL_FLAG(std::string, tps, "1,2", "Tensor-parallel sizes to measure (world = TP).");
ABSL_FLAG(int64_t, steps, 20, "Optimizer steps per measurement.");

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
        "{\"bench\":\"gpt\",\"tp\":%d,\"dtype\":\"%s\",\"tokens_per_s\":%.1f,\"step_ms\":%.2f,"
        "\"final_loss\":%.5f,\"params\":%lld,\"steps\":%lld,\"batch\":%lld,\"seq_len\":%lld,"
        "\"d_model\":%lld,\"n_layers\":%lld,\"sequence_parallel\":%s,\"recompute\":%s,"
        "\"gemm_threads_per_rank\":%d}\n",
        tp, std::string(DTypeName(o.model.dtype)).c_str(), r->tokens_per_s,
        1000.0 * tokens_per_step / r->tokens_per_s,
        r->losses.empty() ? -1.0 : r->losses.back(),
        static_cast<long long>(r->num_parameters), static_cast<long long>(o.steps),
        static_cast<long long>(o.batch), static_cast<long long>(o.model.seq_len),
        static_cast<long long>(o.model.d_model), static_cast<long long>(o.model.n_layers),
        o.model.sequence_parallel ? "true" : "false", o.model.activation_checkpointing ? "true" : "false",
        GemmThreads());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace tpx::gpt

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  int failures = 0;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_tps), ',')) {
    int tp = 0;
    if (!absl::SimpleAtoi(s, &tp) || tp < 1) {
      std::fprintf(stderr, "gpt bench: bad --tps entry '%s'\n", std::string(s).c_str());
      return 2;
    }
    if (tpx::gpt::RunLocalRanks(tp, [tp] { return tpx::gpt::MeasureRank(tp); }) != 0) ++failures;
  }
  return failures == 0 ? 0 : 1;
}
