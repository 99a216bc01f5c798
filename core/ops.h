// Tensor operations: split/concat, elementwise math with broadcasting,
// reductions, matrix products, gather/scatter-add.
//
//   using namespace tpx;
//   TPX_ASSIGN_OR_RETURN(Tensor y, ops::Linear(x, w, b));          // x W^T + b
//   TPX_ASSIGN_OR_RETURN(Tensor h, ops::Gelu(y));
//   TPX_ASSIGN_OR_RETURN(std::vector<Tensor> parts, ops::Chunk(h, 3, -1));
//   TPX_RETURN_IF_ERROR(ops::MatmulInto(main_grad, dy, x, /*trans_a=*/true,
//                                       /*trans_b=*/false, 1.0f, /*beta=*/1.0f));
//
// Conventions
//  - Functions return a new tensor (absl::StatusOr<Tensor>) unless they are
//    named ...Into / ...InPlace or say so; those write into their first
//    argument and return absl::Status.
//  - Errors name the op and the shapes/dtypes involved, e.g.
//    "Add: shapes [2, 3] and [4] are not broadcastable".
//  - Inputs may be strided views; contiguous inputs take a fast path.
//  - Negative dims count from the end.
//  - Numerics: bf16/f16 values are computed in f32 (reductions accumulate in
//    f32) and rounded once to the output dtype.
//  - Broadcasting (numpy rule): shapes are aligned at their last dim; missing
//    leading dims count as size 1; two sizes are compatible when equal or when
//    one is 1, and the result takes the larger. [4, 1, 3] with [5, 1] -> [4, 5, 3].
//  - Binary ops need equal dtypes, except the ...InPlace accumulators, which
//    convert src to dst's dtype (f32 main_grad += bf16 grad).
//  - Devices: every op runs on the device of its tensors, which must all be
//    on one device (else InvalidArgument naming both). Checks, broadcasting
//    and messages are shared; the loops are the device's DeviceKernels
//    (core/device_kernels.h). CUDA ops are queued on the device's current
//    stream (core/cuda/current_stream.h) and return before they finish;
//    ToVector/Item/To(Device::CPU()) wait for them. Index checks (IndexSelect,
//    IndexAdd) read the index on the host, which waits too.
//  - Threads (CPU): GEMMs, and large elementwise ops, softmax and the fused
//    kernels, use GemmThreads() threads (core/gemm.h); the other ops run on
//    the calling thread. Ops may run concurrently from several threads as
//    long as no two write the same tensor.
#ifndef TPX_CORE_OPS_H_
#define TPX_CORE_OPS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/adamw_operands.h"
#include "core/kernel_ops.h"
#include "core/tensor.h"

