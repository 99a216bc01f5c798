#include "examples/gpt/model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "core/autograd/attention.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/ops.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "layers/init.h"
#include "loss/cross_entropy.h"
#include "optim/grad_sync.h"
#include "parallel/mappings.h"
#include "rng/dropout.h"
#include "rng/random.h"
#include "rng/tracker.h"

namespace tpx::gpt {
namespace {

constexpr double kInitStd = 0.02;

absl::StatusOr<Variable> Filled(Shape shape, double value, std::string name, DType dtype,
                                Device device) {
  TPX_ASSIGN_OR_RETURN(Tensor t, Tensor::Full(std::move(shape), value, dtype, device));
  return Variable(t, /*requires_grad=*/true, std::move(name));
}

}  // namespace

absl::StatusOr<std::unique_ptr<GptModel>> GptModel::Create(comm::Communicator& tp,
                                                           const GptConfig& c) {
  const int tp_size = tp.size();
  if (c.vocab_size < 1 || c.seq_len < 1 || c.d_model < 1 || c.n_heads < 1 || c.n_layers < 1 ||
      c.d_ff < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GptModel: every size must be positive; got vocab_size ", c.vocab_size, ", seq_len ",
        c.seq_len, ", d_model ", c.d_model, ", n_heads ", c.n_heads, ", n_layers ", c.n_layers,
        ", d_ff ", c.d_ff));
  }
  if (c.d_model % c.n_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("GptModel: d_model ", c.d_model,
                                                   " is not a multiple of n_heads ", c.n_heads));
  }
  if (c.n_heads % tp_size != 0 || c.d_ff % tp_size != 0 || c.vocab_size % tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GptModel: n_heads ", c.n_heads, ", d_ff ", c.d_ff, " and vocab_size ", c.vocab_size,
        " must all be divisible by the tensor-parallel size ", tp_size));
  }
  if (c.sequence_parallel && c.seq_len % tp_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("GptModel: sequence parallelism needs seq_len ",
                                                   c.seq_len, " divisible by the TP size ",
                                                   tp_size));
  }
  if (c.dtype != DType::kF32 && c.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat("GptModel: dtype must be f32 or bf16, got ",
                                                   std::string(DTypeName(c.dtype))));
  }
  if (!(c.dropout >= 0 && c.dropout < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("GptModel: dropout ", c.dropout,
                                                   " outside [0, 1)"));
  }
  auto model = std::unique_ptr<GptModel>(new GptModel(tp, c));
  model->heads_per_rank_ = c.n_heads / tp_size;
  model->first_head_ = model->heads_per_rank_ * tp.rank();
  const bool sp = c.sequence_parallel;
  // Every weight gets its own seed, derived from the model seed and its place
  // in the model, so layers are independent and TP-size invariant.
  uint64_t next_seed = c.seed * 1000003ull;

  TPX_ASSIGN_OR_RETURN(
      auto emb, layers::VocabParallelEmbedding::Create(tp, c.vocab_size, c.d_model,
                                                       {.sequence_parallel = sp,
                                                        .init_method = layers::NormalInit(kInitStd),
                                                        .seed = ++next_seed,
                                                        .params_dtype = c.dtype,
                                                        .device = c.device}));
  model->embedding_ = std::make_unique<layers::VocabParallelEmbedding>(std::move(emb));
  model->AddParam(model->embedding_->weight(), false, false, true);

  TPX_ASSIGN_OR_RETURN(Tensor pos, Tensor::Empty({c.seq_len, c.d_model}, DType::kF32, c.device));
  TPX_RETURN_IF_ERROR(layers::FillNormal(pos, ++next_seed, 0.0, kInitStd));
  TPX_ASSIGN_OR_RETURN(pos, pos.To(c.dtype));
  model->positions_ = Variable(pos, true, "positions");
  model->AddParam(model->positions_, true, sp, true);

  // GPT-2's scaled init of the projections that write into the residual stream.
  const double out_std = kInitStd / std::sqrt(2.0 * static_cast<double>(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    Block b;
    const std::string p = absl::StrCat("block", l, ".");
    TPX_ASSIGN_OR_RETURN(b.ln1_w, Filled({c.d_model}, 1.0, p + "ln1.weight", c.dtype, c.device));
    TPX_ASSIGN_OR_RETURN(b.ln1_b, Filled({c.d_model}, 0.0, p + "ln1.bias", c.dtype, c.device));
    TPX_ASSIGN_OR_RETURN(b.ln2_w, Filled({c.d_model}, 1.0, p + "ln2.weight", c.dtype, c.device));
    TPX_ASSIGN_OR_RETURN(b.ln2_b, Filled({c.d_model}, 0.0, p + "ln2.bias", c.dtype, c.device));
    // Fused QKV rows are [q | k | v], each head-major; stride 3 hands every
    // rank the q, k and v rows of its own heads.
    TPX_ASSIGN_OR_RETURN(
        auto qkv, layers::ColumnParallelLinear::Create(tp, c.d_model, 3 * c.d_model,
                                                       {.sequence_parallel = sp,
                                                        .stride = 3,
                                                        .init_method = layers::NormalInit(kInitStd),
                                                        .seed = ++next_seed,
                                                        .params_dtype = c.dtype,
                                                        .device = c.device}));
    TPX_ASSIGN_OR_RETURN(auto attn_out, layers::RowParallelLinear::Create(
                                            tp, c.d_model, c.d_model,
                                            {.input_is_parallel = true,
                                             .skip_bias_add = true,
                                             .sequence_parallel = sp,
                                             .init_method = layers::NormalInit(out_std),
                                             .seed = ++next_seed,
                                             .params_dtype = c.dtype,
                                             .device = c.device}));
    TPX_ASSIGN_OR_RETURN(
        auto fc1, layers::ColumnParallelLinear::Create(tp, c.d_model, c.d_ff,
                                                       {.skip_bias_add = true,
                                                        .sequence_parallel = sp,
                                                        .init_method = layers::NormalInit(kInitStd),
                                                        .seed = ++next_seed,
                                                        .params_dtype = c.dtype,
                                                        .device = c.device}));
    TPX_ASSIGN_OR_RETURN(
        auto fc2, layers::RowParallelLinear::Create(tp, c.d_ff, c.d_model,
                                                    {.input_is_parallel = true,
                                                     .skip_bias_add = true,
                                                     .sequence_parallel = sp,
                                                     .init_method = layers::NormalInit(out_std),
                                                     .seed = ++next_seed,
                                                     .params_dtype = c.dtype,
                                                     .device = c.device}));
    b.qkv = std::make_unique<layers::ColumnParallelLinear>(std::move(qkv));
    b.attn_out = std::make_unique<layers::RowParallelLinear>(std::move(attn_out));
    b.fc1 = std::make_unique<layers::ColumnParallelLinear>(std::move(fc1));
    b.fc2 = std::make_unique<layers::RowParallelLinear>(std::move(fc2));
    for (const Variable* v : {&b.ln1_w, &b.ln1_b}) model->AddParam(*v, true, sp, false);
    model->AddParam(b.qkv->weight(), false, false, true);
    model->AddParam(b.qkv->bias(), false, false, false);
    model->AddParam(b.attn_out->weight(), false, false, true);
    model->AddParam(b.attn_out->bias(), true, sp, false);
    for (const Variable* v : {&b.ln2_w, &b.ln2_b}) model->AddParam(*v, true, sp, false);
    model->AddParam(b.fc1->weight(), false, false, true);
    model->AddParam(b.fc1->bias(), false, false, false);
    model->AddParam(b.fc2->weight(), false, false, true);
    model->AddParam(b.fc2->bias(), true, sp, false);
    model->blocks_.push_back(std::move(b));
  }
  TPX_ASSIGN_OR_RETURN(model->lnf_w_, Filled({c.d_model}, 1.0, "lnf.weight", c.dtype, c.device));
  TPX_ASSIGN_OR_RETURN(model->lnf_b_, Filled({c.d_model}, 0.0, "lnf.bias", c.dtype, c.device));
  model->AddParam(model->lnf_w_, true, sp, false);
  model->AddParam(model->lnf_b_, true, sp, false);
  return model;
}

