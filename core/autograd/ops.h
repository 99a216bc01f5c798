// Differentiable ops on Variables: each records a Function whose Backward
// is the matching gradient formula, written with core ops.
//
//   using namespace tpx;
//   Variable x(x_tensor), w(w_tensor, /*requires_grad=*/true), b(b_tensor, true);
//   TPX_ASSIGN_OR_RETURN(Variable h, ag::Linear(x, w, b));      // [..., out]
//   TPX_ASSIGN_OR_RETURN(Variable a, ag::Gelu(h));
//   TPX_ASSIGN_OR_RETURN(Variable loss, ag::Mean(a));
//   TPX_RETURN_IF_ERROR(Backward(loss));
//
// Semantics follow the core op of the same name in core/ops.h (shapes,
// broadcasting, dtype rules, errors). Binary ops broadcast; the gradient of a
// broadcast operand is summed back to its shape. Views (Reshape, Transpose,
// Narrow, Split, ...) share memory with their input like the Tensor views.
// Non-differentiable arguments (indices, masks, conditions) are Tensors.
// Every op returns absl::StatusOr and never aborts on bad arguments.
#ifndef TPX_CORE_AUTOGRAD_OPS_H_
#define TPX_CORE_AUTOGRAD_OPS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/autograd/variable.h"
#include "core/tensor.h"

namespace tpx::ag {

// ---- Elementwise (broadcasting binary ops) ----
absl::StatusOr<Variable> Add(const Variable& a, const Variable& b);
absl::StatusOr<Variable> Sub(const Variable& a, const Variable& b);
absl::StatusOr<Variable> Mul(const Variable& a, const Variable& b);
absl::StatusOr<Variable> Div(const Variable& a, const Variable& b);
// x * s and x + s.
absl::StatusOr<Variable> Scale(const Variable& x, double s);
absl::StatusOr<Variable> AddScalar(const Variable& x, double s);
absl::StatusOr<Variable> Neg(const Variable& x);
absl::StatusOr<Variable> Exp(const Variable& x);
absl::StatusOr<Variable> Log(const Variable& x);
absl::StatusOr<Variable> Sqrt(const Variable& x);
absl::StatusOr<Variable> Tanh(const Variable& x);
absl::StatusOr<Variable> Relu(const Variable& x);
// Exact (erf) GELU.
absl::StatusOr<Variable> Gelu(const Variable& x);
// Gelu(x + bias), bias [size(-1)], in one pass each way where the device has
// the fused kernel (ops::BiasGelu); the gradient of bias is summed over rows.
absl::StatusOr<Variable> BiasGelu(const Variable& x, const Variable& bias);
// x where mask is false, value where it is true (mask: kBool, broadcasts to x).
absl::StatusOr<Variable> MaskedFill(const Variable& x, const Tensor& mask, double value);
// cond ? a : b; cond (kBool), a and b broadcast.
absl::StatusOr<Variable> Where(const Tensor& cond, const Variable& a, const Variable& b);
// Converted copy; the gradient is converted back to x's dtype.
absl::StatusOr<Variable> To(const Variable& x, DType dtype);

// ---- Reductions ----
absl::StatusOr<Variable> Sum(const Variable& x, int64_t dim, bool keepdim = false);
absl::StatusOr<Variable> Mean(const Variable& x, int64_t dim, bool keepdim = false);
// Over all elements: a 0-d result.
absl::StatusOr<Variable> Sum(const Variable& x);
absl::StatusOr<Variable> Mean(const Variable& x);
// Maximum along dim; the gradient goes to the first maximal element.
absl::StatusOr<Variable> Max(const Variable& x, int64_t dim, bool keepdim = false);
absl::StatusOr<Variable> Softmax(const Variable& x, int64_t dim);
absl::StatusOr<Variable> LogSoftmax(const Variable& x, int64_t dim);
// Softmax over the last dim of scale * x; with `causal`, row i of each
// [m, n] matrix attends to columns j <= i + n - m only (the others get
// probability 0): attention's scale, causal mask and softmax in one pass
// where the device has the fused kernel (core/ops.h ScaledSoftmax).
absl::StatusOr<Variable> ScaledSoftmax(const Variable& x, double scale, bool causal);

// ---- Matrix products ----
// op(a) x op(b): [M, K] x [K, N], or batched [B, M, K] x [B, K, N] /
// [B, M, K] x [K, N], where op(x) is x, or x with its last two dims swapped
// when trans_x. Transposed operands cost no copy either way (ag::Transpose
// views work too), but the flags also keep the backward products in the
// GEMM's fast shapes: with trans_b, b's gradient is one [K-major] product
// instead of a transposed one.
absl::StatusOr<Variable> Matmul(const Variable& a, const Variable& b, bool trans_a = false,
                                bool trans_b = false);
// x [..., in] @ weight[out, in]^T (+ bias[out] when defined) -> [..., out].
absl::StatusOr<Variable> Linear(const Variable& x, const Variable& weight,
                                const Variable& bias = Variable());
// Layer normalization over the last dim: (x - mean) / sqrt(var + eps) * weight
// + bias, with weight and bias of shape [size(-1)] (either may be undefined).
// Statistics are computed in f32 for bf16/f16 inputs.
absl::StatusOr<Variable> LayerNorm(const Variable& x, const Variable& weight, const Variable& bias,
                                   double eps = 1e-5);

// ---- Shapes and views ----
absl::StatusOr<Variable> Reshape(const Variable& x, Shape shape);
absl::StatusOr<Variable> Transpose(const Variable& x, int64_t dim0, int64_t dim1);
absl::StatusOr<Variable> Permute(const Variable& x, absl::Span<const int64_t> dims);
absl::StatusOr<Variable> Unsqueeze(const Variable& x, int64_t dim);
absl::StatusOr<Variable> Squeeze(const Variable& x, int64_t dim);
// Broadcast view (see Tensor::Expand); the gradient is summed back.
absl::StatusOr<Variable> Expand(const Variable& x, Shape shape);
absl::StatusOr<Variable> Narrow(const Variable& x, int64_t dim, int64_t start, int64_t length);
absl::StatusOr<Variable> Concat(absl::Span<const Variable> xs, int64_t dim);
// One output Variable per piece (views of x). Pieces that receive no
// gradient contribute zeros to x's gradient.
absl::StatusOr<std::vector<Variable>> Split(const Variable& x, absl::Span<const int64_t> sizes,
                                            int64_t dim);
absl::StatusOr<std::vector<Variable>> Chunk(const Variable& x, int64_t parts, int64_t dim);

// ---- Gather ----
// Rows of x picked along dim by a 1-D i32/i64 index (an embedding lookup with
// dim 0); the gradient scatter-adds back (repeated indices accumulate).
absl::StatusOr<Variable> IndexSelect(const Variable& x, int64_t dim, const Tensor& index);

}  // namespace tpx::ag

#endif  // TPX_CORE_AUTOGRAD_OPS_H_
