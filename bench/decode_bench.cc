// Text-generation speed of the GPT example's KV-cache decoder
// (examples/gpt/generator.h): prefill throughput, decode throughput and
// per-token decode latency, at TP=1 with 1 and 2 GEMM threads and at TP=2
// (2 processes x 1 thread), batch 1 and 8. One JSON line per case:
//   {"bench":"decode","tp":2,"threads":1,"dtype":"f32","batch":1,"prefill_tokens_per_s":...,
//    "decode_tokens_per_s":...,"token_ms_p50":...,"token_ms_p99":...,...}
//
//   bazel run -c opt //bench:decode -- [--cases=1x1,1x2,2x1] [--batches=1,8]
//       [--prompt_len=128] [--decode_tokens=100] [--d_model=512 --n_layers=4 ...]
//       [--dtype=bf16]
// A case is TPxTHREADS. Weights are the seeded initial ones (speed does not
// depend on them). Token latency is the wall time of one Decode call on rank
// 0: all layers, the collectives and the gathered full-vocabulary logits.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/init.h"
#include "core/gemm.h"
#include "core/status_macros.h"
#include "examples/gpt/flag_checks.h"
#include "examples/gpt/generator.h"
#include "examples/gpt/model.h"
#include "launch/local_job.h"
#include "parallel/parallel_state.h"

ABSL_FLAG(std::string, cases, "1x1,1x2,2x1", "TPxTHREADS cases (processes = TP).");
ABSL_FLAG(std::string, batches, "1,8", "Batch sizes (sequences decoded together).");
ABSL_FLAG(int64_t, prompt_len, 128, "Prefill length in tokens per sequence.");
ABSL_FLAG(int64_t, decode_tokens, 100, "Decode steps timed per batch.");
ABSL_FLAG(int64_t, seq_len, 256, "Model context (>= prompt_len + decode_tokens + 8).");
ABSL_FLAG(int64_t, d_model, 512, "Hidden size.");
ABSL_FLAG(int64_t, n_heads, 8, "Attention heads.");
ABSL_FLAG(int64_t, n_layers, 4, "Transformer blocks.");
ABSL_FLAG(int64_t, d_ff, 2048, "MLP hidden size.");
ABSL_FLAG(std::string, dtype, "f32", "Model dtype: f32 or bf16 (weights, activations, KV cache).");

namespace tpx::gpt {
namespace {

constexpr int64_t kWarmupSteps = 8;

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

absl::Status Measure(int tp_size, int threads, const std::vector<int64_t>& batches) {
  SetGemmThreads(threads);
  TPX_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> world, comm::Init());
  TPX_ASSIGN_OR_RETURN(auto state, parallel::ParallelState::Create(*world, tp_size));
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  TPX_ASSIGN_OR_RETURN(const DType model_dtype, F32OrBf16("dtype", dtype));
  const GptConfig config{.vocab_size = 256,
                         .seq_len = absl::GetFlag(FLAGS_seq_len),
                         .d_model = absl::GetFlag(FLAGS_d_model),
                         .n_heads = absl::GetFlag(FLAGS_n_heads),
                         .n_layers = absl::GetFlag(FLAGS_n_layers),
                         .d_ff = absl::GetFlag(FLAGS_d_ff),
                         .dtype = model_dtype};
  const int64_t prompt = absl::GetFlag(FLAGS_prompt_len), steps = absl::GetFlag(FLAGS_decode_tokens);
  if (prompt < 1 || steps < 1 || prompt + kWarmupSteps + steps > config.seq_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--prompt_len ", prompt, " + ", kWarmupSteps, " warm-up + --decode_tokens ", steps,
        " must fit in --seq_len ", config.seq_len, " (and both be >= 1)"));
  }
  TPX_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model, GptModel::Create(state->tp(), config));
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());
  TPX_ASSIGN_OR_RETURN(std::unique_ptr<Generator> gen,
                       Generator::Create(*model, {.max_batch = max_batch}));
  for (int64_t batch : batches) {
    std::vector<int64_t> ids(prompt * batch);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = 32 + static_cast<int64_t>(i % 90);
    TPX_ASSIGN_OR_RETURN(Tensor tokens, Tensor::FromVector<int64_t>(ids, {prompt, batch}));
    TPX_ASSIGN_OR_RETURN(Tensor next, Tensor::Full({batch}, 'e', DType::kI64));
    // Warm-up prefill (buffers, caches, GEMM primitives), then the timed one.
    TPX_RETURN_IF_ERROR(gen->Prefill(tokens).status());
    absl::Time t0 = absl::Now();
    TPX_RETURN_IF_ERROR(gen->Prefill(tokens).status());
    const double prefill_s = absl::ToDoubleSeconds(absl::Now() - t0);
    for (int64_t i = 0; i < kWarmupSteps; ++i) TPX_RETURN_IF_ERROR(gen->Decode(next).status());
    std::vector<double> ms;
    const absl::Time d0 = absl::Now();
    for (int64_t i = 0; i < steps; ++i) {
      const absl::Time s0 = absl::Now();
      TPX_RETURN_IF_ERROR(gen->Decode(next).status());
      ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - s0));
    }
    const double decode_s = absl::ToDoubleSeconds(absl::Now() - d0);
    if (world->rank() == 0) {
      std::printf(
          "{\"bench\":\"decode\",\"tp\":%d,\"threads\":%d,\"dtype\":\"%s\",\"batch\":%lld,"
          "\"prefill_tokens_per_s\":%.1f,\"decode_tokens_per_s\":%.1f,\"token_ms_p50\":%.3f,"
          "\"token_ms_p99\":%.3f,\"prompt_len\":%lld,\"decode_tokens\":%lld,\"d_model\":%lld,"
          "\"n_layers\":%lld,\"n_heads\":%lld,\"d_ff\":%lld,\"params\":%lld}\n",
          tp_size, threads, dtype.c_str(), static_cast<long long>(batch),
          static_cast<double>(prompt * batch) / prefill_s,
          static_cast<double>(steps * batch) / decode_s, Percentile(ms, 0.5), Percentile(ms, 0.99),
          static_cast<long long>(prompt), static_cast<long long>(steps),
          static_cast<long long>(config.d_model), static_cast<long long>(config.n_layers),
          static_cast<long long>(config.n_heads), static_cast<long long>(config.d_ff),
          static_cast<long long>(model->NumParameters()));
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tpx::gpt

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::vector<int64_t> batches;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
    int64_t b = 0;
    if (!absl::SimpleAtoi(s, &b) || b < 1) {
      std::fprintf(stderr, "decode bench: bad --batches entry '%s'\n", std::string(s).c_str());
      return 2;
    }
    batches.push_back(b);
  }
  int failures = 0;
  for (absl::string_view c : absl::StrSplit(absl::GetFlag(FLAGS_cases), ',')) {
    std::vector<std::string> parts = absl::StrSplit(c, 'x');
    int tp = 0, threads = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &tp) ||
        !absl::SimpleAtoi(parts[1], &threads) || tp < 1 || threads < 1) {
      std::fprintf(stderr, "decode bench: bad --cases entry '%s' (want TPxTHREADS)\n",
                   std::string(c).c_str());
      return 2;
    }
    const int code = tpx::launch::RunLocalRanks(tp, [tp, threads, &batches] {
      absl::Status s = tpx::gpt::Measure(tp, threads, batches);
      if (!s.ok()) std::fprintf(stderr, "decode bench: %s\n", s.ToString().c_str());
      return s.ok() ? 0 : 1;
    });
    if (code != 0) ++failures;
  }
  return failures == 0 ? 0 : 1;
}
