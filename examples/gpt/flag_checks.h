// Range checks for the GPT example's command-line values, run before any
// rank starts, so that a bad value is a message naming its flag instead of
// a division by zero, an overflowed size or a meaningless result.
//
//   TPX_RETURN_IF_ERROR(CheckAtLeast("steps", absl::GetFlag(FLAGS_steps), 1));
//   TPX_RETURN_IF_ERROR(CheckReal("lr", absl::GetFlag(FLAGS_lr), 0, /*min_inclusive=*/false));
//   TPX_RETURN_IF_ERROR(CheckElementCount({{"seq_len", s}, {"batch", b}, {"d_model", d}}));
//   TPX_ASSIGN_OR_RETURN(DType dtype, F32OrBf16("dtype", absl::GetFlag(FLAGS_dtype)));
#ifndef TPX_EXAMPLES_GPT_FLAG_CHECKS_H_
#define TPX_EXAMPLES_GPT_FLAG_CHECKS_H_

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"

namespace tpx::gpt {

// Largest tensor the example will try to build (2^48 elements: more memory
// than any machine has, but far from overflowing a 64-bit byte count).
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 48;

// InvalidArgument "--<flag> must be at least <min> (got <value>)".
absl::Status CheckAtLeast(absl::string_view flag, int64_t value, int64_t min);
// A finite value above `min` (or equal to it when `min_inclusive`).
absl::Status CheckReal(absl::string_view flag, double value, double min, bool min_inclusive);
// The product of the flags' values (each >= 1) is at most kMaxTensorElements.
absl::Status CheckElementCount(
    std::initializer_list<std::pair<absl::string_view, int64_t>> factors);
// The dtype a flag that takes "f32" or "bf16" names (--dtype, a model's;
// --grad_reduce_dtype); otherwise InvalidArgument "--<flag> must be f32 or
// bf16, got '<value>'".
absl::StatusOr<DType> F32OrBf16(absl::string_view flag, absl::string_view value);

}  // namespace tpx::gpt

#endif  // TPX_EXAMPLES_GPT_FLAG_CHECKS_H_
