// The training loop of the GPT example: builds the parallel groups and the
// model, then runs AdamW steps with warm-up + cosine learning rates,
// global-norm gradient clipping across tensor-parallel ranks and
// data-parallel gradient averaging (when world > TP), evaluating on the
// validation split every so often.
//
//   TrainOptions options;            // defaults: the "few minutes on 2 cores" run
//   options.tp = 2;
//   TPX_ASSIGN_OR_RETURN(TrainResult r, Train(*world, dataset, options, PrintProgress));
//
// With save_dir set, the run saves a sharded checkpoint (sharded_state/):
// model, AdamW moments and step counts, the schedule and data position (the
// step) and the RNG tracker states; `resume` continues from the latest one
// at any TP size (bit-identical losses at the same TP size).
//
// With model.dtype kBF16 the model computes in bf16 and AdamW keeps f32
// master weights (optim/adamw.h); checkpoints hold the masters (f32), so
// bf16 and f32 runs can resume from each other's checkpoints.
//
// Every rank runs Train; the progress callback and the result are the same
// on all of them (losses are averaged over data-parallel replicas).
#ifndef TPX_EXAMPLES_GPT_TRAINER_H_
#define TPX_EXAMPLES_GPT_TRAINER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "examples/gpt/dataset.h"
#include "examples/gpt/model.h"
#include "examples/gpt/sampling.h"

namespace tpx::gpt {

struct TrainOptions {
  GptConfig model;
  int tp = 2;
  int64_t batch = 16;  // sequences per data-parallel replica per step
  int64_t steps = 500;
  int64_t warmup_steps = 50;
  double lr = 6e-3;
  double min_lr = 3e-4;
  double weight_decay = 0.1;
  double clip_norm = 1.0;
  // With model.dtype kBF16: reduce gradients over tp (sequence-parallel
  // partials) and dp in f32 (Megatron's accumulate_allreduce_grads_in_fp32)
  // or in bf16 (optim/grad_sync.h).
  DType grad_reduce_dtype = DType::kF32;
  int64_t log_interval = 10;
  int64_t eval_interval = 100;  // also after the last step; 0 = only then
  int64_t eval_batches = 4;
  int64_t sample_tokens = 200;  // text sampled after training; 0 = none
  std::string prompt = "And the LORD said unto Moses,";
  SamplingOptions sampling{.temperature = 0.7, .top_p = 0.9};
  // Checkpoints: saved under save_dir every save_every steps (0: none in
  // between) and after the run's last step; empty = no saving.
  std::string save_dir;
  int64_t save_every = 0;
  // Write checkpoints on a background thread while training goes on (each
  // is committed before the next save starts and before Train returns).
  bool async_save = false;
  // Continue from the latest checkpoint in save_dir, if there is one.
  bool resume = false;
  // Start from the weights of this checkpoint (root or one directory, any
  // TP size) with a fresh optimizer. Not together with a resume that finds
  // a checkpoint.
  std::string load;
  // End this run after this many steps in total (< 0: `steps`); the
  // learning-rate schedule still spans `steps`.
  int64_t stop_after = -1;
};

// One logged step.
struct StepRecord {
  int64_t step = 0;  // 1-based: steps done
  double loss = 0;   // training loss of this step
  double val_loss = -1;  // when evaluated at this step, else < 0
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;  // training tokens/s since the start (all replicas, no eval)
  double elapsed_s = 0;
  double eta_s = 0;
};

struct TrainResult {
  int64_t first_step = 0;      // steps done before this run (resumed from)
  std::vector<double> losses;  // the training loss of every step this run took
  std::vector<StepRecord> log;  // the records passed to the callback
  double final_val_loss = -1;
  double tokens_per_s = 0;
  int64_t num_parameters = 0;
  std::string sample;  // prompt + sampled continuation (examples/gpt/generator.h)
  std::string checkpoint;  // the last checkpoint saved, if any
};

// Collective over world. Errors: world size not divisible by options.tp,
// model/optimizer errors, communication failures.
absl::StatusOr<TrainResult> Train(comm::Communicator& world, const ByteDataset& data,
                                  const TrainOptions& options,
                                  const std::function<void(const StepRecord&)>& on_log = {});

}  // namespace tpx::gpt

#endif  // TPX_EXAMPLES_GPT_TRAINER_H_
