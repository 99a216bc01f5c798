// The kernels behind Tensor and tpx::ops for one device type, and the
// registry that maps a Device to them.
//
// Every public op (core/ops.h, Tensor copies and factories) checks its
// arguments, works out broadcasting and allocates its output once, in shared
// code, then calls the DeviceKernels of its tensors' device. So CPU and CUDA
// share one dispatch, one set of error messages and one set of tests; a
// device only supplies loops over arguments that are already valid.
//
//   TPX_ASSIGN_OR_RETURN(DeviceKernels* k, KernelsFor(x.device(), "Exp"));
//   TPX_RETURN_IF_ERROR(k->Unary(UnaryOp::kExp, out, x, 0.0));
//
// The CPU kernels are always present. Other device types register theirs at
// static initialisation from the library that implements them (CUDA:
// //core/cuda, alwayslink); a program that does not link it gets a
// FailedPrecondition naming the missing dependency.
//
// Contract for every kernel: all tensors are defined, on the device the
// kernels belong to, of supported dtypes, and shaped as documented; kernels
// may still fail (device errors) and say so in their Status. Work may be
// queued asynchronously on the device's current stream: reading results on
// the host goes through CopyToHost, which waits for it.
#ifndef TPX_CORE_DEVICE_KERNELS_H_
#define TPX_CORE_DEVICE_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/adamw_operands.h"
#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/kernel_ops.h"
#include "core/tensor.h"

namespace tpx {

// Floats per row of P that causal self-attention keeps for its backward
// (DeviceKernels::CausalSelfAttention's stats).
inline constexpr int64_t kAttentionStatsPerRow = 2;

class DeviceKernels {
 public:
  virtual ~DeviceKernels() = default;

  // ---- Device and memory. ----
  // OK when device `index` of this type exists and works; otherwise a
  // FailedPrecondition saying why (e.g. "no CUDA device visible").
  virtual absl::Status CheckDevice(int index) = 0;
  // Allocator for device `index` (CheckDevice passed).
  virtual Allocator& allocator(int index) = 0;
  // The stream ops on device `index` are queued on (a cudaStream_t for CUDA),
  // for code that orders other work, e.g. a collective, after them. nullptr
  // on the CPU, where ops finish before returning.
  virtual void* CurrentStream(int index) = 0;
  // Contiguous bytes between host memory and device memory; both return once
  // the data has arrived, after the work already queued on the device.
  virtual absl::Status CopyToHost(void* host_dst, const void* device_src, size_t bytes,
                                  int index) = 0;
  virtual absl::Status CopyFromHost(void* device_dst, const void* host_src, size_t bytes,
                                    int index) = 0;

  // ---- Elementwise. Unless stated, every operand has out's shape: the
  // caller expands broadcast operands (stride-0 views). Any strides. ----
  // dst = src converted to dst's dtype.
  virtual absl::Status Copy(const Tensor& dst, const Tensor& src) = 0;
  // Every element of dst = value converted to dst's dtype.
  virtual absl::Status Fill(const Tensor& dst, double value) = 0;
  // out = a (op) b. Arithmetic (kAdd..kDiv): out and a share a dtype (not
  // bool; kDiv floating); b has a's dtype, except for kAdd with a floating a,
  // where b may be any dtype and is converted (f32 main_grad += bf16 grad).
  // out may be a itself (in-place accumulation). Values are computed in f32
  // for bf16/f16 and rounded once. alpha is used by kAdd only.
  virtual absl::Status Binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b,
                              double alpha) = 0;
  // out = op(in). Floating ops keep in's dtype; out may be in itself.
  // `scalar` is used by kScale and the *Scalar comparisons.
  virtual absl::Status Unary(UnaryOp op, const Tensor& out, const Tensor& in, double scalar) = 0;
  // out = cond ? a : b; cond is bool; out, a, b share a dtype.
  virtual absl::Status Where(const Tensor& out, const Tensor& cond, const Tensor& a,
                             const Tensor& b) = 0;

  // ---- Reductions. `in` is contiguous and viewed as [outer, n, inner]; out
  // is contiguous with outer * inner elements. ----
  virtual absl::Status Reduce(ReduceOp op, const Tensor& out, const Tensor& in, int64_t outer,
                              int64_t n, int64_t inner) = 0;
  // Softmax (or log-softmax) over n; in and out contiguous [outer, n, inner],
  // same floating dtype.
  virtual absl::Status Softmax(const Tensor& out, const Tensor& in, int64_t outer, int64_t n,
                               int64_t inner, bool log) = 0;

