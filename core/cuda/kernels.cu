#include "core/cuda/kernels.h"

#include <cuda_bf16.h>

namespace tpx::cuda {
namespace {

constexpr int kThreads = 256;
// A grid-stride loop with a capped grid covers any n with one launch.
constexpr int64_t kMaxBlocks = 65535;

int Blocks(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

__device__ float Bf16Load(uint16_t bits) {
  return __bfloat162float(__ushort_as_bfloat16(bits));
}
__device__ uint16_t Bf16Store(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

template <typename Op>
__global__ void Elementwise(int64_t n, Op op) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    op(i);
  }
}

template <typename Op>
cudaError_t Launch(int64_t n, cudaStream_t stream, Op op) {
  if (n <= 0) return cudaSuccess;
  Elementwise<<<Blocks(n), kThreads, 0, stream>>>(n, op);
  return cudaGetLastError();
}

}  // namespace

cudaError_t AddF32(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream) {
  return Launch(n, stream, [=] __device__(int64_t i) { out[i] = a[i] + b[i]; });
}

cudaError_t AddBF16(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n,
                    cudaStream_t stream) {
  return Launch(n, stream, [=] __device__(int64_t i) {
    out[i] = Bf16Store(Bf16Load(a[i]) + Bf16Load(b[i]));
  });
}

cudaError_t ScaleF32(const float* x, float alpha, float* out, int64_t n, cudaStream_t stream) {
  return Launch(n, stream, [=] __device__(int64_t i) { out[i] = alpha * x[i]; });
}

cudaError_t ScaleBF16(const uint16_t* x, float alpha, uint16_t* out, int64_t n,
                      cudaStream_t stream) {
  return Launch(n, stream,
                [=] __device__(int64_t i) { out[i] = Bf16Store(alpha * Bf16Load(x[i])); });
}

cudaError_t F32ToBF16(const float* x, uint16_t* out, int64_t n, cudaStream_t stream) {
  return Launch(n, stream, [=] __device__(int64_t i) { out[i] = Bf16Store(x[i]); });
}

cudaError_t BF16ToF32(const uint16_t* x, float* out, int64_t n, cudaStream_t stream) {
  return Launch(n, stream, [=] __device__(int64_t i) { out[i] = Bf16Load(x[i]); });
}

}  // namespace tpx::cuda