void GptModel::AddParam(const Variable& v, bool tp_duplicate, bool sp_partial, bool decay) {
  params_.push_back(ModelParam{v, tp_duplicate, sp_partial, decay});
}

int64_t GptModel::NumParameters() const {
  int64_t n = 0;
  for (const ModelParam& p : params_) {
    n += p.tp_duplicate ? p.var.value().numel() : p.var.value().numel() * tp_->size();
  }
  return n;
}

absl::StatusOr<std::vector<sharded_state::ShardedTensor>> GptModel::ShardedState() const {
  using sharded_state::ShardedTensor;
  std::vector<ShardedTensor> state;
  auto append = [&](absl::StatusOr<std::vector<ShardedTensor>> part) -> absl::Status {
    if (!part.ok()) return part.status();
    for (ShardedTensor& t : *part) state.push_back(std::move(t));
    return absl::OkStatus();
  };
  auto replicated = [&](const std::string& name, const Variable& v) -> absl::Status {
    TPX_ASSIGN_OR_RETURN(ShardedTensor t, ShardedTensor::Replicated(name, v.value(), tp_->rank()));
    state.push_back(std::move(t));
    return absl::OkStatus();
  };
  TPX_RETURN_IF_ERROR(append(embedding_->ShardedState("embedding.")));
  TPX_RETURN_IF_ERROR(replicated("positions", positions_));
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const Block& b = blocks_[l];
    const std::string p = absl::StrCat("block", l, ".");
    TPX_RETURN_IF_ERROR(replicated(p + "ln1.weight", b.ln1_w));
    TPX_RETURN_IF_ERROR(replicated(p + "ln1.bias", b.ln1_b));
    TPX_RETURN_IF_ERROR(append(b.qkv->ShardedState(p + "qkv.")));
    TPX_RETURN_IF_ERROR(append(b.attn_out->ShardedState(p + "attn_out.")));
    TPX_RETURN_IF_ERROR(replicated(p + "ln2.weight", b.ln2_w));
    TPX_RETURN_IF_ERROR(replicated(p + "ln2.bias", b.ln2_b));
    TPX_RETURN_IF_ERROR(append(b.fc1->ShardedState(p + "fc1.")));
    TPX_RETURN_IF_ERROR(append(b.fc2->ShardedState(p + "fc2.")));
  }
  TPX_RETURN_IF_ERROR(replicated("lnf.weight", lnf_w_));
  TPX_RETURN_IF_ERROR(replicated("lnf.bias", lnf_b_));
  return state;
}