  // ---- Fused transformer kernels: one pass per row where the composed ops
  // take several. Every tensor is contiguous. The defaults return
  // Unimplemented; the ops behind them (core/ops.h, "Fused") pass that on
  // and their callers (core/autograd) then compose the same math from the
  // ops above, so a device overrides these only to go faster. ----
  // Per row of x [rows, h]: mean, rstd = 1 / sqrt(var + eps) (f32 [rows]),
  // y = (x - mean) * rstd * weight + bias. y has x's floating dtype; weight
  // and bias are f32 [h] or undefined (1 and 0).
  virtual absl::Status LayerNorm(const Tensor& y, const Tensor& mean, const Tensor& rstd,
                                 const Tensor& x, const Tensor& weight, const Tensor& bias,
                                 int64_t rows, int64_t h, double eps);
  // Gradients of LayerNorm given grad (x's dtype) and the forward's mean and
  // rstd: dx (x's dtype), dweight and dbias (f32 [h]); an undefined output
  // is not computed. weight as in LayerNorm.
  virtual absl::Status LayerNormBackward(const Tensor& dx, const Tensor& dweight,
                                         const Tensor& dbias, const Tensor& grad,
                                         const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                         const Tensor& weight, int64_t rows, int64_t h);
  // Softmax of scale * in over the last dim of [batch, m, n], where row i of
  // each matrix sees columns j <= i + n - m only when `causal` (the others
  // get probability 0; a row that sees none is all 0). out has in's dtype.
  virtual absl::Status ScaledSoftmax(const Tensor& out, const Tensor& in, int64_t batch,
                                     int64_t m, int64_t n, double scale, bool causal);
  // Given y = ScaledSoftmax(x) over rows of n: dx = scale * y * (grad -
  // sum(grad * y)); all one floating dtype.
  virtual absl::Status ScaledSoftmaxBackward(const Tensor& dx, const Tensor& grad,
                                             const Tensor& y, int64_t rows, int64_t n,
                                             double scale);

  // y = GeLU(x + bias) (exact GeLU, core/kernel_ops.h) over rows of x [rows,
  // h]; y, x and bias [h] share a floating dtype; computed in f32.
  virtual absl::Status BiasGelu(const Tensor& y, const Tensor& x, const Tensor& bias,
                                int64_t rows, int64_t h);
  // Its gradients: dx = grad * GeLU'(x + bias), all of x's dtype, and, when
  // dbias (bias's dtype [h]) is defined, dbias = dx summed over rows (in
  // f32, from dx before it is rounded) in the same pass.
  virtual absl::Status BiasGeluBackward(const Tensor& dx, const Tensor& dbias,
                                        const Tensor& grad, const Tensor& x, const Tensor& bias,
                                        int64_t rows, int64_t h);

  // ---- Fused training kernels of the loss, the optimizer and dropout
  // (loss/, optim/, rng/), reached through core/ops.h ("Fused training
  // kernels"). Same contract as the fused transformer kernels: the defaults
  // return Unimplemented and the callers compose the math from core ops. ----
  // Per row r of logits [rows, v] (floating): stats[r] (f32 [rows, 4]) =
  // {m = max_j x_j, sum_j exp(x_j - m), sum_j (x_j - m), x[target[r]] or 0},
  // in f32. target is i64 [rows]: a column in [0, v), -1 when the row's
  // target is not among these columns, -2 when the row is ignored (not read;
  // stats {-inf, 0, 0, 0}). A row of -inf logits gives {-inf, 0, 0, x[target]}.
  virtual absl::Status CrossEntropyStats(const Tensor& stats, const Tensor& logits,
                                         const Tensor& target, int64_t rows, int64_t v);
  // dx (logits' dtype [rows, v]; may be logits itself) = g_r * (exp(x - lse_r)
  // - smooth_over_k) - [j == target[r]] * g_r * target_coeff; rows with
  // target -2 get 0. lse and g are f32 [rows]; target as above.
  virtual absl::Status CrossEntropyBackward(const Tensor& dx, const Tensor& logits,
                                            const Tensor& lse, const Tensor& g,
                                            const Tensor& target, int64_t rows, int64_t v,
                                            float smooth_over_k, float target_coeff);
  // *out (host) = sum of x_i^2 over the n elements of x (floating), each
  // square and the sum in f64; returns once *out is written.
  virtual absl::Status SumOfSquares(const Tensor& x, int64_t n, double* out);
  // One AdamW update of n elements, all f32 but grad (f32 or bf16, read as
  // f32) and working (bf16 or undefined): per element
  //   p *= decay; m = b1 m + (1 - b1) g; s = b2 s + (1 - b2) g^2;
  //   p -= step_size * m / (sqrt(s) * inv_sqrt_bias2 + eps); working = bf16(p).
  //   (g = grad * grad_scale throughout).
  virtual absl::Status AdamWStep(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                                 const Tensor& exp_avg_sq, const Tensor& working, int64_t n,
                                 const AdamWCoefficients& c);
  // AdamWStep for each entry (contiguous, n = param's elements), so that a
  // device can update an optimizer's whole parameter list in one pass.
  // Default: AdamWStep per entry.
  virtual absl::Status AdamWSteps(absl::Span<const AdamWOperands> updates);
  // out[i] = SumOfSquares of xs[i] (contiguous, floating, all of its
  // elements; 0 when empty), in one pass where the device can. Default:
  // SumOfSquares per entry.
  virtual absl::Status SumsOfSquares(absl::Span<const Tensor> xs, double* out);
  // out = (keep ? (x + bias) * scale : 0) + residual over n elements; x, out
  // and residual (undefined: none) share a floating dtype; keep is bool
  // (undefined: every element kept); bias (undefined: none) has x's dtype
  // and bias_n elements, repeating along x (x viewed as [n / bias_n,
  // bias_n]). Computed in f32, rounded once; out may be x or residual.
  virtual absl::Status DropoutAdd(const Tensor& out, const Tensor& x, const Tensor& bias,
                                  const Tensor& keep, const Tensor& residual, int64_t n,
                                  int64_t bias_n, float scale);

