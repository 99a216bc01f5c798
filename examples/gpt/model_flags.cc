#include "examples/gpt/model_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "examples/gpt/dataset.h"

ABSL_FLAG(int64_t, batch, 16, "Sequences per step per data-parallel replica.");
ABSL_FLAG(int64_t, seq_len, 128, "Context length in bytes.");
ABSL_FLAG(int64_t, d_model, 128, "Hidden size.");
ABSL_FLAG(int64_t, n_heads, 4, "Attention heads.");
ABSL_FLAG(int64_t, n_layers, 4, "Transformer blocks.");
ABSL_FLAG(int64_t, d_ff, 512, "MLP hidden size.");
ABSL_FLAG(double, dropout, 0.0, "Dropout probability.");
ABSL_FLAG(bool, sequence_parallel, false, "Sequence parallelism in the LayerNorm/dropout regions.");
ABSL_FLAG(bool, recompute, false, "Activation checkpointing: recompute every block in backward.");
ABSL_FLAG(uint64_t, seed, 1234, "Seed of weights, dropout and batches.");
ABSL_FLAG(std::string, dtype, "f32",
          "Parameters and activations: f32, or bf16 (mixed precision with f32 master weights).");

namespace tpx::gpt {

absl::StatusOr<GptConfig> GptConfigFromFlags() {
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (dtype != "f32" && dtype != "bf16") {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype must be f32 or bf16, got '", dtype, "'"));
  }
  return GptConfig{.vocab_size = ByteDataset::kVocabSize,
                   .seq_len = absl::GetFlag(FLAGS_seq_len),
                   .d_model = absl::GetFlag(FLAGS_d_model),
                   .n_heads = absl::GetFlag(FLAGS_n_heads),
                   .n_layers = absl::GetFlag(FLAGS_n_layers),
                   .d_ff = absl::GetFlag(FLAGS_d_ff),
                   .dropout = absl::GetFlag(FLAGS_dropout),
                   .sequence_parallel = absl::GetFlag(FLAGS_sequence_parallel),
                   .activation_checkpointing = absl::GetFlag(FLAGS_recompute),
                   .seed = absl::GetFlag(FLAGS_seed),
                   .dtype = dtype == "bf16" ? DType::kBF16 : DType::kF32};
}

}  // namespace tpx::gpt
