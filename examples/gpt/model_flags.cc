#include "examples/gpt/model_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "examples/gpt/dataset.h"
#include "examples/gpt/flag_checks.h"

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
  TPX_ASSIGN_OR_RETURN(const DType dtype, F32OrBf16("dtype", absl::GetFlag(FLAGS_dtype)));
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
                   .dtype = dtype};
}

absl::Status CheckModelFlags() {
  TPX_ASSIGN_OR_RETURN(const GptConfig c, GptConfigFromFlags());
  const int64_t batch = absl::GetFlag(FLAGS_batch);
  TPX_RETURN_IF_ERROR(CheckAtLeast("batch", batch, 1));
  TPX_RETURN_IF_ERROR(CheckAtLeast("seq_len", c.seq_len, 1));
  TPX_RETURN_IF_ERROR(CheckAtLeast("d_model", c.d_model, 1));
  TPX_RETURN_IF_ERROR(CheckAtLeast("n_heads", c.n_heads, 1));
  TPX_RETURN_IF_ERROR(CheckAtLeast("n_layers", c.n_layers, 1));
  TPX_RETURN_IF_ERROR(CheckAtLeast("d_ff", c.d_ff, 1));
  if (c.d_model % c.n_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--n_heads (", c.n_heads,
                                                   ") must divide --d_model (", c.d_model, ")"));
  }
  if (!(c.dropout >= 0 && c.dropout < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dropout must be in [0, 1) (got ", c.dropout, ")"));
  }
  // The largest tensors of a step: activations, MLP hidden, attention
  // scores, and the weight matrices (logits are 256 x seq_len x batch).
  TPX_RETURN_IF_ERROR(CheckElementCount({{"seq_len", c.seq_len}, {"batch", batch}}));
  TPX_RETURN_IF_ERROR(
      CheckElementCount({{"seq_len", c.seq_len}, {"batch", batch}, {"d_model", c.d_model}}));
  TPX_RETURN_IF_ERROR(
      CheckElementCount({{"seq_len", c.seq_len}, {"batch", batch}, {"d_ff", c.d_ff}}));
  TPX_RETURN_IF_ERROR(CheckElementCount(
      {{"seq_len", c.seq_len}, {"seq_len", c.seq_len}, {"batch", batch}, {"n_heads", c.n_heads}}));
  TPX_RETURN_IF_ERROR(CheckElementCount({{"d_model", c.d_model}, {"d_ff", c.d_ff}}));
  TPX_RETURN_IF_ERROR(CheckElementCount({{"d_model", c.d_model}, {"d_model", c.d_model}}));
  return absl::OkStatus();
}

}  // namespace tpx::gpt
