// The elementwise and reduction ops a device's kernels implement
// (core/device_kernels.h). Dependency-free, so nvcc-compiled kernels share
// these names with the C++ side.
#ifndef TPX_CORE_KERNEL_OPS_H_
#define TPX_CORE_KERNEL_OPS_H_

namespace tpx {

enum class BinaryOp {
  kAdd,  // a + alpha * b
  kSub,
  kMul,
  kDiv,
  kEq,  // comparisons: bool out, a and b of one dtype
  kLt,
  kGe,
  kAnd,  // bool a, b, out
  kOr,
  kGeluBackward,  // a = upstream grad, b = x: grad * GELU'(x)
};

enum class UnaryOp {
  kNeg,
  kExp,
  kLog,
  kSqrt,
  kTanh,
  kRelu,  // NaN stays NaN
  kGelu,  // exact: x * 0.5 * (1 + erf(x / sqrt(2)))
  kNot,   // bool
  kScale,      // x * scalar
  kLtScalar,   // bool out: x < scalar, compared in double (exact for i64 ids)
  kGeScalar,
  kEqScalar,
};

enum class ReduceOp {
  kSum,     // f32 accumulation for floating inputs; i64 for integer inputs
  kMean,    // Sum / n
  kMax,     // NaN propagates; n > 0
  kArgmax,  // first index of the maximum (i64 out); n > 0
};

// Per-step scalars of one AdamW update (DeviceKernels::AdamWStep), already
// folded: decay = 1 - lr * weight_decay (1 without decay), step_size = lr /
// (1 - b1^t), inv_sqrt_bias2 = 1 / sqrt(1 - b2^t). The gradient is read as
// grad * grad_scale (gradient clipping's coefficient, applied in the same
// pass instead of rewriting the gradients first).
struct AdamWCoefficients {
  float decay;
  float beta1;
  float beta2;
  float step_size;
  float inv_sqrt_bias2;
  float eps;
  float grad_scale = 1.0f;
};

}  // namespace tpx

#endif  // TPX_CORE_KERNEL_OPS_H_
