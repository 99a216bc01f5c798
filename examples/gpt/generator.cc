#include "examples/gpt/generator.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/attention.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "rng/philox.h"
#include "rng/tracker.h"

namespace tpx::gpt {
namespace {

layers::InferenceNorm LayerNormOf(const Variable& w, const Variable& b) {
  return layers::InferenceNorm{.kind = layers::NormKind::kLayerNorm,
                               .weight = w.value(),
                               .bias = b.value(),
                               .eps = GptModel::kLayerNormEps};
}

template <typename T>
absl::StatusOr<Tensor> OnDevice(const std::vector<T>& v, Shape shape, Device device) {
  TPX_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector<T>(v, std::move(shape)));
  return t.To(device);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Generator>> Generator::Create(const GptModel& model,
                                                             GeneratorOptions options) {
  const GptConfig& c = model.config();
  comm::Communicator& tp = model.tp();
  if (options.max_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Generator: max_batch ", options.max_batch, " must be >= 1"));
  }
  if (c.n_heads % tp.size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Generator: n_heads ", c.n_heads,
                                                   " is not divisible by the TP size ",
                                                   tp.size()));
  }
  auto gen = std::unique_ptr<Generator>(new Generator(model, options));
  const int64_t heads = c.n_heads / tp.size(), head_dim = c.d_model / c.n_heads;
  for (const GptModel::Block& b : model.blocks()) {
    Layer l;
    TPX_ASSIGN_OR_RETURN(auto qkv, layers::InferenceLayerNormColumnParallelLinear::Create(
                                       tp, *b.qkv, LayerNormOf(b.ln1_w, b.ln1_b)));
    TPX_ASSIGN_OR_RETURN(auto fc1, layers::InferenceLayerNormColumnParallelLinear::Create(
                                       tp, *b.fc1, LayerNormOf(b.ln2_w, b.ln2_b)));
    TPX_ASSIGN_OR_RETURN(auto attn_out, layers::InferenceRowParallelLinear::Create(tp, *b.attn_out));
    TPX_ASSIGN_OR_RETURN(auto fc2, layers::InferenceRowParallelLinear::Create(tp, *b.fc2));
    l.qkv = std::make_unique<layers::InferenceLayerNormColumnParallelLinear>(std::move(qkv));
    l.fc1 = std::make_unique<layers::InferenceLayerNormColumnParallelLinear>(std::move(fc1));
    l.attn_out = std::make_unique<layers::InferenceRowParallelLinear>(std::move(attn_out));
    l.fc2 = std::make_unique<layers::InferenceRowParallelLinear>(std::move(fc2));
    const Shape cache{options.max_batch, heads, c.seq_len, head_dim};
    TPX_ASSIGN_OR_RETURN(l.k_cache, Tensor::Zeros(cache, c.dtype, c.device));
    TPX_ASSIGN_OR_RETURN(l.v_cache, Tensor::Zeros(cache, c.dtype, c.device));
    gen->layers_.push_back(std::move(l));
  }
  if (gen->layers_.empty()) return absl::InvalidArgumentError("Generator: the model has no layers");
  gen->final_norm_ = LayerNormOf(model.final_norm_weight(), model.final_norm_bias());
  return gen;
}

absl::Status Generator::CheckTokens(const std::vector<int64_t>& tokens, const char* what) const {
  const int64_t vocab = model_->config().vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("Generator: ", what, " token ", tokens[i],
                                                     " at index ", i,
                                                     " is outside the vocabulary [0, ", vocab,
                                                     ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status Generator::CheckPrompt(const GptConfig& c, const std::vector<int64_t>& p) {
  if (p.empty()) {
    return absl::InvalidArgumentError(
        "Generator: the prompt is empty; give at least one byte to continue from");
  }
  if (static_cast<int64_t>(p.size()) > c.seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("Generator: the prompt has ", p.size(),
                                                   " bytes, more than the model's context "
                                                   "(seq_len ", c.seq_len, ")"));
  }
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] < 0 || p[i] >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("Generator: byte ", i, " of the prompt is ",
                                                     p[i], ", outside the model's vocabulary [0, ",
                                                     c.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Generator::Prefill(const Tensor& tokens) {
  const int64_t seq_len = model_->config().seq_len;
  if (!tokens.defined() || tokens.dim() != 2 || tokens.dtype() != DType::kI64 ||
      tokens.size(0) < 1 || tokens.size(0) > seq_len || tokens.size(1) < 1 ||
      tokens.size(1) > options_.max_batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Generator::Prefill: tokens must be i64 [T, B] with 1 <= T <= seq_len ", seq_len,
        " and 1 <= B <= max_batch ", options_.max_batch, "; got ",
        tokens.defined() ? tokens.ToString() : std::string("none")));
  }
  TPX_ASSIGN_OR_RETURN(Tensor host, tokens.To(Device::CPU()));
  TPX_ASSIGN_OR_RETURN(host, host.Contiguous());
  std::vector<int64_t> v = host.ToVector<int64_t>();
  TPX_RETURN_IF_ERROR(CheckTokens(v, "prompt"));
  position_ = 0;
  batch_ = tokens.size(1);
  return Step(v, tokens.size(0), batch_);
}

