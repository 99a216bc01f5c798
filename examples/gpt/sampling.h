// Picking the next token from a row of logits: greedy, temperature, top-k
// and top-p (nucleus) sampling. A pure function of the logits and one
// uniform number, so ranks that hold the same logits and draw the same
// number (the tracker's data-parallel stream, rng/tracker.h) pick the same
// token.
//
//   SamplingOptions s{.temperature = 0.8, .top_k = 40, .top_p = 0.95};
//   TPX_RETURN_IF_ERROR(ValidateSampling(s));
//   TPX_ASSIGN_OR_RETURN(int64_t token, SampleToken(logits_row, s, u));
#ifndef TPX_EXAMPLES_GPT_SAMPLING_H_
#define TPX_EXAMPLES_GPT_SAMPLING_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tpx::gpt {

struct SamplingOptions {
  // 0: greedy (argmax; the lowest id among equal maxima).
  double temperature = 1.0;
  // Keep only the k most likely tokens; 0 keeps all.
  int64_t top_k = 0;
  // Keep the fewest most likely tokens whose probability sums to >= top_p.
  double top_p = 1.0;

  bool greedy() const { return temperature == 0 || top_k == 1; }
};

// Errors: temperature < 0 or not finite, top_k < 0, top_p outside (0, 1].
absl::Status ValidateSampling(const SamplingOptions& options);

// u in [0, 1) (unused when greedy). Errors: empty logits, invalid options, a
// NaN logit.
absl::StatusOr<int64_t> SampleToken(absl::Span<const float> logits,
                                    const SamplingOptions& options, float u);

}  // namespace tpx::gpt

#endif  // TPX_EXAMPLES_GPT_SAMPLING_H_
