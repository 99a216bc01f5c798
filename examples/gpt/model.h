// A small GPT (decoder-only transformer) built from tpx's tensor-parallel
// layers, for training byte-level language models on a few CPU cores.
//
//   tokens [T, B] -> VocabParallelEmbedding + learned positions -> dropout
//   N x { x += Dropout(RowParallel(Attention(ColumnParallel QKV(LayerNorm(x)))))
//         x += Dropout(RowParallel(GeLU(ColumnParallel(LayerNorm(x))))) }
//   -> LayerNorm -> logits = x E_r^T (tied to this rank's embedding rows)
//   -> vocab-parallel cross entropy
//
//   GptConfig config{.d_model = 128, .n_heads = 4, .n_layers = 4};
//   TPX_ASSIGN_OR_RETURN(auto model, GptModel::Create(state->tp(), config));
//   TPX_ASSIGN_OR_RETURN(Variable loss, model->Loss(batch.tokens, batch.targets, /*training=*/true));
//
// Attention heads, MLP columns and the vocabulary are split over the
// tensor-parallel group. Weights come from the full (TP=1) master weights,
// and dropout draws from the tracker's model-parallel state with global
// element indices, so with rng::SeedMode::kTpInvariant (which Train seeds)
// the same seed gives the same model, masks and losses at every TP size,
// with or without sequence parallelism and activation checkpointing.
// Activations are sequence-major: [T, B, D] ([T/tp, B, D] between blocks
// with sequence parallelism).
#ifndef TPX_EXAMPLES_GPT_MODEL_H_
#define TPX_EXAMPLES_GPT_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/autograd/variable.h"
#include "core/tensor.h"
#include "layers/parallel_linear.h"
#include "layers/vocab_parallel_embedding.h"
#include "sharded_state/sharded_tensor.h"

namespace tpx::gpt {

struct GptConfig {
  int64_t vocab_size = 256;
  int64_t seq_len = 128;
  int64_t d_model = 128;
  int64_t n_heads = 4;
  int64_t n_layers = 4;
  int64_t d_ff = 512;
  double dropout = 0.0;
  bool sequence_parallel = false;
  // Recompute each block's activations in Backward (checkpoint/).
  bool activation_checkpointing = false;
  uint64_t seed = 1234;
  // Parameters and activations: kF32, or kBF16 for mixed precision (GEMMs
  // accumulate in f32; norm, softmax and loss statistics are computed in
  // f32; the optimizer keeps f32 master weights, optim/adamw.h).
  DType dtype = DType::kF32;
  // Where parameters and activations live; CUDA needs a device backend
  // (nccl) and //core/cuda linked in.
  Device device = Device::CPU();
};

// A trainable parameter and what the optimizer needs to know about it.
struct ModelParam {
  Variable var;
  // Every TP rank holds the same full copy (count once in the grad norm).
  bool tp_duplicate = false;
  // Replicated, but its gradient is partial per rank under sequence
  // parallelism: all-reduce it over tp after Backward.
  bool sequence_parallel_partial = false;
  bool weight_decay = true;
};

class GptModel {
 public:
  // Errors: sizes that the tensor-parallel group does not divide (heads,
  // d_ff, vocabulary; seq_len too under sequence parallelism), d_model not a
  // multiple of n_heads.
  static absl::StatusOr<std::unique_ptr<GptModel>> Create(comm::Communicator& tp,
                                                          const GptConfig& config);

  // Logits for this rank's vocabulary slice, [T, B, vocab/tp].
  // tokens: i64 [T, B] with T == seq_len (any T <= seq_len without sequence
  // parallelism).
  absl::StatusOr<Variable> Logits(const Tensor& tokens, bool training) const;
  // Mean next-token cross entropy (0-d), the same value on every TP rank.
  absl::StatusOr<Variable> Loss(const Tensor& tokens, const Tensor& targets, bool training) const;

  // All-reduces over tp the gradients of replicated parameters that are
  // partial under sequence parallelism (no-op otherwise), in reduce_dtype
  // (optim/grad_sync.h).
  absl::Status AllReduceSequenceParallelGrads(DType reduce_dtype = DType::kF32) const;

  const std::vector<ModelParam>& params() const { return params_; }
  // Every parameter as a shard of its global tensor, in the order of
  // params(): "embedding.weight", "positions", "block<l>.ln1.weight", ...,
  // "block<l>.qkv.weight" (stride 3), "lnf.bias". Norms, positions and
  // row-parallel biases are replicated.
  absl::StatusOr<std::vector<sharded_state::ShardedTensor>> ShardedState() const;
  const GptConfig& config() const { return config_; }
  // Parameters of the whole (unsharded) model.
  int64_t NumParameters() const;

  // The layers and weights, for code that runs the model another way (the
  // KV-cache decoder, examples/gpt/generator.h). Shared, not copied.
  struct Block {
    Variable ln1_w, ln1_b, ln2_w, ln2_b;
    std::unique_ptr<layers::ColumnParallelLinear> qkv;
    std::unique_ptr<layers::RowParallelLinear> attn_out;
    std::unique_ptr<layers::ColumnParallelLinear> fc1;
    std::unique_ptr<layers::RowParallelLinear> fc2;
  };
  static constexpr double kLayerNormEps = 1e-5;
  comm::Communicator& tp() const { return *tp_; }
  const layers::VocabParallelEmbedding& embedding() const { return *embedding_; }
  const Variable& positions() const { return positions_; }  // [seq_len, d_model]
  const std::vector<Block>& blocks() const { return blocks_; }
  const Variable& final_norm_weight() const { return lnf_w_; }
  const Variable& final_norm_bias() const { return lnf_b_; }

 private:
  GptModel(comm::Communicator& tp, GptConfig config) : tp_(&tp), config_(config) {}
  absl::StatusOr<Variable> BlockForward(const Block& block, const Variable& x, int64_t seq_len,
                                        int64_t batch, bool training) const;
  absl::StatusOr<Variable> Attention(const Variable& qkv, int64_t seq_len, int64_t batch,
                                     bool training) const;
  // Dropout of a [T(/tp), B, D] hidden-state slice, drawn as the slice of the
  // full [T, B, D] tensor's mask.
  absl::StatusOr<Variable> HiddenDropout(const Variable& x, int64_t seq_len, bool training) const;
  // residual + HiddenDropout(out.output + out.output_bias) in one pass (the
  // layers skip their bias add; the mask is the one HiddenDropout draws).
  absl::StatusOr<Variable> BiasDropoutResidual(const layers::LinearOutput& out,
                                               const Variable& residual, int64_t seq_len,
                                               bool training) const;
  void AddParam(const Variable& v, bool tp_duplicate, bool sp_partial, bool weight_decay);

  comm::Communicator* tp_;
  GptConfig config_;
  int64_t heads_per_rank_ = 0;
  int64_t first_head_ = 0;
  std::unique_ptr<layers::VocabParallelEmbedding> embedding_;
  Variable positions_;
  std::vector<Block> blocks_;
  Variable lnf_w_, lnf_b_;
  std::vector<ModelParam> params_;
};

}  // namespace tpx::gpt

#endif  // TPX_EXAMPLES_GPT_MODEL_H_