absl::StatusOr<Tensor> Generator::Decode(const Tensor& tokens) {
  if (batch_ == 0) return absl::FailedPreconditionError("Generator::Decode: Prefill first");
  if (!tokens.defined() || tokens.dim() != 1 || tokens.dtype() != DType::kI64 ||
      tokens.size(0) != batch_) {
    return absl::InvalidArgumentError(
        absl::StrCat("Generator::Decode: tokens must be i64 [", batch_, "] (the prefilled batch); got ",
                     tokens.defined() ? tokens.ToString() : std::string("none")));
  }
  if (position_ >= model_->config().seq_len) {
    return absl::OutOfRangeError(absl::StrCat("Generator::Decode: the context of ",
                                              model_->config().seq_len,
                                              " positions is full; Prefill again"));
  }
  TPX_ASSIGN_OR_RETURN(Tensor host, tokens.To(Device::CPU()));
  std::vector<int64_t> v = host.ToVector<int64_t>();
  TPX_RETURN_IF_ERROR(CheckTokens(v, "decode"));
  return Step(v, 1, batch_);
}

absl::StatusOr<Tensor> Generator::Step(const std::vector<int64_t>& tokens, int64_t t,
                                       int64_t batch) {
  const GptConfig& c = model_->config();
  comm::Communicator& tp = model_->tp();
  const int n = tp.size(), rank = tp.rank();
  const int64_t d = c.d_model, rows = t * batch;
  // Rows are sequence-major (t * batch + b), padded so they split evenly.
  const int64_t padded = (rows + n - 1) / n * n, local = padded / n;

  // Embedding: this rank's vocabulary slice gives partial rows (zeros for ids
  // outside it and for padding), summed by the reduce-scatter below; the
  // residual starts as the position embedding of this rank's rows.
  const Tensor& table = model_->embedding().weight().value();
  const parallel::VocabRange range = model_->embedding().vocab_range();
  std::vector<int64_t> ids(padded, 0);
  std::vector<float> id_mask(padded, 0.0f);
  for (int64_t i = 0; i < rows; ++i) {
    if (tokens[i] >= range.first && tokens[i] < range.last) {
      ids[i] = tokens[i] - range.first;
      id_mask[i] = 1.0f;
    }
  }
  std::vector<int64_t> pos(local, 0);
  std::vector<float> pos_mask(local, 0.0f);
  for (int64_t i = 0; i < local; ++i) {
    const int64_t row = rank * local + i;
    if (row < rows) {
      pos[i] = position_ + row / batch;
      pos_mask[i] = 1.0f;
    }
  }
  TPX_ASSIGN_OR_RETURN(Tensor ids_t, OnDevice(ids, {padded}, c.device));
  TPX_ASSIGN_OR_RETURN(Tensor id_mask_t, OnDevice(id_mask, {padded, 1}, c.device));
  TPX_ASSIGN_OR_RETURN(id_mask_t, id_mask_t.To(c.dtype));
  TPX_ASSIGN_OR_RETURN(Tensor pos_t, OnDevice(pos, {local}, c.device));
  TPX_ASSIGN_OR_RETURN(Tensor pos_mask_t, OnDevice(pos_mask, {local, 1}, c.device));
  TPX_ASSIGN_OR_RETURN(pos_mask_t, pos_mask_t.To(c.dtype));
  TPX_ASSIGN_OR_RETURN(Tensor partial, ops::IndexSelect(table, 0, ids_t));
  TPX_ASSIGN_OR_RETURN(partial, ops::Mul(partial, id_mask_t));
  TPX_ASSIGN_OR_RETURN(Tensor residual,
                       ops::IndexSelect(model_->positions().value(), 0, pos_t));
  TPX_ASSIGN_OR_RETURN(residual, ops::Mul(residual, pos_mask_t));

  const bool fused = options_.fused;
  Tensor x;  // fused: the next column layer's normalised, gathered input [padded, d]
  if (fused) {
    TPX_ASSIGN_OR_RETURN(x, embed_gathered_.View(padded, d, partial.dtype(), c.device));
    TPX_RETURN_IF_ERROR(layers::ReduceScatterAddNormAllGather(
        tp, partial, Tensor(), residual, layers_[0].qkv->norm(), embed_reduced_, x));
  } else if (n > 1) {
    TPX_ASSIGN_OR_RETURN(Tensor reduced, Tensor::Empty({local, d}, partial.dtype(), c.device));
    TPX_RETURN_IF_ERROR(tp.ReduceScatter(partial, reduced, comm::ReduceOp::kSum).Wait());
    TPX_RETURN_IF_ERROR(ops::AddInPlace(residual, reduced));
  } else {
    TPX_RETURN_IF_ERROR(ops::AddInPlace(residual, partial));
  }

  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& L = layers_[l];
    const layers::InferenceNorm& next_norm =
        l + 1 < layers_.size() ? layers_[l + 1].qkv->norm() : final_norm_;
    Tensor qkv;
    if (fused) {
      TPX_ASSIGN_OR_RETURN(qkv, L.qkv->ForwardNormalized(x));
    } else {
      TPX_ASSIGN_OR_RETURN(qkv, L.qkv->Forward(residual));
    }
    TPX_ASSIGN_OR_RETURN(Tensor ctx, Attention(L, qkv, t, batch, padded));
    if (fused) {
      TPX_ASSIGN_OR_RETURN(x, L.attn_out->ForwardAddNormGather(ctx, residual, L.fc1->norm()));
    } else {
      TPX_ASSIGN_OR_RETURN(Tensor y, L.attn_out->Forward(ctx));
      TPX_RETURN_IF_ERROR(ops::AddInPlace(residual, y));
    }
    Tensor h;
    if (fused) {
      TPX_ASSIGN_OR_RETURN(h, L.fc1->ForwardNormalized(x));
    } else {
      TPX_ASSIGN_OR_RETURN(h, L.fc1->Forward(residual));
    }
    TPX_ASSIGN_OR_RETURN(h, ops::Gelu(h));
    if (fused) {
      TPX_ASSIGN_OR_RETURN(x, L.fc2->ForwardAddNormGather(h, residual, next_norm));
    } else {
      TPX_ASSIGN_OR_RETURN(Tensor y, L.fc2->Forward(h));
      TPX_RETURN_IF_ERROR(ops::AddInPlace(residual, y));
    }
  }
  if (!fused) {
    TPX_ASSIGN_OR_RETURN(x, Tensor::Empty({padded, d}, residual.dtype(), c.device));
    TPX_ASSIGN_OR_RETURN(Tensor own, x.Narrow(0, local * rank, local));
    TPX_RETURN_IF_ERROR(layers::NormInto(final_norm_, residual, own));
    if (n > 1) TPX_RETURN_IF_ERROR(tp.AllGather(own, x).Wait());
  }
  position_ += t;

  // Logits of the last position only, against this rank's vocabulary rows
  // (tied embedding), then gathered over the vocabulary.
  TPX_ASSIGN_OR_RETURN(Tensor last, x.Narrow(0, (t - 1) * batch, batch));
  TPX_ASSIGN_OR_RETURN(Tensor logits, ops::Linear(last, table));  // [batch, vocab/tp]
  if (n > 1) {
    TPX_ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({n * batch, logits.size(1)}, logits.dtype(),
                                                   c.device));
    TPX_RETURN_IF_ERROR(tp.AllGather(logits, all).Wait());
    TPX_ASSIGN_OR_RETURN(all, all.View({n, batch, logits.size(1)}));
    TPX_ASSIGN_OR_RETURN(all, all.Permute({1, 0, 2}));
    TPX_ASSIGN_OR_RETURN(all, all.Contiguous());
    TPX_ASSIGN_OR_RETURN(logits, all.View({batch, c.vocab_size}));
  }
  TPX_ASSIGN_OR_RETURN(logits, logits.To(Device::CPU()));
  return logits.To(DType::kF32);  // sampling reads f32 whatever the model's dtype
}

