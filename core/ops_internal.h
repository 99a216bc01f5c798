// Argument checks shared by the op implementations (not a public header).
#ifndef TPX_CORE_OPS_INTERNAL_H_
#define TPX_CORE_OPS_INTERNAL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/tensor.h"

namespace tpx::ops::internal {

inline std::string Name(DType dtype) { return std::string(DTypeName(dtype)); }

// Defined and on the CPU.
inline absl::Status CheckInput(const Tensor& t, const char* op, const char* what = "input") {
  if (!t.defined()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " is undefined"));
  }
  if (!t.device().is_cpu()) {
    return absl::FailedPreconditionError(absl::StrCat(op, ": ", what, " is on ",
                                                      t.device().ToString(),
                                                      "; only CPU tensors are supported"));
  }
  return absl::OkStatus();
}

inline absl::Status CheckFloating(const Tensor& t, const char* op, const char* what = "input") {
  if (IsFloatingPoint(t.dtype())) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " must be f32, bf16 or f16, got ",
                                                 t.ToString()));
}

inline absl::Status CheckSameDType(const Tensor& a, const Tensor& b, const char* op) {
  if (a.dtype() == b.dtype()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": dtypes differ: ", a.ToString(), " and ",
                                                 b.ToString()));
}

inline absl::Status CheckBool(const Tensor& t, const char* op, const char* what) {
  if (t.dtype() == DType::kBool) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " must be bool, got ",
                                                 t.ToString()));
}

}  // namespace tpx::ops::internal

#endif  // TPX_CORE_OPS_INTERNAL_H_
