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

}  // namespace tpx::cuda

#endif  // TPX_CORE_CUDA_LAUNCH_H_
