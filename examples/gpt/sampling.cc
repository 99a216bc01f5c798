#include "examples/gpt/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tpx::gpt {

absl::Status ValidateSampling(const SamplingOptions& o) {
  if (!std::isfinite(o.temperature) || o.temperature < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: temperature ", o.temperature, " must be finite and >= 0"));
  }
  if (o.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: top_k ", o.top_k, " must be >= 0 (0 keeps every token)"));
  }
  if (!(o.top_p > 0 && o.top_p <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling: top_p ", o.top_p, " must be in (0, 1]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> SampleToken(absl::Span<const float> logits, const SamplingOptions& o,
                                    float u) {
  TPX_RETURN_IF_ERROR(ValidateSampling(o));
  if (logits.empty()) return absl::InvalidArgumentError("sampling: no logits");
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i])) {
      return absl::InvalidArgumentError(absl::StrCat("sampling: logit ", i, " is NaN"));
    }
  }
  if (o.greedy()) {
    return static_cast<int64_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Most likely first; equal logits by id, so the order is the same everywhere.
  std::vector<int64_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  size_t keep = order.size();
  if (o.top_k > 0) keep = std::min(keep, static_cast<size_t>(o.top_k));
  std::vector<double> p(keep);
  const double top = logits[order[0]];
  double total = 0;
  for (size_t i = 0; i < keep; ++i) {
    p[i] = std::exp((logits[order[i]] - top) / o.temperature);
    total += p[i];
  }
  if (o.top_p < 1) {
    double cum = 0;
    size_t nucleus = keep;
    for (size_t i = 0; i < keep; ++i) {
      cum += p[i] / total;
      if (cum >= o.top_p) {
        nucleus = i + 1;
        break;
      }
    }
    keep = nucleus;
    total = std::accumulate(p.begin(), p.begin() + keep, 0.0);
  }
  const double target = std::clamp(static_cast<double>(u), 0.0, 1.0) * total;
  double cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    cum += p[i];
    if (target < cum) return order[i];
  }
  return order[keep - 1];
}

}  // namespace tpx::gpt