namespace tpx::ops {

// ---------------- Split / concat (uneven sizes allowed) ----------------

// Sizes of `parts` near-equal pieces of n: the first n % parts pieces get one
// more element (like torch.tensor_split / numpy.array_split); pieces may be 0
// when parts > n. SplitSizes(10, 4) == {3, 3, 2, 2}. parts must be >= 1.
std::vector<int64_t> SplitSizes(int64_t n, int64_t parts);
// Views of consecutive pieces along dim with the given sizes (which must sum
// to size(dim); zero sizes allowed).
absl::StatusOr<std::vector<Tensor>> Split(const Tensor& t, absl::Span<const int64_t> sizes,
                                          int64_t dim);
// `parts` views with SplitSizes(size(dim), parts).
absl::StatusOr<std::vector<Tensor>> Chunk(const Tensor& t, int64_t parts, int64_t dim);
// Joins tensors along dim; all other sizes and the dtypes must match.
absl::StatusOr<Tensor> Concat(absl::Span<const Tensor> tensors, int64_t dim);

// ---------------- Elementwise ----------------

// Broadcast result shape of a and b (error names `op`).
absl::StatusOr<Shape> BroadcastShapes(absl::Span<const int64_t> a, absl::Span<const int64_t> b,
                                      const char* op);

// Arithmetic for f32/bf16/f16/i32/i64 (Div: floating only).
absl::StatusOr<Tensor> Add(const Tensor& a, const Tensor& b);
absl::StatusOr<Tensor> Sub(const Tensor& a, const Tensor& b);
absl::StatusOr<Tensor> Mul(const Tensor& a, const Tensor& b);
absl::StatusOr<Tensor> Div(const Tensor& a, const Tensor& b);
// a + alpha * b, with broadcasting.
absl::StatusOr<Tensor> AddScaled(const Tensor& a, const Tensor& b, double alpha);
// t * s and t + s.
absl::StatusOr<Tensor> Scale(const Tensor& t, double s);
absl::StatusOr<Tensor> AddScalar(const Tensor& t, double s);

// dst += alpha * src, in place. src broadcasts to dst's shape (not the other
// way) and is converted to dst's dtype; dst must be floating. This is the
// gradient accumulator: f32 dst with bf16 src is fine. src may be dst itself
// but must not partially overlap it.
absl::Status AddInPlace(const Tensor& dst, const Tensor& src, double alpha = 1.0);
// dst *= s, in place.
absl::Status ScaleInPlace(const Tensor& dst, double s);
// Sets every element of dst to value.
absl::Status Fill(const Tensor& dst, double value);

// Unary math on floating tensors.
absl::StatusOr<Tensor> Neg(const Tensor& t);
absl::StatusOr<Tensor> Exp(const Tensor& t);
absl::StatusOr<Tensor> Log(const Tensor& t);
absl::StatusOr<Tensor> Sqrt(const Tensor& t);
absl::StatusOr<Tensor> Tanh(const Tensor& t);
absl::StatusOr<Tensor> Relu(const Tensor& t);
// Exact GELU: x * 0.5 * (1 + erf(x / sqrt(2))).
absl::StatusOr<Tensor> Gelu(const Tensor& x);
// grad * GELU'(x); grad and x have the same shape and dtype.
absl::StatusOr<Tensor> GeluBackward(const Tensor& grad, const Tensor& x);

// Comparisons give kBool tensors; a and b broadcast and must share a dtype.
absl::StatusOr<Tensor> Eq(const Tensor& a, const Tensor& b);
absl::StatusOr<Tensor> Lt(const Tensor& a, const Tensor& b);
absl::StatusOr<Tensor> Ge(const Tensor& a, const Tensor& b);
// Against a scalar: t < s, t >= s, t == s.
absl::StatusOr<Tensor> LtScalar(const Tensor& t, double s);
absl::StatusOr<Tensor> GeScalar(const Tensor& t, double s);
absl::StatusOr<Tensor> EqScalar(const Tensor& t, double s);
// Logical ops on kBool tensors (broadcasting).
absl::StatusOr<Tensor> LogicalAnd(const Tensor& a, const Tensor& b);
absl::StatusOr<Tensor> LogicalOr(const Tensor& a, const Tensor& b);
absl::StatusOr<Tensor> LogicalNot(const Tensor& t);

// t where mask is false, value where mask is true; mask (kBool) broadcasts to t.
absl::StatusOr<Tensor> MaskedFill(const Tensor& t, const Tensor& mask, double value);
// cond ? a : b elementwise; cond is kBool; all three broadcast; a, b share a dtype.
absl::StatusOr<Tensor> Where(const Tensor& cond, const Tensor& a, const Tensor& b);

// ---------------- Reductions ----------------
// Over one dim; keepdim leaves it with size 1. Floating inputs keep their
// dtype (accumulating in f32); Sum of i32/i64 gives i64.
absl::StatusOr<Tensor> Sum(const Tensor& t, int64_t dim, bool keepdim = false);
absl::StatusOr<Tensor> Mean(const Tensor& t, int64_t dim, bool keepdim = false);
// Maximum values (NaN propagates). Error on an empty dim.
absl::StatusOr<Tensor> Max(const Tensor& t, int64_t dim, bool keepdim = false);
// Index (kI64) of the first maximum along dim.
absl::StatusOr<Tensor> Argmax(const Tensor& t, int64_t dim, bool keepdim = false);
// Sum of all elements as a 0-d tensor (dtype as for Sum).
absl::StatusOr<Tensor> SumAll(const Tensor& t);
// Sums t down to `shape`, the inverse of broadcasting `shape` to t.shape():
// the gradient of a broadcast operand. Returns t itself (shared storage)
// when nothing needs summing. Error if shape does not broadcast to t.
absl::StatusOr<Tensor> SumTo(const Tensor& t, absl::Span<const int64_t> shape);
// Numerically stable softmax / log-softmax along dim (floating).
absl::StatusOr<Tensor> Softmax(const Tensor& t, int64_t dim);
absl::StatusOr<Tensor> LogSoftmax(const Tensor& t, int64_t dim);

// ---------------- Fused transformer kernels ----------------
// One pass over memory where the composed ops take several. Devices without
// the kernel return Unimplemented (the math is then composed from the ops
// above, as core/autograd/functional.cc does).
struct LayerNormResult {
  Tensor y;          // x's shape and dtype
  Tensor mean, rstd;  // f32 [rows]: per-row mean and 1 / sqrt(var + eps)
};
// Layer norm over the last dim of x (floating); weight and bias [size(-1)]
// of any floating dtype, or undefined.
absl::StatusOr<LayerNormResult> LayerNorm(const Tensor& x, const Tensor& weight,
                                          const Tensor& bias, double eps);
struct LayerNormGradients {
  Tensor input;          // x's dtype
  Tensor weight, bias;   // f32 [size(-1)]
};
// Gradients of LayerNorm from grad (x's shape and dtype), x and the
// forward's mean and rstd; only the requested ones are defined.
absl::StatusOr<LayerNormGradients> LayerNormBackward(const Tensor& grad, const Tensor& x,
                                                     const Tensor& mean, const Tensor& rstd,
                                                     const Tensor& weight, bool need_input,
                                                     bool need_weight, bool need_bias);
// Softmax over the last dim of scale * x (floating, at least 2-D [..., m,
// n]); with `causal`, row i of each [m, n] matrix keeps columns j <= i + n - m
// and gives the rest probability 0 (a causal attention mask, m == n in
// self-attention).
absl::StatusOr<Tensor> ScaledSoftmax(const Tensor& x, double scale, bool causal);
// Given y = ScaledSoftmax(x, scale, ...) (or Softmax over the last dim with
// scale 1): the gradient of x, scale * y * (grad - sum(grad * y, -1)).
absl::StatusOr<Tensor> ScaledSoftmaxBackward(const Tensor& grad, const Tensor& y, double scale);

// GeLU(x + bias) with bias [size(-1)] of x's (floating) dtype, in one pass
// (Megatron's bias-GeLU fusion: the bias leaves the GEMM).
absl::StatusOr<Tensor> BiasGelu(const Tensor& x, const Tensor& bias);
// Its gradients in one pass: dx = grad * GeLU'(x + bias) and dbias = dx
// summed over all but the last dim (bias's dtype, accumulated in f32).
struct BiasGeluGradients {
  Tensor dx;
  Tensor dbias;
};
absl::StatusOr<BiasGeluGradients> BiasGeluBackward(const Tensor& grad, const Tensor& x,
                                                   const Tensor& bias);

// ---------------- Fused training kernels ----------------
// The per-token loop of the vocab-parallel loss (loss/), the gradient norm
// and AdamW update (optim/) and dropout with its bias and residual (rng/),
// one pass over memory each. Same contract as above: devices without the kernel return
// Unimplemented and the callers compose the math from other ops.

// Codes in the target of the cross-entropy ops: the row's target class is
// on another shard / the row is ignored (not read, zero gradient).
inline constexpr int64_t kTargetElsewhere = -1;
inline constexpr int64_t kTargetIgnored = -2;
// Per row of logits [rows, v] (floating): f32 [rows, 4] =
// {m = max, sum exp(x - m), sum (x - m), x[target] or 0}, in f32; target is
// i64 [rows] with a column in [0, v) or one of the codes above (an ignored
// row, or any row when v == 0, gives {-inf, 0, 0, 0}; a row of -inf logits
// {-inf, 0, 0, x[target]}).
absl::StatusOr<Tensor> CrossEntropyStats(const Tensor& logits, const Tensor& target);
// Gradient of the logits, in their dtype and shape: per row
// g * (exp(x - lse) - smooth_over_k) - [j == target] * g * target_coeff, 0
// for ignored rows; lse and grad are f32 [rows]. in_place writes it into
// the logits' storage and returns them.
absl::StatusOr<Tensor> CrossEntropyBackward(const Tensor& logits, const Tensor& lse,
                                            const Tensor& grad, const Tensor& target,
                                            double smooth_over_k, double target_coeff,
                                            bool in_place);
// Sum of t_i^2 over every element of t (floating), squares and sum in f64,
// read back to the host (for gradient-norm clipping).
absl::StatusOr<double> SumOfSquares(const Tensor& t);
// SumOfSquares of each tensor (floating, all on one device) in one call,
// each the same as alone: one pass over all of them where the device can.
absl::StatusOr<std::vector<double>> SumsOfSquares(absl::Span<const Tensor> ts);
// One AdamW update in place (optim/adamw.h has the formula): param,
// exp_avg, exp_avg_sq f32; grad f32 or bf16 (read times
// coefficients.grad_scale); working (bf16, or undefined) receives the
// updated param rounded to bf16. All contiguous, one shape.
absl::Status AdamWStep(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                       const Tensor& exp_avg_sq, const Tensor& working,
                       const AdamWCoefficients& coefficients);
// AdamWStep for each entry (all on one device), with the same results, in
// one pass where the device can (an optimizer's whole parameter list).
// Every entry is checked first, as AdamWStep checks its arguments (the
// error names the entry): on an error nothing is updated.
absl::Status AdamWSteps(absl::Span<const AdamWOperands> updates);
// (keep ? (x + bias) * scale : 0) + residual, in f32, rounded once to x's
// dtype (floating). bias [size(-1)] (undefined: none) and residual (x's
// shape; undefined: none) have x's dtype; keep (bool, x's shape; undefined:
// keep every element).
absl::StatusOr<Tensor> DropoutAdd(const Tensor& x, const Tensor& bias, const Tensor& keep,
                                  const Tensor& residual, double scale);

// ---------------- Matrix products ----------------
// op(a) @ op(b) where op transposes the last two dims when asked.
//  - 2-D: [M, K] x [K, N] -> [M, N]
//  - 3-D batched: [B, M, K] x [B, K, N] -> [B, M, N]; a 2-D b is shared by all batches.
// a and b share a dtype (f32, bf16, f16); the result has that dtype, with f32
// accumulation. Strided inputs with a unit stride in either of the last two
// dims are passed to the GEMM without a copy.
absl::StatusOr<Tensor> Matmul(const Tensor& a, const Tensor& b, bool trans_a = false,
                              bool trans_b = false);
// out = alpha * op(a) @ op(b) + beta * out, in place (2-D only). out is f32 or
// a's dtype; with beta = 1 this accumulates, e.g. a bf16 weight gradient into
// an f32 main_grad. out's last dim must have unit stride.
absl::Status MatmulInto(const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a,
                        bool trans_b, float alpha = 1.0f, float beta = 0.0f);
// x [..., in] @ weight[out, in]^T (+ bias[out] if defined) -> [..., out].
absl::StatusOr<Tensor> Linear(const Tensor& x, const Tensor& weight,
                              const Tensor& bias = Tensor());

// ---------------- Gather / scatter-add ----------------
// Picks slices t[..., index[i], ...] along dim; index is 1-D i32/i64. The
// result has size(dim) == index.numel(). Error names the position of an
// out-of-range index.
absl::StatusOr<Tensor> IndexSelect(const Tensor& t, int64_t dim, const Tensor& index);
// dst[..., index[i], ...] += src[..., i, ...] along dim, in place; repeated
// indices accumulate. src has dst's shape except size(dim) == index.numel();
// src is converted to dst's dtype. Error names the position of a bad index.
absl::Status IndexAdd(const Tensor& dst, int64_t dim, const Tensor& index, const Tensor& src);

}  // namespace tpx::ops

#endif  // TPX_CORE_OPS_H_
