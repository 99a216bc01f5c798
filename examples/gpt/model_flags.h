// Command-line flags for the GPT's shape and the batch size, shared by the
// training program (examples/gpt/train_main.cc) and its benchmark
// (bench/gpt_bench.cc) so both describe a model the same way.
//
//   TrainOptions o;
//   o.model = GptConfigFromFlags();
//   o.batch = absl::GetFlag(FLAGS_batch);
#ifndef TPX_EXAMPLES_GPT_MODEL_FLAGS_H_
#define TPX_EXAMPLES_GPT_MODEL_FLAGS_H_

#include <cstdint>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "examples/gpt/model.h"

ABSL_DECLARE_FLAG(int64_t, batch);
ABSL_DECLARE_FLAG(int64_t, seq_len);
ABSL_DECLARE_FLAG(int64_t, d_model);
ABSL_DECLARE_FLAG(int64_t, n_heads);
ABSL_DECLARE_FLAG(int64_t, n_layers);
ABSL_DECLARE_FLAG(int64_t, d_ff);
ABSL_DECLARE_FLAG(double, dropout);
ABSL_DECLARE_FLAG(bool, sequence_parallel);
ABSL_DECLARE_FLAG(bool, recompute);
ABSL_DECLARE_FLAG(uint64_t, seed);

namespace tpx::gpt {

// The model described by the flags above (byte vocabulary).
GptConfig GptConfigFromFlags();

// Checks the flags above: sizes positive, --n_heads divides --d_model,
// --dropout in [0, 1), and no activation, attention or logit tensor larger
// than kMaxTensorElements (examples/gpt/flag_checks.h). Errors name the flag.
absl::Status CheckModelFlags();

}  // namespace tpx::gpt

#endif  // TPX_EXAMPLES_GPT_MODEL_FLAGS_H_
