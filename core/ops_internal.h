// Argument checks shared by the op implementations (not a public header).
#ifndef TPX_CORE_OPS_INTERNAL_H_
#define TPX_CORE_OPS_INTERNAL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/device_kernels.h"
#include "core/tensor.h"

namespace tpx::ops::internal {

inline std::string Name(DType dtype) { return std::string(DTypeName(dtype)); }

inline absl::Status CheckInput(const Tensor& t, const char* op, const char* what = "input") {
  if (t.defined()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " is undefined"));
}

// The kernels of the device every (defined) tensor is on; error naming `op`
// when they are on different devices or the device is unusable.
inline absl::StatusOr<DeviceKernels*> KernelsOf(const char* op,
                                                absl::Span<const Tensor* const> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (first == nullptr) {
      first = t;
    } else if (t->device() != first->device()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": tensors on different devices: ",
                                                     first->ToString(), " on ",
                                                     first->device().ToString(), " and ",
                                                     t->ToString(), " on ",
                                                     t->device().ToString()));
    }
  }
  return KernelsFor(first != nullptr ? first->device() : Device::CPU(), op);
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

// p is a per-feature parameter of x: shape [x.size(-1)] (x has a dim).
inline absl::Status CheckFeatureShape(const Tensor& x, const Tensor& p, const char* op,
                                      const char* what) {
  if (x.dim() >= 1 && p.shape() == Shape{x.size(-1)}) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " ", p.ToString(),
                                                 " does not match the last dim of ",
                                                 x.ToString()));
}

}  // namespace tpx::ops::internal

#endif  // TPX_CORE_OPS_INTERNAL_H_