absl::StatusOr<Tensor> Generator::Attention(Layer& L, const Tensor& qkv, int64_t t, int64_t batch,
                                            int64_t padded) {
  const GptConfig& c = model_->config();
  const int64_t heads = c.n_heads / model_->tp().size(), hd = c.d_model / c.n_heads;
  const int64_t rows = t * batch, p0 = position_, total = p0 + t;
  // This rank's columns are [q | k | v], each head-major.
  TPX_ASSIGN_OR_RETURN(Tensor real, qkv.Narrow(0, 0, rows));
  TPX_ASSIGN_OR_RETURN(real, real.View({t, batch, 3, heads, hd}));
  auto part = [&](int64_t j) -> absl::StatusOr<Tensor> {  // -> [batch, heads, t, hd]
    TPX_ASSIGN_OR_RETURN(Tensor p, real.Narrow(2, j, 1));
    TPX_ASSIGN_OR_RETURN(p, p.Squeeze(2));
    return p.Permute({1, 2, 0, 3});
  };
  TPX_ASSIGN_OR_RETURN(Tensor q, part(0));
  TPX_ASSIGN_OR_RETURN(Tensor k, part(1));
  TPX_ASSIGN_OR_RETURN(Tensor v, part(2));
  Tensor keys, values;
  for (auto [cache, fresh, out] : {std::tuple{&L.k_cache, &k, &keys},
                                   std::tuple{&L.v_cache, &v, &values}}) {
    TPX_ASSIGN_OR_RETURN(Tensor mine, cache->Narrow(0, 0, batch));
    TPX_ASSIGN_OR_RETURN(Tensor slot, mine.Narrow(2, p0, t));
    TPX_RETURN_IF_ERROR(slot.CopyFrom(*fresh));
    TPX_ASSIGN_OR_RETURN(Tensor seen, mine.Narrow(2, 0, total));
    TPX_ASSIGN_OR_RETURN(*out, seen.Reshape({batch * heads, total, hd}));
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  Tensor ctx;  // [rows, heads * hd]
  if (p0 == 0) {
    // A fresh context is causal self-attention over the new tokens alone:
    // the fused kernel (core/attention.h) computes only its causal half,
    // without the composed form's copies and mask.
    TPX_ASSIGN_OR_RETURN(Tensor fused_qkv, real.View({t, batch, 3 * heads * hd}));
    absl::StatusOr<ops::CausalSelfAttentionResult> fused =
        ops::CausalSelfAttention(fused_qkv, heads, hd, scale, /*keep_stats=*/false);
    if (fused.ok()) {
      TPX_ASSIGN_OR_RETURN(ctx, fused->ctx.View({rows, heads * hd}));
    } else if (!absl::IsUnimplemented(fused.status())) {
      return fused.status();
    }
  }
  if (!ctx.defined()) {
    TPX_ASSIGN_OR_RETURN(q, q.Reshape({batch * heads, t, hd}));
    TPX_ASSIGN_OR_RETURN(Tensor scores, ops::Matmul(q, keys, false, /*trans_b=*/true));
    TPX_ASSIGN_OR_RETURN(scores, ops::Scale(scores, scale));
    if (t > 1) {
      // Query i (position p0 + i) sees keys 0 .. p0 + i.
      std::vector<float> m(t * total, 0.0f);
      for (int64_t i = 0; i < t; ++i) {
        for (int64_t j = p0 + i + 1; j < total; ++j) m[i * total + j] = -1e9f;
      }
      TPX_ASSIGN_OR_RETURN(Tensor mask, OnDevice(m, {t, total}, c.device));
      TPX_ASSIGN_OR_RETURN(mask, mask.To(scores.dtype()));
      TPX_ASSIGN_OR_RETURN(scores, ops::Add(scores, mask));
    }
    TPX_ASSIGN_OR_RETURN(Tensor probs, ops::Softmax(scores, -1));
    TPX_ASSIGN_OR_RETURN(ctx, ops::Matmul(probs, values));  // [batch*heads, t, hd]
    TPX_ASSIGN_OR_RETURN(ctx, ctx.View({batch, heads, t, hd}));
    TPX_ASSIGN_OR_RETURN(ctx, ctx.Permute({2, 0, 1, 3}));
    TPX_ASSIGN_OR_RETURN(ctx, ctx.Contiguous());
    TPX_ASSIGN_OR_RETURN(ctx, ctx.View({rows, heads * hd}));
  }
  if (padded == rows) return ctx;
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros({padded, heads * hd}, ctx.dtype(), c.device));
  TPX_ASSIGN_OR_RETURN(Tensor head_rows, out.Narrow(0, 0, rows));
  TPX_RETURN_IF_ERROR(head_rows.CopyFrom(ctx));
  return out;
}

