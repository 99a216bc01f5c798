// Elementwise CUDA kernels on device memory, callable from plain C++.
//
//   TPX_RETURN_IF_ERROR(CudaStatus(cuda::AddF32(a, b, out, n, stream), "add"));
//   cuda::F32ToBF16(x, x_bf16, n, stream);   // round to nearest even, NaN stays NaN
//
// Each function enqueues one kernel on `stream` and returns the launch
// error (cudaSuccess when enqueued). Pointers are device pointers; `out` may
// alias an input (elementwise, same index). bf16 values are raw bits
// (uint16_t), as tpx::BF16 holds them; arithmetic on bf16 goes through f32.
#ifndef TPX_CORE_CUDA_KERNELS_H_
#define TPX_CORE_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tpx::cuda {

// out[i] = a[i] + b[i]
cudaError_t AddF32(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream);
cudaError_t AddBF16(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n,
                    cudaStream_t stream);
// out[i] = alpha * x[i]
cudaError_t ScaleF32(const float* x, float alpha, float* out, int64_t n, cudaStream_t stream);
cudaError_t ScaleBF16(const uint16_t* x, float alpha, uint16_t* out, int64_t n,
                      cudaStream_t stream);
// Conversions; f32 -> bf16 rounds to nearest even like tpx::FloatToBF16.
cudaError_t F32ToBF16(const float* x, uint16_t* out, int64_t n, cudaStream_t stream);
cudaError_t BF16ToF32(const uint16_t* x, float* out, int64_t n, cudaStream_t stream);

}  // namespace tpx::cuda

#endif  // TPX_CORE_CUDA_KERNELS_H_