absl::StatusOr<Variable> GptModel::HiddenDropout(const Variable& x, int64_t seq_len,
                                                 bool training) const {
  if (!training || config_.dropout == 0) return x;
  const int64_t local = x.shape()[0];
  const int64_t offset = config_.sequence_parallel ? local * tp_->rank() : 0;
  rng::ShardSpec shard{{seq_len, x.shape()[1], x.shape()[2]}, 0, offset, local};
  TPX_ASSIGN_OR_RETURN(rng::RngFork fork, rng::GetRngTracker().Fork());
  return rng::Dropout(x, config_.dropout, training, &shard);
}

absl::StatusOr<Variable> GptModel::BiasDropoutResidual(const layers::LinearOutput& out,
                                                       const Variable& residual, int64_t seq_len,
                                                       bool training) const {
  const Variable& x = out.output;
  if (!training || config_.dropout == 0) {
    return rng::BiasDropoutAdd(x, out.output_bias, residual, 0.0, /*training=*/false);
  }
  const int64_t local = x.shape()[0];
  const int64_t offset = config_.sequence_parallel ? local * tp_->rank() : 0;
  rng::ShardSpec shard{{seq_len, x.shape()[1], x.shape()[2]}, 0, offset, local};
  TPX_ASSIGN_OR_RETURN(rng::RngFork fork, rng::GetRngTracker().Fork());
  return rng::BiasDropoutAdd(x, out.output_bias, residual, config_.dropout, training, &shard);
}

absl::StatusOr<Variable> GptModel::Attention(const Variable& qkv, int64_t t, int64_t b,
                                             bool training) const {
  const int64_t hl = heads_per_rank_;
  const int64_t hd = config_.d_model / config_.n_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  if (!training || config_.dropout == 0) return ag::CausalSelfAttention(qkv, hl, hd, scale);
  // Attention dropout needs the probabilities as a tensor of their own: the
  // composed ops, with the mask drawn for this rank's heads as a slice of the
  // full [B, H, T, T] probabilities, so it does not depend on the TP size.
  auto dropout = [&](const Variable& probs) -> absl::StatusOr<Variable> {
    TPX_ASSIGN_OR_RETURN(Variable p, ag::Reshape(probs, {b, hl, t, t}));
    rng::ShardSpec shard{{b, config_.n_heads, t, t}, 1, first_head_, hl};
    TPX_ASSIGN_OR_RETURN(rng::RngFork fork, rng::GetRngTracker().Fork());
    TPX_ASSIGN_OR_RETURN(p, rng::Dropout(p, config_.dropout, training, &shard));
    return ag::Reshape(p, {b * hl, t, t});
  };
  return ag::ComposedCausalSelfAttention(qkv, hl, hd, scale, dropout);
}

