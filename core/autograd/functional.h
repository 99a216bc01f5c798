// Tensor-level forward/backward pairs behind the ag ops that are more than
// one core op, for code with its own autograd and for custom Functions
// (e.g. a sequence-parallel LayerNorm or a tensor-parallel linear layer).
//
//   LayerNormSaved saved;
//   TPX_ASSIGN_OR_RETURN(Tensor y, ag::LayerNormForward(x, w, b, 1e-5, &saved));
//   ...
//   TPX_ASSIGN_OR_RETURN(LayerNormGrads g, ag::LayerNormBackward(dy, saved, w, {true, true,
//   true}));
//
// Every function returns absl::StatusOr and names itself in errors. Gradients
// have the dtype of the tensor they belong to (LayerNorm's bias gradient:
// the dtype of `grad`).
#ifndef TPX_CORE_AUTOGRAD_FUNCTIONAL_H_
#define TPX_CORE_AUTOGRAD_FUNCTIONAL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace tpx::ag {

// Which gradients a backward should compute (skipping the others saves work).
struct NeedGrads {
  bool input = true;
  bool weight = true;
  bool bias = true;
};

// ---- LayerNorm over the last dim ----
// What the backward needs. Where the device has the fused kernel
// (core/ops.h LayerNorm): the input and the per-row statistics; elsewhere
// the normalized input and 1/std from the composed ops.
struct LayerNormSaved {
  Tensor x;     // fused: the input
  Tensor mean;  // fused: f32 [rows]
  Tensor xhat;  // composed: (x - mean) * rstd, f32, x's shape
  Tensor rstd;  // f32: [rows] (fused) or [..., 1] (composed)
  DType x_dtype = DType::kF32;
};
struct LayerNormGrads {
  Tensor input, weight, bias;  // undefined when not requested (or no weight/bias)
};
// y = (x - mean) / sqrt(var + eps) * weight + bias (weight/bias [size(-1)],
// either undefined). Statistics in f32; y has x's dtype. `saved` may be null.
absl::StatusOr<Tensor> LayerNormForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                        double eps, LayerNormSaved* saved);
absl::StatusOr<LayerNormGrads> LayerNormBackward(const Tensor& grad, const LayerNormSaved& saved,
                                                 const Tensor& weight, NeedGrads need);

// ---- Softmax ----
// Given y = Softmax(x, dim): dx = y * (grad - sum(grad * y, dim)) (one fused
// pass over the last dim where the device has the kernel).
absl::StatusOr<Tensor> SoftmaxBackward(const Tensor& grad, const Tensor& y, int64_t dim);
// Given y = LogSoftmax(x, dim): dx = grad - exp(y) * sum(grad, dim).
absl::StatusOr<Tensor> LogSoftmaxBackward(const Tensor& grad, const Tensor& y, int64_t dim);

// ---- Linear: y = x W^T + b with x [..., in], W [out, in] ----
struct LinearGrads {
  Tensor input, weight, bias;
};
// dx = grad W, dW = grad^T x (rows of all leading dims), db = sum(grad).
// x may be undefined when the input gradient only is wanted, W when only
// the weight/bias gradients are.
absl::StatusOr<LinearGrads> LinearBackward(const Tensor& grad, const Tensor& x,
                                           const Tensor& weight, NeedGrads need);

}  // namespace tpx::ag

#endif  // TPX_CORE_AUTOGRAD_FUNCTIONAL_H_
