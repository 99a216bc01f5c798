// The normalisation of the inference layers (RMSNorm or LayerNorm over the
// last dim) and its fused residual-add form, plus the reusable row buffer the
// layers hand their outputs out of.
//
//   InferenceNorm norm{.kind = NormKind::kRmsNorm, .weight = w, .eps = 1e-5};
//   TPX_RETURN_IF_ERROR(NormInto(norm, x, out));                       // out = norm(x)
//   TPX_RETURN_IF_ERROR(AddNormInto(norm, residual, partial, bias, out));
//   // residual += partial + bias; out = norm(residual)
//
// CPU f32 contiguous tensors take one loop that touches every row once
// (norm statistics and output while the row is in cache); other devices and
// dtypes, and cpu_kernel = false, compose core ops (core/ops.h).
#ifndef TPX_LAYERS_INFERENCE_NORM_H_
#define TPX_LAYERS_INFERENCE_NORM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace tpx::layers {

enum class NormKind {
  // y = x / sqrt(mean(x^2) + eps) * weight
  kRmsNorm,
  // y = (x - mean) / sqrt(var + eps) * weight + bias
  kLayerNorm,
};

struct InferenceNorm {
  NormKind kind = NormKind::kRmsNorm;
  Tensor weight{};  // [hidden]
  Tensor bias{};    // [hidden]; LayerNorm only, may be undefined
  double eps = 1e-5;
  // false: the core-op path even on the CPU (how the device path is tested
  // without a device).
  bool cpu_kernel = true;
};

// Errors: weight missing or not [hidden] where hidden = x.size(-1); bias on
// an RMSNorm or not [hidden].
absl::Status CheckNorm(const InferenceNorm& norm, int64_t hidden, const char* who);

// out = norm(x); out has x's shape, dtype and device (may not alias x).
absl::Status NormInto(const InferenceNorm& norm, const Tensor& x, const Tensor& out);

// residual += add (+ add_bias, [hidden], may be undefined), in place, then
// out = norm(residual). residual, add and out share a shape [..., hidden].
absl::Status AddNormInto(const InferenceNorm& norm, const Tensor& residual, const Tensor& add,
                         const Tensor& add_bias, const Tensor& out);

// A buffer reused across calls: View(rows, cols) returns a [rows, cols]
// contiguous view, reallocating only when the buffer is too small or on
// another device/dtype. Views stay valid (they keep their storage alive) but
// the next View may overwrite them.
class RowBuffer {
 public:
  absl::StatusOr<Tensor> View(int64_t rows, int64_t cols, DType dtype, Device device);

 private:
  Tensor storage_;  // 1-D
};

}  // namespace tpx::layers

#endif  // TPX_LAYERS_INFERENCE_NORM_H_
