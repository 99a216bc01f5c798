// Launchers of the CUDA kernels behind CudaKernels (cuda_kernels.cc). Plain
// C++ over device pointers, so Tensor and Status code stays out of nvcc.
//
//   StridedLayout l = ...;   // operands out, a, b (collapse_dims.h)
//   cudaError_t rc = LaunchBinary(BinaryOp::kAdd, l, DType::kF32, out, DType::kF32, a,
//                                 DType::kBF16, b, /*alpha=*/1.0, stream);
//
// Every launcher only enqueues work on `stream` and returns the launch error;
// a dtype combination it does not implement gives cudaErrorNotSupported
// (callers pass only the combinations core/device_kernels.h allows).
// Element types: bf16/f16 compute in f32 and round once to nearest even;
// bool is one byte holding 0 or 1.
#ifndef TPX_CORE_CUDA_LAUNCH_H_
#define TPX_CORE_CUDA_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/cuda/strided_layout.h"
#include "core/dtype.h"
#include "core/kernel_ops.h"

namespace tpx::cuda {

// ---- Elementwise over a StridedLayout; operand order as listed. ----
// Operand 0: dst. `bits` holds one element of `elem_size` bytes.
cudaError_t LaunchFill(const StridedLayout& layout, size_t elem_size, void* dst, uint64_t bits,
                       cudaStream_t stream);
// Operands: out, in; out = in converted to out's dtype (any to any).
cudaError_t LaunchCopy(const StridedLayout& layout, DType out_dtype, void* out, DType in_dtype,
                       const void* in, cudaStream_t stream);
// Operands: out, in. Floating ops keep the dtype (kScale included); kNot
// bool -> bool; *Scalar any -> bool.
cudaError_t LaunchUnary(UnaryOp op, const StridedLayout& layout, DType out_dtype, void* out,
                        DType in_dtype, const void* in, double scalar, cudaStream_t stream);
// Operands: out, a, b.
cudaError_t LaunchBinary(BinaryOp op, const StridedLayout& layout, DType out_dtype, void* out,
                         DType a_dtype, const void* a, DType b_dtype, const void* b,
                         double alpha, cudaStream_t stream);
// Operands: out, cond (bool), a, b; out, a and b have one `elem_size`.
cudaError_t LaunchWhere(const StridedLayout& layout, size_t elem_size, void* out,
                        const void* cond, const void* a, const void* b, cudaStream_t stream);

// ---- Contiguous [outer, n, inner] input, [outer, inner] output. ----
// Sum/Mean: f32/bf16/f16 -> same dtype (f32 accumulation), i32/i64 -> i64.
// Max: same dtype. Argmax: i64. NaN propagates; Argmax takes the first.
cudaError_t LaunchReduce(ReduceOp op, DType in_dtype, const void* in, DType out_dtype,
                         void* out, int64_t outer, int64_t n, int64_t inner,
                         cudaStream_t stream);
// in and out [outer, n, inner] of one floating dtype; softmax over n.
cudaError_t LaunchSoftmax(DType dtype, const void* in, void* out, int64_t outer, int64_t n,
                          int64_t inner, bool log, cudaStream_t stream);

// ---- Gather / scatter-add, contiguous. index: k values (i32 or i64). ----
// out[o, j, i] = in[o, index[j], i]; in [outer, n, inner], out [outer, k, inner].
cudaError_t LaunchIndexSelect(size_t elem_size, const void* in, void* out, DType index_dtype,
                              const void* index, int64_t outer, int64_t n, int64_t k,
                              int64_t inner, cudaStream_t stream);
// dst[o, index[j], i] += src[o, j, i]; dst and src of one dtype (not bool).
cudaError_t LaunchIndexAdd(DType dtype, void* dst, const void* src, DType index_dtype,
                           const void* index, int64_t outer, int64_t n, int64_t k,
                           int64_t inner, cudaStream_t stream);

// ---- Fused transformer kernels (fused_nn.cu), as DeviceKernels documents
// them (core/device_kernels.h). Contiguous operands; `dtype` (floating) is
// that of x, y, grad and dx; statistics, weight and bias of layer norm are
// f32. Null optional pointers mean the operand is undefined. ----
// Column sums over the rows of a [rows, h] matrix (dweight, dbias) add f32
// partials of chunks of rows in a fixed order, so they do not change from
// run to run. Floats a workspace needs per column sum: h * ColumnSumChunks.
int64_t ColumnSumChunks(int64_t rows, int64_t h);

// y = (x - mean) * rstd * weight + bias per row; mean and rstd [rows] out.
cudaError_t LaunchLayerNorm(DType dtype, const void* x, const float* weight, const float* bias,
                            void* y, float* mean, float* rstd, int64_t rows, int64_t h,
                            float eps, cudaStream_t stream);
// dx, dweight, dbias each optional; `workspace` holds h * ColumnSumChunks(rows, h)
// floats per wanted column sum (dweight, dbias), or is null when neither is.
cudaError_t LaunchLayerNormBackward(DType dtype, const void* grad, const void* x,
                                   const float* mean, const float* rstd, const float* weight,
                                   void* dx, float* dweight, float* dbias, float* workspace,
                                   int64_t rows, int64_t h, cudaStream_t stream);
// out = softmax(scale * in) over rows of n of [batch, m, n] (causal: row i
// sees columns j <= i + n - m; the others, and rows seeing none, get 0).
cudaError_t LaunchScaledSoftmax(DType dtype, const void* in, void* out, int64_t batch, int64_t m,
                                int64_t n, float scale, bool causal, cudaStream_t stream);
// dx = scale * y * (grad - sum(grad * y)) per row of n.
cudaError_t LaunchScaledSoftmaxBackward(DType dtype, const void* grad, const void* y, void* dx,
                                        int64_t rows, int64_t n, float scale,
                                        cudaStream_t stream);
// y = GeLU(x + bias); bias [h] of x's dtype.
cudaError_t LaunchBiasGelu(DType dtype, const void* x, const void* bias, void* y, int64_t rows,
                           int64_t h, cudaStream_t stream);
// dx = grad * GeLU'(x + bias); dbias (optional, x's dtype) = dx summed over
// rows in f32 before dx is rounded, through `workspace` (h *
// ColumnSumChunks(rows, h) floats; null without dbias).
cudaError_t LaunchBiasGeluBackward(DType dtype, const void* grad, const void* x,
                                   const void* bias, void* dx, void* dbias, float* workspace,
                                   int64_t rows, int64_t h, cudaStream_t stream);

// ---- Fused training kernels (fused_training.cu), as DeviceKernels
// documents them. Contiguous operands; null optional pointers mean the
// operand is undefined. ----
// stats [rows, 4] (f32) of logits [rows, v] (`dtype`) and target (i64 [rows];
// a target outside [0, v) other than -2 reads no logit).
cudaError_t LaunchCrossEntropyStats(DType dtype, const void* logits, const int64_t* target,
                                    float* stats, int64_t rows, int64_t v, cudaStream_t stream);
// dx (may be logits) from logits, lse and g (f32 [rows]) and target.
cudaError_t LaunchCrossEntropyBackward(DType dtype, const void* logits, const float* lse,
                                       const float* g, const int64_t* target, void* dx,
                                       int64_t rows, int64_t v, float smooth_over_k,
                                       float target_coeff, cudaStream_t stream);
// Doubles the workspace of LaunchSumOfSquares holds.
inline constexpr int64_t kSumOfSquaresWorkspace = 1025;
// workspace[0] = sum of x_i^2 over n elements (f64 squares and sums);
// workspace[1, kSumOfSquaresWorkspace) holds per-block partials.
cudaError_t LaunchSumOfSquares(DType dtype, const void* x, int64_t n, double* workspace,
                               cudaStream_t stream);
// One AdamW update of n elements: param, exp_avg, exp_avg_sq f32, grad
// `grad_dtype` (f32 or bf16), working bf16 (optional).
cudaError_t LaunchAdamWStep(float* param, DType grad_dtype, const void* grad, float* exp_avg,
                            float* exp_avg_sq, void* working, int64_t n,
                            const AdamWCoefficients& c, cudaStream_t stream);
// out = (keep ? (x + bias) * scale : 0) + residual over n elements; bias
// (bias_n elements, repeating), keep (bool) and residual optional; out may
// be x or residual.
cudaError_t LaunchDropoutAdd(DType dtype, void* out, const void* x, const void* bias,
                             const void* keep, const void* residual, int64_t n, int64_t bias_n,
                             float scale, cudaStream_t stream);

}  // namespace tpx::cuda

#endif  // TPX_CORE_CUDA_LAUNCH_H_
