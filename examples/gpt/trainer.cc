#include "examples/gpt/trainer.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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
#include "sharded_state/load.h"
#include "sharded_state/metadata.h"
#include "sharded_state/save.h"

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

// RNG states as text for the checkpoint metadata: "active=seed:offset;name=seed:offset;...".
// The tracker's states are the same on every rank in the TP-invariant seeding
// Train uses, so rank 0's stand for all.
std::string EncodeRngStates(const rng::AllRngStates& s) {
  std::string out = absl::StrCat("active=", s.active_state.seed, ":", s.active_state.offset);
  for (const auto& [name, state] : s.tracker_states) {
    absl::StrAppend(&out, ";", name, "=", state.seed, ":", state.offset);
  }
  return out;
}

absl::StatusOr<rng::AllRngStates> DecodeRngStates(const std::string& text) {
  rng::AllRngStates states;
  bool have_active = false;
  for (absl::string_view item : absl::StrSplit(text, ';')) {
    std::vector<std::string> kv = absl::StrSplit(item, '=');
    std::vector<std::string> so = kv.size() == 2 ? absl::StrSplit(kv[1], ':')
                                                 : std::vector<std::string>{};
    rng::GeneratorState g;
    if (so.size() != 2 || !absl::SimpleAtoi(so[0], &g.seed) ||
        !absl::SimpleAtoi(so[1], &g.offset)) {
      return absl::DataLossError(absl::StrCat("checkpoint RNG states '", text, "' are malformed"));
    }
    if (kv[0] == "active") {
      states.active_state = g;
      have_active = true;
    } else {
      states.tracker_states[kv[0]] = g;
    }
  }
  if (!have_active) return absl::DataLossError("checkpoint RNG states lack the active generator");
  return states;
}

constexpr char kRngKey[] = "rng_states";
constexpr char kParamStepsName[] = "optimizer.param_steps";