  // ---- Gather / scatter-add along dim. Every tensor is contiguous; index
  // is 1-D i32/i64 with every value already checked to be in [0, size(dim))
  // of in (IndexSelect) or dst (IndexAdd). ----
  // out has in's shape except out.size(dim) == index.numel(); same dtype.
  virtual absl::Status IndexSelect(const Tensor& out, const Tensor& in, int64_t dim,
                                   const Tensor& index) = 0;
  // dst[.., index[i], ..] += src[.., i, ..]; repeated indices accumulate; src
  // has dst's dtype and shape except size(dim) == index.numel(); dst is not
  // bool.
  virtual absl::Status IndexAdd(const Tensor& dst, int64_t dim, const Tensor& index,
                                const Tensor& src) = 0;

  // ---- Matrix product: tpx::Gemm (core/gemm.h) on device `index`'s memory. ----
  virtual absl::Status Gemm(int index, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                            float alpha, DType ab_dtype, const void* a, int64_t lda,
                            const void* b, int64_t ldb, float beta, DType c_dtype, void* c,
                            int64_t ldc) = 0;
  // tpx::GemmBias (core/gemm.h): C = op(A) op(B) + bias row, all in ab_dtype.
  // The default returns Unimplemented (callers then seed C with the bias and
  // run Gemm with beta = 1).
  virtual absl::Status GemmBias(int index, bool trans_a, bool trans_b, int64_t m, int64_t n,
                                int64_t k, DType ab_dtype, const void* a, int64_t lda,
                                const void* b, int64_t ldb, const void* bias, void* c,
                                int64_t ldc);
  // tpx::GemmBatched (core/gemm.h): `batch` products at element strides
  // stride_a/b/c. The default runs them one Gemm at a time.
  virtual absl::Status GemmBatched(int index, int64_t batch, bool trans_a, bool trans_b,
                                   int64_t m, int64_t n, int64_t k, float alpha, DType ab_dtype,
                                   const void* a, int64_t lda, int64_t stride_a, const void* b,
                                   int64_t ldb, int64_t stride_b, float beta, DType c_dtype,
                                   void* c, int64_t ldc, int64_t stride_c);

  // ---- Causal self-attention (core/attention.h). Same contract as the
  // fused transformer kernels: the defaults return Unimplemented and the
  // callers compose the math from Matmul and ScaledSoftmax. Every tensor is
  // contiguous; qkv is [t, b, 3 * heads * head_dim] of a floating dtype whose
  // last dim holds all heads' q, then all heads' k, then all heads' v (head
  // h of q at columns [h * head_dim, (h + 1) * head_dim)). ----
  // Per (batch row, head): ctx = P v with P = softmax(scale * q k^T), row i
  // seeing keys j <= i. ctx is [t, b, heads * head_dim] of qkv's dtype;
  // stats (f32 [b * heads, t, kAttentionStatsPerRow]) receives what the
  // kernels' backward needs to recompute P (per row of P, as
  // ops::CausalSelfAttentionResult says), or is undefined when not wanted.
  virtual absl::Status CausalSelfAttention(const Tensor& ctx, const Tensor& stats,
                                           const Tensor& qkv, int64_t t, int64_t b,
                                           int64_t heads, int64_t head_dim, double scale);
  // Its gradient: dqkv (qkv's shape and dtype) from grad_ctx (ctx's shape
  // and dtype), qkv and the forward's stats.
  virtual absl::Status CausalSelfAttentionBackward(const Tensor& dqkv, const Tensor& grad_ctx,
                                                   const Tensor& qkv, const Tensor& stats,
                                                   int64_t t, int64_t b, int64_t heads,
                                                   int64_t head_dim, double scale);
};

// Makes `kernels` serve every device of `type` (a static object; called once
// at static initialisation). Registering a type twice is a programming error.
void RegisterDeviceKernels(DeviceType type, DeviceKernels* kernels);

// The kernels for `device` after DeviceKernels::CheckDevice; otherwise a
// FailedPrecondition that names `op`, e.g. "Tensor::Empty: cuda:0: CUDA
// kernels are not linked into this program (depend on //core/cuda)".
absl::StatusOr<DeviceKernels*> KernelsFor(Device device, const char* op);

// The CPU kernels (never fails).
DeviceKernels& CpuKernels();

}  // namespace tpx

#endif  // TPX_CORE_DEVICE_KERNELS_H_
