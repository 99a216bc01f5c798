// Text generation from a GptModel with tensor parallelism and a KV cache.
//
// The decode path runs on the inference layers (layers/inference_*.h) over
// the model's own weights (shared, not copied): the residual stream is split
// by rows over the TP ranks (sequence parallel; rows are padded to a
// multiple of the TP size), every row-parallel GEMM ends in the fused
// reduce-scatter -> residual add -> next LayerNorm -> all-gather, and each
// attention layer keeps a KV cache of this rank's heads [batch, heads/tp,
// seq_len, head_dim]. A prompt is prefilled in one pass (its attention by
// the fused causal kernel of core/attention.h where the device has it), then
// tokens are decoded one position at a time against the cache. Full-vocabulary logits are gathered
// on every rank and sampled (examples/gpt/sampling.h) with the RNG tracker's data-parallel stream,
// which is the same on every TP rank, so all ranks pick the same token and the same seed gives the
// same text at every TP size.
//
//   TPX_RETURN_IF_ERROR(rng::ModelParallelManualSeed(seed, tp.rank(), 0, 0,
//                                                    rng::SeedMode::kTpInvariant));
//   TPX_ASSIGN_OR_RETURN(auto gen, Generator::Create(model, {.max_batch = 1}));
//   TPX_ASSIGN_OR_RETURN(auto out, gen->Generate({Encode("In the beginning")},
//       {.max_new_tokens = 200, .stop_byte = '\n', .sampling = {.temperature = 0.8}},
//       [](int64_t seq, int64_t token) { std::putchar(static_cast<int>(token)); }));
//
// Every call is collective over the model's TP group: all ranks pass the same
// prompts and options. The model (whatever set its weights: training, or a
// checkpoint loader) must outlive the generator. When a sequence reaches the
// model's seq_len the cache restarts from its last seq_len / 2 tokens (one
// re-prefill), so generation may run past the context.
#ifndef TPX_EXAMPLES_GPT_GENERATOR_H_
#define TPX_EXAMPLES_GPT_GENERATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "examples/gpt/model.h"
#include "examples/gpt/sampling.h"
#include "layers/inference_layernorm_column_parallel_linear.h"
#include "layers/inference_norm.h"
#include "layers/inference_row_parallel_linear.h"

namespace tpx::gpt {

struct GeneratorOptions {
  // Sequences generated together (the KV cache is sized for this many).
  int64_t max_batch = 1;
  // false: the unfused sequence (reduce-scatter, add, norm and all-gather as
  // separate steps); the same numbers, for checking the fused path.
  bool fused = true;
};

struct GenerateOptions {
  int64_t max_new_tokens = 100;
  // A sequence stops after producing this byte (it is kept in the output);
  // -1: none.
  int64_t stop_byte = -1;
  SamplingOptions sampling{};
};

class Generator {
 public:
  // Errors: max_batch < 1; a model whose heads do not divide over its TP
  // group (GptModel::Create already refuses it).
  static absl::StatusOr<std::unique_ptr<Generator>> Create(const GptModel& model,
                                                           GeneratorOptions options = {});

  // Starts tokens.size() sequences (all prompts the same length, 1..seq_len,
  // every byte < vocab_size), appends up to max_new_tokens each and returns
  // prompt + continuation per sequence. on_token(sequence, token), when set,
  // is called on every rank as each token is chosen.
  absl::StatusOr<std::vector<std::vector<int64_t>>> Generate(
      const std::vector<std::vector<int64_t>>& prompts, const GenerateOptions& options,
      const std::function<void(int64_t, int64_t)>& on_token = {});

  // Errors: an empty prompt, one longer than config.seq_len, a byte outside
  // the vocabulary (what Generate checks per prompt; callers can check early).
  static absl::Status CheckPrompt(const GptConfig& config, const std::vector<int64_t>& prompt);

  // The steps Generate is made of, for tests and benchmarks. Prefill clears
  // the cache and runs tokens [T, B] (i64, host) from position 0; Decode runs
  // one more position, tokens [B]. Both return the full-vocabulary logits of
  // the last position, [B, vocab] f32 on the host, equal on every rank.
  absl::StatusOr<Tensor> Prefill(const Tensor& tokens);
  absl::StatusOr<Tensor> Decode(const Tensor& tokens);
  // Positions now in the cache.
  int64_t position() const { return position_; }

 private:
  struct Layer {
    std::unique_ptr<layers::InferenceLayerNormColumnParallelLinear> qkv, fc1;
    std::unique_ptr<layers::InferenceRowParallelLinear> attn_out, fc2;
    Tensor k_cache, v_cache;  // [max_batch, heads/tp, seq_len, head_dim]
  };

  Generator(const GptModel& model, GeneratorOptions options) : model_(&model), options_(options) {}
  // Runs tokens[t * batch + b] for positions position_ .. position_ + t - 1
  // and returns the last position's logits [batch, vocab].
  absl::StatusOr<Tensor> Step(const std::vector<int64_t>& tokens, int64_t t, int64_t batch);
  absl::StatusOr<Tensor> Attention(Layer& layer, const Tensor& qkv, int64_t t, int64_t batch,
                                   int64_t rows);
  absl::Status CheckTokens(const std::vector<int64_t>& tokens, const char* what) const;

  const GptModel* model_;
  GeneratorOptions options_;
  std::vector<Layer> layers_;
  layers::InferenceNorm final_norm_;
  layers::RowBuffer embed_reduced_, embed_gathered_;
  int64_t position_ = 0;
  int64_t batch_ = 0;
};

}  // namespace tpx::gpt

#endif  // TPX_EXAMPLES_GPT_GENERATOR_H_
