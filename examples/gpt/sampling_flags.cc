#include "examples/gpt/sampling_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(double, temperature, 0.7, "Sampling temperature; 0 = greedy.");
ABSL_FLAG(int64_t, top_k, 0, "Sample among the k most likely bytes; 0 = all.");
ABSL_FLAG(double, top_p, 0.9, "Sample among the most likely bytes covering this probability.");

namespace tpx::gpt {

absl::StatusOr<SamplingOptions> SamplingOptionsFromFlags() {
  SamplingOptions s{.temperature = absl::GetFlag(FLAGS_temperature),
                    .top_k = absl::GetFlag(FLAGS_top_k),
                    .top_p = absl::GetFlag(FLAGS_top_p)};
  absl::Status status = ValidateSampling(s);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--temperature/--top_k/--top_p: ", status.message()));
  }
  return s;
}

}  // namespace tpx::gpt