absl::StatusOr<std::vector<std::vector<int64_t>>> Generator::Generate(
    const std::vector<std::vector<int64_t>>& prompts, const GenerateOptions& o,
    const std::function<void(int64_t, int64_t)>& on_token) {
  const GptConfig& c = model_->config();
  const int64_t batch = static_cast<int64_t>(prompts.size());
  if (batch < 1 || batch > options_.max_batch) {
    return absl::InvalidArgumentError(absl::StrCat("Generator: ", batch,
                                                   " prompts; between 1 and max_batch ",
                                                   options_.max_batch, " are allowed"));
  }
  const int64_t len = static_cast<int64_t>(prompts[0].size());
  for (int64_t b = 0; b < batch; ++b) {
    absl::Status s = CheckPrompt(c, prompts[b]);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("prompt ", b, ": ", s.message()));
    if (static_cast<int64_t>(prompts[b].size()) != len) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Generator: prompts of one batch must have one length; prompt 0 has ", len,
          " bytes, prompt ", b, " has ", prompts[b].size()));
    }
  }
  TPX_RETURN_IF_ERROR(ValidateSampling(o.sampling));
  if (o.max_new_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Generator: max_new_tokens ", o.max_new_tokens, " must be >= 0"));
  }
  if (o.stop_byte < -1 || o.stop_byte >= c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("Generator: stop_byte ", o.stop_byte,
                                                   " must be -1 (none) or in [0, ",
                                                   c.vocab_size, ")"));
  }
  // Draws come from the data-parallel state: the same on every TP rank.
  std::optional<rng::RngFork> fork;
  if (!o.sampling.greedy()) {
    auto f = rng::GetRngTracker().Fork(rng::kDataParallelRng);
    if (!f.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Generator: sampling draws from the RNG tracker's data-parallel state; seed it first "
          "(rng::ModelParallelManualSeed): ",
          f.status().message()));
    }
    fork.emplace(std::move(*f));
  }

  std::vector<std::vector<int64_t>> seqs = prompts;
  if (o.max_new_tokens == 0) return seqs;
  std::vector<int64_t> flat(len * batch);
  for (int64_t t = 0; t < len; ++t) {
    for (int64_t b = 0; b < batch; ++b) flat[t * batch + b] = prompts[b][t];
  }
  TPX_ASSIGN_OR_RETURN(Tensor tokens, Tensor::FromVector<int64_t>(flat, {len, batch}));
  TPX_ASSIGN_OR_RETURN(Tensor logits, Prefill(tokens));
  std::vector<bool> done(batch, false);
  // What each sequence fed the model (a finished one repeats its last byte).
  std::vector<std::vector<int64_t>> fed = prompts;
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    uint64_t seed = 0, stream = 0;
    if (fork) {
      seed = rng::ActiveGenerator().seed();
      stream = rng::ActiveGenerator().NextStream();
    }
    const std::vector<float> all = logits.ToVector<float>();
    std::vector<int64_t> next(batch);
    for (int64_t b = 0; b < batch; ++b) {
      if (done[b]) {
        next[b] = seqs[b].back();
        continue;
      }
      const float u = fork ? rng::UniformAt(seed, stream, b) : 0.0f;
      TPX_ASSIGN_OR_RETURN(
          next[b], SampleToken(absl::MakeConstSpan(all).subspan(b * c.vocab_size, c.vocab_size),
                               o.sampling, u));
      seqs[b].push_back(next[b]);
      if (on_token) on_token(b, next[b]);
      if (next[b] == o.stop_byte) done[b] = true;
    }
    for (int64_t b = 0; b < batch; ++b) fed[b].push_back(next[b]);
    if (step + 1 == o.max_new_tokens || std::all_of(done.begin(), done.end(),
                                                    [](bool x) { return x; })) {
      break;
    }
    if (position_ < c.seq_len) {
      TPX_ASSIGN_OR_RETURN(Tensor next_t, Tensor::FromVector<int64_t>(next, {batch}));
      TPX_ASSIGN_OR_RETURN(logits, Decode(next_t));
      continue;
    }
    // The context is full: restart the cache from the last half of it.
    const int64_t keep = std::max<int64_t>(1, c.seq_len / 2);
    std::vector<int64_t> window(keep * batch);
    for (int64_t b = 0; b < batch; ++b) {
      const std::vector<int64_t>& s = fed[b];
      for (int64_t t = 0; t < keep; ++t) window[t * batch + b] = s[s.size() - keep + t];
    }
    TPX_ASSIGN_OR_RETURN(Tensor w, Tensor::FromVector<int64_t>(window, {keep, batch}));
    TPX_ASSIGN_OR_RETURN(logits, Prefill(w));
  }
  return seqs;
}

}  // namespace tpx::gpt
