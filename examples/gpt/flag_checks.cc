#include "examples/gpt/flag_checks.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tpx::gpt {

absl::Status CheckAtLeast(absl::string_view flag, int64_t value, int64_t min) {
  if (value >= min) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be at least ", min, " (got ", value, ")"));
}

absl::Status CheckReal(absl::string_view flag, double value, double min, bool min_inclusive) {
  if (std::isfinite(value) && (min_inclusive ? value >= min : value > min)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be a finite number ",
                                                 min_inclusive ? ">= " : "> ", min, " (got ",
                                                 value, ")"));
}

absl::Status CheckElementCount(
    std::initializer_list<std::pair<absl::string_view, int64_t>> factors) {
  int64_t product = 1;
  bool overflow = false;
  std::vector<std::string> names;
  for (const auto& [flag, value] : factors) {
    names.push_back(absl::StrCat("--", flag));
    if (value < 1) return CheckAtLeast(flag, value, 1);
    overflow = overflow || __builtin_mul_overflow(product, value, &product) ||
               product > kMaxTensorElements;
  }
  if (!overflow) return absl::OkStatus();
  std::vector<std::string> values;
  for (const auto& f : factors) values.push_back(absl::StrCat(f.first, "=", f.second));
  return absl::InvalidArgumentError(absl::StrCat(
      absl::StrJoin(names, " * "), " (", absl::StrJoin(values, ", "),
      ") exceeds the largest tensor the example builds (", kMaxTensorElements, " elements)"));
}

absl::StatusOr<DType> F32OrBf16(absl::string_view flag, absl::string_view value) {
  if (value == "f32") return DType::kF32;
  if (value == "bf16") return DType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be f32 or bf16, got '", value, "'"));
}

}  // namespace tpx::gpt
