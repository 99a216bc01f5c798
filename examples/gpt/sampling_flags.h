// Command-line flags for how text is sampled (--temperature, --top_k,
// --top_p), shared by the training program's closing sample
// (examples/gpt/train_main.cc) and the generate program
// (examples/gpt/generate_main.cc).
//
//   TPX_ASSIGN_OR_RETURN(SamplingOptions s, SamplingOptionsFromFlags());
#ifndef TPX_EXAMPLES_GPT_SAMPLING_FLAGS_H_
#define TPX_EXAMPLES_GPT_SAMPLING_FLAGS_H_

#include <cstdint>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "examples/gpt/sampling.h"

ABSL_DECLARE_FLAG(double, temperature);
ABSL_DECLARE_FLAG(int64_t, top_k);
ABSL_DECLARE_FLAG(double, top_p);

namespace tpx::gpt {

// Errors name the flag that is out of range.
absl::StatusOr<SamplingOptions> SamplingOptionsFromFlags();

}  // namespace tpx::gpt

#endif  // TPX_EXAMPLES_GPT_SAMPLING_FLAGS_H_
