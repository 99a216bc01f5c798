// IndexSelect (gather) and IndexAdd (scatter-add) along the middle dim of
// contiguous [outer, n, inner] tensors, one thread per element of the
// [outer, k, inner] side.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda/device_math.cuh"
#include "core/cuda/launch.h"

namespace tpx::cuda {
namespace {

// E: an unsigned integer of the element's size (pure data movement).
template <typename E, typename I>
__global__ void IndexSelectKernel(const E* in, E* out, const I* index, int64_t outer, int64_t n,
                                  int64_t k, int64_t inner) {
  const int64_t total = outer * k * inner;
  for (int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const int64_t c = e % inner;
    const int64_t j = (e / inner) % k;
    const int64_t o = e / (inner * k);
    out[e] = in[(o * n + static_cast<int64_t>(index[j])) * inner + c];
  }
}

// *address += value atomically. Floating additions round to T each time
// like the CPU loop; bf16/f16 atomics need sm_80/sm_70, no more than the
// architectures built for (tools/cuda/cuda.bzl). i64 wraps like the CPU: the
// two's-complement sum is the same bits as the unsigned one.
template <typename T>
__device__ __forceinline__ void AtomicAddTo(T* address, T value) {
  if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(address),
              static_cast<unsigned long long>(value));
  } else {
    atomicAdd(address, value);
  }
}

// Repeated indices add with atomics, so the order in which they accumulate
// (and with it the rounding of a floating result) is not deterministic.
template <typename T, typename I>
__global__ void IndexAddKernel(T* dst, const T* src, const I* index, int64_t outer, int64_t n,
                               int64_t k, int64_t inner) {
  const int64_t total = outer * k * inner;
  for (int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const int64_t c = e % inner;
    const int64_t j = (e / inner) % k;
    const int64_t o = e / (inner * k);
    AtomicAddTo(dst + (o * n + static_cast<int64_t>(index[j])) * inner + c, src[e]);
  }
}

}  // namespace

cudaError_t LaunchIndexSelect(size_t elem_size, const void* in, void* out, DType index_dtype,
                              const void* index, int64_t outer, int64_t n, int64_t k,
                              int64_t inner, cudaStream_t stream) {
  if (outer * k * inner == 0) return cudaSuccess;
  return DispatchBySize(elem_size, [&](auto elem) {
    return DispatchIndex(index_dtype, [&](auto idx) {
      using E = typename decltype(elem)::type;
      using I = typename decltype(idx)::type;
      IndexSelectKernel<<<BlocksFor(outer * k * inner), kThreads, 0, stream>>>(
          static_cast<const E*>(in), static_cast<E*>(out), static_cast<const I*>(index), outer,
          n, k, inner);
      return cudaGetLastError();
    });
  });
}

cudaError_t LaunchIndexAdd(DType dtype, void* dst, const void* src, DType index_dtype,
                           const void* index, int64_t outer, int64_t n, int64_t k,
                           int64_t inner, cudaStream_t stream) {
  if (outer * k * inner == 0) return cudaSuccess;
  return DispatchNumeric(dtype, [&](auto elem) {
    return DispatchIndex(index_dtype, [&](auto idx) {
      using T = typename decltype(elem)::type;
      using I = typename decltype(idx)::type;
      IndexAddKernel<<<BlocksFor(outer * k * inner), kThreads, 0, stream>>>(
          static_cast<T*>(dst), static_cast<const T*>(src), static_cast<const I*>(index), outer,
          n, k, inner);
      return cudaGetLastError();
    });
  });
}

}  // namespace tpx::cuda
