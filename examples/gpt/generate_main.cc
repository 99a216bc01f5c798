// Generates text from the GPT example with tensor parallelism and a KV cache,
// streaming it to stdout as it is produced.
//
//   bazel run -c opt //examples/gpt:generate -- --nproc=2 --tp=2
//       --prompt="In the beginning" --max_new_tokens=200 --temperature=0.7 --top_p=0.9
//
//   bazel run -c opt //examples/gpt:generate -- --nproc=4 --tp=4 --load=$PWD/gpt_checkpoint
//
// The model is described by the same flags as training (--d_model, --n_heads,
// ..., --seed). --load takes its weights from a checkpoint written by
// //examples/gpt:train at any TP size (the checkpoint root or one of its
// directories); a checkpoint whose tensors do not fit the model is an error
// naming the tensor. Without --load the weights are the seeded initial ones.
// Starts its own ranks (--nproc) unless a launcher already did. Rank 0
// prints; every rank computes the same tokens.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/init.h"
#include "core/status_macros.h"
#include "examples/gpt/dataset.h"
#include "examples/gpt/generator.h"
#include "examples/gpt/model.h"
#include "examples/gpt/model_flags.h"
#include "examples/gpt/program.h"
#include "examples/gpt/sampling_flags.h"
#include "parallel/parallel_state.h"
#include "rng/tracker.h"
#include "sharded_state/load.h"

ABSL_FLAG(int, nproc, 1, "Ranks to start on this machine (ignored under a launcher).");
ABSL_FLAG(int, tp, 1, "Tensor-parallel size (divides the world size and the heads).");
ABSL_FLAG(std::string, backend, "", "Communication backend plugin (default: --tpx_comm_backend).");
ABSL_FLAG(std::string, prompt, "And the LORD said unto Moses,", "Text to continue.");
ABSL_FLAG(int64_t, max_new_tokens, 200, "Bytes to generate per sample.");
ABSL_FLAG(int, stop_byte, -1, "Stop a sample after this byte (e.g. 10 for a newline); -1: none.");
ABSL_FLAG(int64_t, num_samples, 1, "Samples generated together from the prompt (rank 0 streams "
          "the first; the others are printed at the end).");
ABSL_FLAG(uint64_t, sample_seed, 1234, "Seed of the sampling draws.");
ABSL_FLAG(std::string, load, "",
          "Checkpoint to take the weights from (written by //examples/gpt:train at any TP "
          "size); empty: the seeded initial weights.");

namespace tpx::gpt {
namespace {

absl::Status RankMain() {
  comm::InitOptions init;
  init.backend = absl::GetFlag(FLAGS_backend);
  TPX_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> world, comm::Init(init));
  TPX_ASSIGN_OR_RETURN(auto state, parallel::ParallelState::Create(*world, absl::GetFlag(FLAGS_tp)));
  comm::Communicator& tp = state->tp();
  const bool leader = world->rank() == 0;
  TPX_ASSIGN_OR_RETURN(SamplingOptions sampling, SamplingOptionsFromFlags());
  const int64_t samples = absl::GetFlag(FLAGS_num_samples);
  if (samples < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num_samples ", samples, " must be at least 1"));
  }

  TPX_ASSIGN_OR_RETURN(GptConfig config, GptConfigFromFlags());
  TPX_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model, GptModel::Create(tp, config));
  const std::string load = UserPath(absl::GetFlag(FLAGS_load));
  if (!load.empty()) {
    // Checkpoints hold f32 weights (a bf16 run saves its f32 masters): a
    // bf16 model loads them into f32 copies and rounds them into its own.
    TPX_ASSIGN_OR_RETURN(std::vector<sharded_state::ShardedTensor> weights, model->ShardedState());
    std::vector<sharded_state::ShardedTensor> staged;
    for (const sharded_state::ShardedTensor& w : weights) {
      if (w.dtype == DType::kF32) {
        staged.push_back(w);
        continue;
      }
      TPX_ASSIGN_OR_RETURN(Tensor f32, Tensor::Empty(w.local.shape(), DType::kF32));
      TPX_ASSIGN_OR_RETURN(sharded_state::ShardedTensor s, w.WithTensor(w.name, f32));
      staged.push_back(std::move(s));
    }
    TPX_RETURN_IF_ERROR(sharded_state::LoadShardedState(*world, load, staged).status());
    for (size_t i = 0; i < weights.size(); ++i) {
      if (weights[i].dtype != DType::kF32) {
        TPX_RETURN_IF_ERROR(weights[i].local.CopyFrom(staged[i].local));
      }
    }
  }
  TPX_RETURN_IF_ERROR(rng::ModelParallelManualSeed(absl::GetFlag(FLAGS_sample_seed), tp.rank(), 0,
                                                   0, rng::SeedMode::kTpInvariant));
  TPX_ASSIGN_OR_RETURN(std::unique_ptr<Generator> generator,
                       Generator::Create(*model, {.max_batch = samples}));

  const std::string prompt = absl::GetFlag(FLAGS_prompt);
  const std::vector<std::vector<int64_t>> prompts(samples, Encode(prompt));
  GenerateOptions o{.max_new_tokens = absl::GetFlag(FLAGS_max_new_tokens),
                    .stop_byte = absl::GetFlag(FLAGS_stop_byte),
                    .sampling = sampling};
  if (leader) {
    std::fprintf(stderr, "world %d, tp %d, backend %s; %lld-layer model, d_model %lld, %lld "
                 "parameters (%s)\n",
                 world->size(), tp.size(), world->backend().c_str(),
                 static_cast<long long>(model->config().n_layers),
                 static_cast<long long>(model->config().d_model),
                 static_cast<long long>(model->NumParameters()),
                 load.empty() ? "seeded weights" : ("weights from " + load).c_str());
    std::fputs(prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  int64_t produced = 0;
  const absl::Time start = absl::Now();
  TPX_ASSIGN_OR_RETURN(
      std::vector<std::vector<int64_t>> out,
      generator->Generate(prompts, o, [&](int64_t seq, int64_t token) {
        ++produced;
        if (!leader || seq != 0) return;
        std::putchar(static_cast<int>(token));
        std::fflush(stdout);
      }));
  const double s = absl::ToDoubleSeconds(absl::Now() - start);
  if (leader) {
    std::putchar('\n');
    std::fflush(stdout);
    for (int64_t i = 1; i < samples; ++i) {
      std::printf("--- sample %lld ---\n%s\n", static_cast<long long>(i), Decode(out[i]).c_str());
    }
    std::fprintf(stderr, "%lld bytes in %.2f s (%.1f bytes/s, prefill included)\n",
                 static_cast<long long>(produced), s, static_cast<double>(produced) / std::max(s, 1e-9));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tpx::gpt

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tpx::gpt::RunProgram("generate", absl::GetFlag(FLAGS_nproc), tpx::gpt::RankMain);
}
