#include "examples/gpt/trainer.h"

#include <algorithm>
#include <cmath>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/status_macros.h"
#include "examples/gpt/generator.h"
#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/grad_sync.h"
#include "optim/lr_schedule.h"
#include "parallel/parallel_state.h"
#include "rng/tracker.h"

namespace tpx::gpt {
namespace {

// The global batch of a step; replica r takes its sequences
// [r * batch, (r + 1) * batch). Validation uses another seed range.
uint64_t BatchSeed(uint64_t seed, int64_t step) { return (seed << 32) ^ static_cast<uint64_t>(step); }

// Mean of a value over the data-parallel replicas.
absl::StatusOr<double> AverageOver(comm::Communicator& dp, double v) {
  float x = static_cast<float>(v);
  if (dp.size() > 1) {
    TPX_RETURN_IF_ERROR(dp.AllReduce(&x, 1, DType::kF32, comm::ReduceOp::kAvg).Wait());
  }
  return x;
}

absl::StatusOr<double> Evaluate(const GptModel& model, const ByteDataset& data,
                                const TrainOptions& o, comm::Communicator& dp) {
  NoGradGuard no_grad;
  double sum = 0;
  for (int64_t i = 0; i < o.eval_batches; ++i) {
    TPX_ASSIGN_OR_RETURN(Batch b, data.SampleBatch(Split::kValidation, o.batch, o.model.seq_len,
                                                   BatchSeed(o.model.seed + 7, i),
                                                   dp.rank() * o.batch));
    TPX_ASSIGN_OR_RETURN(Variable loss, model.Loss(b.tokens, b.targets, /*training=*/false));
    sum += loss.value().Item();
  }
  return AverageOver(dp, sum / static_cast<double>(o.eval_batches));
}

}  // namespace

absl::StatusOr<TrainResult> Train(comm::Communicator& world, const ByteDataset& data,
                                  const TrainOptions& o,
                                  const std::function<void(const StepRecord&)>& on_log) {
  if (o.sample_tokens > 0) {  // refuse a bad sample request before training, not after
    TPX_RETURN_IF_ERROR(Generator::CheckPrompt(o.model, Encode(o.prompt)));
    TPX_RETURN_IF_ERROR(ValidateSampling(o.sampling));
  }
  TPX_ASSIGN_OR_RETURN(auto state, parallel::ParallelState::Create(world, o.tp));
  comm::Communicator& tp = state->tp();
  comm::Communicator& dp = state->dp();
  // TP-invariant seeding: dropout masks are slices of the TP=1 masks.
  TPX_RETURN_IF_ERROR(rng::ModelParallelManualSeed(o.model.seed, tp.rank(), 0, 0,
                                                   rng::SeedMode::kTpInvariant));
  TPX_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model, GptModel::Create(tp, o.model));

  std::vector<optim::AdamW::Param> adam_params;
  std::vector<optim::ClipParam> clip_params;
  std::vector<Variable> all_params;
  for (const ModelParam& p : model->params()) {
    adam_params.push_back({p.var, p.weight_decay});
    clip_params.push_back({p.var, p.tp_duplicate});
    all_params.push_back(p.var);
  }
  TPX_ASSIGN_OR_RETURN(optim::AdamW adam,
                       optim::AdamW::Create(adam_params, {.beta1 = 0.9, .beta2 = 0.95,
                                                          .eps = 1e-8,
                                                          .weight_decay = o.weight_decay}));
  TPX_ASSIGN_OR_RETURN(auto schedule,
                       optim::WarmupCosineSchedule::Create({.max_lr = o.lr,
                                                            .min_lr = o.min_lr,
                                                            .warmup_steps = o.warmup_steps,
                                                            .total_steps = o.steps}));
  TrainResult result;
  result.num_parameters = model->NumParameters();
  const double tokens_per_step =
      static_cast<double>(o.batch * o.model.seq_len) * static_cast<double>(dp.size());
  const absl::Time start = absl::Now();
  double eval_s = 0;  // excluded from the training throughput
  for (int64_t step = 0; step < o.steps; ++step) {
    TPX_ASSIGN_OR_RETURN(Batch b, data.SampleBatch(Split::kTrain, o.batch, o.model.seq_len,
                                                   BatchSeed(o.model.seed, step),
                                                   dp.rank() * o.batch));
    TPX_ASSIGN_OR_RETURN(Variable loss, model->Loss(b.tokens, b.targets, /*training=*/true));
    TPX_RETURN_IF_ERROR(Backward(loss));
    TPX_RETURN_IF_ERROR(model->AllReduceSequenceParallelGrads());
    TPX_RETURN_IF_ERROR(optim::AllReduceGradients(dp, all_params));
    TPX_ASSIGN_OR_RETURN(double grad_norm, optim::ClipGradNorm(clip_params, o.clip_norm, &tp));
    const double lr = schedule.At(step);
    TPX_RETURN_IF_ERROR(adam.Step(lr));
    adam.ZeroGrad();

    TPX_ASSIGN_OR_RETURN(double mean_loss, AverageOver(dp, loss.value().Item()));
    result.losses.push_back(mean_loss);
    const int64_t done = step + 1;
    const bool last = done == o.steps;
    const bool eval = last || (o.eval_interval > 0 && done % o.eval_interval == 0);
    const bool log = eval || (o.log_interval > 0 && done % o.log_interval == 0) || done == 1;
    if (!log) continue;
    StepRecord r;
    r.step = done;
    r.loss = mean_loss;
    r.lr = lr;
    r.grad_norm = grad_norm;
    if (eval) {
      const absl::Time eval_start = absl::Now();
      TPX_ASSIGN_OR_RETURN(r.val_loss, Evaluate(*model, data, o, dp));
      result.final_val_loss = r.val_loss;
      eval_s += absl::ToDoubleSeconds(absl::Now() - eval_start);
    }
    r.elapsed_s = absl::ToDoubleSeconds(absl::Now() - start);
    r.tokens_per_s =
        tokens_per_step * static_cast<double>(done) / std::max(r.elapsed_s - eval_s, 1e-9);
    r.eta_s = r.elapsed_s / static_cast<double>(done) * static_cast<double>(o.steps - done);
    result.log.push_back(r);
    if (on_log) on_log(r);
  }
  const double total_s = absl::ToDoubleSeconds(absl::Now() - start) - eval_s;
  result.tokens_per_s = tokens_per_step * static_cast<double>(o.steps) / std::max(total_s, 1e-9);
  if (o.sample_tokens > 0) {
    TPX_ASSIGN_OR_RETURN(std::unique_ptr<Generator> generator, Generator::Create(*model));
    TPX_ASSIGN_OR_RETURN(
        std::vector<std::vector<int64_t>> sample,
        generator->Generate({Encode(o.prompt)},
                            {.max_new_tokens = o.sample_tokens, .sampling = o.sampling}));
    result.sample = Decode(sample[0]);
  }
  return result;
}

}  // namespace tpx::gpt