absl::StatusOr<Variable> GptModel::BlockForward(const Block& blk, const Variable& x, int64_t t,
                                                int64_t b, bool training) const {
  TPX_ASSIGN_OR_RETURN(Variable h, ag::LayerNorm(x, blk.ln1_w, blk.ln1_b, kLayerNormEps));
  TPX_ASSIGN_OR_RETURN(layers::LinearOutput qkv, blk.qkv->Forward(h));
  TPX_ASSIGN_OR_RETURN(Variable ctx, Attention(qkv.output, t, b, training));
  TPX_ASSIGN_OR_RETURN(layers::LinearOutput attn, blk.attn_out->Forward(ctx));
  TPX_ASSIGN_OR_RETURN(Variable x1, BiasDropoutResidual(attn, x, t, training));

  TPX_ASSIGN_OR_RETURN(h, ag::LayerNorm(x1, blk.ln2_w, blk.ln2_b, kLayerNormEps));
  TPX_ASSIGN_OR_RETURN(layers::LinearOutput up, blk.fc1->Forward(h));
  TPX_ASSIGN_OR_RETURN(Variable g, ag::BiasGelu(up.output, up.output_bias));
  TPX_ASSIGN_OR_RETURN(layers::LinearOutput down, blk.fc2->Forward(g));
  return BiasDropoutResidual(down, x1, t, training);
}

absl::StatusOr<Variable> GptModel::Logits(const Tensor& tokens, bool training) const {
  if (tokens.dim() != 2 || tokens.size(0) > config_.seq_len ||
      (config_.sequence_parallel && tokens.size(0) % tp_->size() != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GptModel::Logits: tokens must be [T, B] with T <= seq_len ", config_.seq_len,
        (config_.sequence_parallel ? " and T divisible by the TP size" : ""), "; got ",
        tokens.ToString()));
  }
  const int64_t t = tokens.size(0), b = tokens.size(1);
  const bool sp = config_.sequence_parallel;
  Variable x;
  if (sp) {
    // The embedding takes [B, T] and returns this rank's [T/tp, B, D].
    TPX_ASSIGN_OR_RETURN(Tensor bt, tokens.Transpose(0, 1));
    TPX_ASSIGN_OR_RETURN(bt, bt.Contiguous());
    TPX_ASSIGN_OR_RETURN(x, embedding_->Forward(bt));
  } else {
    TPX_ASSIGN_OR_RETURN(x, embedding_->Forward(tokens));
  }
  const int64_t local_t = x.shape()[0];
  const int64_t first_t = sp ? local_t * tp_->rank() : 0;
  TPX_ASSIGN_OR_RETURN(Variable pos, ag::Narrow(positions_, 0, first_t, local_t));
  TPX_ASSIGN_OR_RETURN(pos, ag::Unsqueeze(pos, 1));
  TPX_ASSIGN_OR_RETURN(x, ag::Add(x, pos));
  TPX_ASSIGN_OR_RETURN(x, HiddenDropout(x, t, training));

  for (const Block& blk : blocks_) {
    if (config_.activation_checkpointing && GradModeEnabled()) {
      auto fn = [this, &blk, t, b, training](
                    absl::Span<const Variable> in) -> absl::StatusOr<std::vector<Variable>> {
        TPX_ASSIGN_OR_RETURN(Variable y, BlockForward(blk, in[0], t, b, training));
        return std::vector<Variable>{y};
      };
      TPX_ASSIGN_OR_RETURN(std::vector<Variable> out,
                           checkpoint::Checkpoint(fn, /*distribute_saved_activations=*/false,
                                                  {x}, tp_));
      x = out[0];
    } else {
      TPX_ASSIGN_OR_RETURN(x, BlockForward(blk, x, t, b, training));
    }
  }
  TPX_ASSIGN_OR_RETURN(x, ag::LayerNorm(x, lnf_w_, lnf_b_, kLayerNormEps));
  // The tied output projection uses vocabulary-sharded rows, so the gradient
  // of x is partial on each rank: summed in backward by the mapping.
  if (sp) {
    TPX_ASSIGN_OR_RETURN(x, parallel::GatherFromSequenceParallelRegion(*tp_, x, true));
  } else {
    TPX_ASSIGN_OR_RETURN(x, parallel::CopyToTensorParallelRegion(*tp_, x));
  }
  return ag::Linear(x, embedding_->weight());
}

absl::StatusOr<Variable> GptModel::Loss(const Tensor& tokens, const Tensor& targets,
                                        bool training) const {
  TPX_ASSIGN_OR_RETURN(Variable logits, Logits(tokens, training));
  TPX_ASSIGN_OR_RETURN(Variable per_token,
                       loss::VocabParallelCrossEntropy(logits, targets, tp_, {}));
  return loss::MeanOverNonIgnored(per_token, targets);
}

absl::Status GptModel::AllReduceSequenceParallelGrads(DType reduce_dtype) const {
  if (!config_.sequence_parallel || tp_->size() == 1) return absl::OkStatus();
  for (const ModelParam& p : params_) {
    if (!p.sequence_parallel_partial) continue;
    TPX_RETURN_IF_ERROR(
        optim::AllReduceGradient(*tp_, p.var, comm::ReduceOp::kSum, reduce_dtype));
  }
  return absl::OkStatus();
}

}  // namespace tpx::gpt