// Model, AdamW moments and per-parameter step counts as one sharded state.
// param_steps: an i64 [num_params] tensor (replicated). The model's tensors
// are the optimizer's f32 masters (the parameters themselves in f32), so a
// checkpoint holds f32 weights whatever the training dtype; after loading
// into them, AdamW::RefreshWorkingWeights() updates bf16 parameters.
absl::StatusOr<std::vector<sharded_state::ShardedTensor>> TrainingState(
    const GptModel& model, const optim::AdamW& adam, const Tensor& param_steps, int tp_rank,
    bool with_optimizer) {
  TPX_ASSIGN_OR_RETURN(std::vector<sharded_state::ShardedTensor> state, model.ShardedState());
  const size_t n = state.size();
  for (size_t i = 0; i < n; ++i) {  // ShardedState() lists params() in order
    TPX_ASSIGN_OR_RETURN(state[i], state[i].WithTensor(state[i].name, adam.master(i)));
  }
  if (!with_optimizer) return state;
  for (size_t i = 0; i < n; ++i) {
    TPX_ASSIGN_OR_RETURN(auto m, state[i].WithTensor("optimizer.exp_avg." + state[i].name,
                                                     adam.exp_avg(i)));
    TPX_ASSIGN_OR_RETURN(auto v, state[i].WithTensor("optimizer.exp_avg_sq." + state[i].name,
                                                     adam.exp_avg_sq(i)));
    state.push_back(std::move(m));
    state.push_back(std::move(v));
  }
  TPX_ASSIGN_OR_RETURN(
      auto steps, sharded_state::ShardedTensor::Replicated(kParamStepsName, param_steps, tp_rank));
  state.push_back(std::move(steps));
  return state;
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
  const int64_t end = o.stop_after >= 0 ? std::min(o.stop_after, o.steps) : o.steps;
  int64_t start = 0;
  TPX_ASSIGN_OR_RETURN(Tensor param_steps,
                       Tensor::Zeros({static_cast<int64_t>(model->params().size())}, DType::kI64));
  if (o.resume && !o.save_dir.empty()) {
    absl::StatusOr<std::string> dir = sharded_state::ResolveCheckpointDir(o.save_dir);
    if (dir.ok()) {
      // The RNG states first: a checkpoint without them changes nothing.
      TPX_ASSIGN_OR_RETURN(sharded_state::CheckpointMetadata header,
                           sharded_state::ReadMetadata(*dir));
      auto rng_text = header.user.find(kRngKey);
      if (rng_text == header.user.end()) {
        return absl::DataLossError(absl::StrCat("checkpoint ", *dir, " has no RNG states"));
      }
      TPX_ASSIGN_OR_RETURN(rng::AllRngStates rng_states, DecodeRngStates(rng_text->second));
      TPX_ASSIGN_OR_RETURN(auto tensors, TrainingState(*model, adam, param_steps, tp.rank(), true));
      TPX_ASSIGN_OR_RETURN(sharded_state::CheckpointMetadata meta,
                           sharded_state::LoadShardedState(world, *dir, tensors));
      TPX_RETURN_IF_ERROR(adam.RestoreStepCounts(meta.step, param_steps.ToVector<int64_t>()));
      TPX_RETURN_IF_ERROR(adam.RefreshWorkingWeights());
      rng::SetAllRngStates(rng_states);
      start = meta.step;
    } else if (!absl::IsNotFound(dir.status())) {
      return dir.status();
    }
  }
  if (start == 0 && !o.load.empty()) {
    TPX_ASSIGN_OR_RETURN(auto tensors, TrainingState(*model, adam, param_steps, tp.rank(), false));
    TPX_RETURN_IF_ERROR(sharded_state::LoadShardedState(world, o.load, tensors).status());
    TPX_RETURN_IF_ERROR(adam.RefreshWorkingWeights());
  }
  result.first_step = start;
  std::optional<sharded_state::PendingSave> pending;
  auto finish_pending = [&]() -> absl::Status {
    if (!pending.has_value()) return absl::OkStatus();
    absl::StatusOr<std::string> dir = pending->Wait();
    pending.reset();
    TPX_RETURN_IF_ERROR(dir.status());
    result.checkpoint = *dir;
    return absl::OkStatus();
  };
  auto save = [&](int64_t done) -> absl::Status {
    TPX_RETURN_IF_ERROR(finish_pending());
    TPX_ASSIGN_OR_RETURN(Tensor counts,
                         Tensor::FromVector<int64_t>(adam.param_steps(), param_steps.shape()));
    TPX_RETURN_IF_ERROR(param_steps.CopyFrom(counts));
    TPX_ASSIGN_OR_RETURN(auto tensors, TrainingState(*model, adam, param_steps, tp.rank(), true));
    sharded_state::SaveOptions save_options;
    save_options.step = done;
    save_options.user_metadata = {{kRngKey, EncodeRngStates(rng::GetAllRngStates())},
                                  {"data_position", absl::StrCat(done)},
                                  {"lr_schedule_step", absl::StrCat(done)}};
    if (o.async_save) {
      TPX_ASSIGN_OR_RETURN(sharded_state::PendingSave p, sharded_state::StartShardedSave(
                                                             *state, o.save_dir, tensors,
                                                             save_options));
      pending.emplace(std::move(p));
      return absl::OkStatus();
    }
    TPX_ASSIGN_OR_RETURN(result.checkpoint, sharded_state::SaveShardedState(*state, o.save_dir,
                                                                            tensors, save_options));
    return absl::OkStatus();
  };
  const double tokens_per_step =
      static_cast<double>(o.batch * o.model.seq_len) * static_cast<double>(dp.size());
  const absl::Time t0 = absl::Now();
  double eval_s = 0;  // excluded from the training throughput
  for (int64_t step = start; step < end; ++step) {
    TPX_ASSIGN_OR_RETURN(Batch b, data.SampleBatch(Split::kTrain, o.batch, o.model.seq_len,
                                                   BatchSeed(o.model.seed, step),
                                                   dp.rank() * o.batch));
    TPX_ASSIGN_OR_RETURN(Variable loss, model->Loss(b.tokens, b.targets, /*training=*/true));
    TPX_RETURN_IF_ERROR(Backward(loss));
    TPX_RETURN_IF_ERROR(model->AllReduceSequenceParallelGrads(o.grad_reduce_dtype));
    TPX_RETURN_IF_ERROR(optim::AllReduceGradients(dp, all_params, o.grad_reduce_dtype));
    // Clipped inside the update: the optimizer reads the gradients scaled.
    TPX_ASSIGN_OR_RETURN(double grad_norm, optim::GlobalGradNorm(clip_params, &tp));
    TPX_ASSIGN_OR_RETURN(double clip_scale, optim::ClipCoefficient(grad_norm, o.clip_norm));
    const double lr = schedule.At(step);
    TPX_RETURN_IF_ERROR(adam.Step(lr, clip_scale));
    adam.ZeroGrad();

    TPX_ASSIGN_OR_RETURN(double mean_loss, AverageOver(dp, loss.value().Item()));
    result.losses.push_back(mean_loss);
    const int64_t done = step + 1;
    if (!o.save_dir.empty() &&
        (done == end || (o.save_every > 0 && done % o.save_every == 0))) {
      TPX_RETURN_IF_ERROR(save(done));
    }
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
    r.elapsed_s = absl::ToDoubleSeconds(absl::Now() - t0);
    const double run_steps = static_cast<double>(done - start);
    r.tokens_per_s = tokens_per_step * run_steps / std::max(r.elapsed_s - eval_s, 1e-9);
    r.eta_s = r.elapsed_s / run_steps * static_cast<double>(end - done);
    result.log.push_back(r);
    if (on_log) on_log(r);
  }
  TPX_RETURN_IF_ERROR(finish_pending());
  const double total_s = absl::ToDoubleSeconds(absl::Now() - t0) - eval_s;
  result.tokens_per_s =
      tokens_per_step * static_cast<double>(end - start) / std::max(total_s, 1e-9);
  if (start == end && o.eval_batches > 0) {  // nothing trained (e.g. only loaded): evaluate
    TPX_ASSIGN_OR_RETURN(result.final_val_loss, Evaluate(*model, data, o, dp));
  }
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
