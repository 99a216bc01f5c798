// Reductions (Sum, Mean, Max, Argmax) and softmax over the middle dim of a
// contiguous [outer, n, inner] tensor. Long contiguous rows (inner == 1,
// n >= kMinRowLength): one block per row, threads stride over the row and
// combine in shared memory. Otherwise ("columns"): one thread per output
// walks n with stride inner, so for inner > 1 neighbouring threads read
// neighbouring elements.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/cuda/device_math.cuh"
#include "core/cuda/launch.h"

namespace tpx::cuda {
namespace {

// ---- Sum / Mean: accumulate in A (f32, or i64 for integers); out = acc * scale. ----

template <typename TO, typename A>
__device__ __forceinline__ TO FinishSum(A acc, float scale) {
  if constexpr (std::is_floating_point_v<A>) {
    return StoreAs<TO>(acc * scale);
  } else {
    return static_cast<TO>(acc);
  }
}

// kPacked: every row starts pack-aligned and n is a multiple of kPack, so
// each thread reads whole Packed runs.
template <typename T, typename A, typename TO, bool kPacked>
__global__ void SumRowsKernel(const T* in, TO* out, int64_t rows, int64_t n, float scale) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x = in + row * n;
    A acc = 0;
    if constexpr (kPacked) {
      const Packed<T>* runs = reinterpret_cast<const Packed<T>*>(x);
      for (int64_t r = threadIdx.x; r < n / kPack; r += blockDim.x) {
        const Packed<T> run = runs[r];
#pragma unroll
        for (int j = 0; j < kPack; ++j) acc += static_cast<A>(Load(run.v[j]));
      }
    } else {
      for (int64_t k = threadIdx.x; k < n; k += blockDim.x) acc += static_cast<A>(Load(x[k]));
    }
    acc = BlockReduce(acc, [](A p, A q) { return p + q; });
    if (threadIdx.x == 0) out[row] = FinishSum<TO>(acc, scale);
  }
}

template <typename T, typename A, typename TO>
__global__ void SumColsKernel(const T* in, TO* out, int64_t outer, int64_t n, int64_t inner,
                              float scale) {
  for (int64_t o = GlobalThread(); o < outer * inner; o += GridThreads()) {
    const T* x = in + (o / inner) * n * inner + o % inner;
    A acc = 0;
    for (int64_t k = 0; k < n; ++k) acc += static_cast<A>(Load(x[k * inner]));
    out[o] = FinishSum<TO>(acc, scale);
  }
}

// ---- Max / Argmax: the preferred (value, index) candidate. ----

template <typename C>
struct Best {
  C value;
  int64_t index;  // -1: no candidate yet
};

// The order that makes the result the first NaN if there is one, else the
// first index holding the maximum, whatever order candidates meet in.
template <typename C>
__device__ __forceinline__ Best<C> Prefer(Best<C> p, Best<C> q) {
  if (p.index < 0) return q;
  if (q.index < 0) return p;
  if constexpr (std::is_floating_point_v<C>) {
    const bool p_nan = p.value != p.value, q_nan = q.value != q.value;
    if (p_nan || q_nan) {
      if (p_nan && q_nan) return p.index < q.index ? p : q;
      return p_nan ? p : q;
    }
  }
  if (p.value != q.value) return p.value > q.value ? p : q;
  return p.index < q.index ? p : q;
}

// Writes the value (values != nullptr) or the index (indices != nullptr).
template <typename T>
__device__ __forceinline__ void WriteBest(Best<Compute<T>> best, int64_t o, T* values,
                                          int64_t* indices) {
  if (values != nullptr) values[o] = StoreAs<T>(best.value);
  if (indices != nullptr) indices[o] = best.index;
}

template <typename T>
__global__ void MaxRowsKernel(const T* in, T* values, int64_t* indices, int64_t rows,
                              int64_t n) {
  using C = Compute<T>;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x = in + row * n;
    Best<C> best{C(0), -1};
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      best = Prefer(best, Best<C>{Load(x[k]), k});
    }
    best = BlockReduce(best, [](Best<C> p, Best<C> q) { return Prefer(p, q); });
    if (threadIdx.x == 0) WriteBest(best, row, values, indices);
  }
}

template <typename T>
__global__ void MaxColsKernel(const T* in, T* values, int64_t* indices, int64_t outer, int64_t n,
                              int64_t inner) {
  using C = Compute<T>;
  for (int64_t o = GlobalThread(); o < outer * inner; o += GridThreads()) {
    const T* x = in + (o / inner) * n * inner + o % inner;
    Best<C> best{C(0), -1};
    for (int64_t k = 0; k < n; ++k) best = Prefer(best, Best<C>{Load(x[k * inner]), k});
    WriteBest(best, o, values, indices);
  }
}

// ---- Softmax in f32: max, then sum of exp(x - max), then write. ----

// The shift that keeps exp() in range; an all -inf row shifts by 0 (not
// -inf, which would give inf - inf).
__device__ __forceinline__ float SoftmaxShift(float max) {
  return isinf(max) && max < 0.0f ? 0.0f : max;
}

template <typename T>
__device__ __forceinline__ T SoftmaxValue(float x, float shift, float sum, bool log) {
  return log ? StoreAs<T>(x - (shift + logf(sum))) : StoreAs<T>(expf(x - shift) * (1.0f / sum));
}

template <typename T>
__global__ void SoftmaxRowsKernel(const T* in, T* out, int64_t rows, int64_t n, bool log) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x = in + row * n;
    T* y = out + row * n;
    float max = -INFINITY;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) max = MaxPropagateNaN(max, Load(x[k]));
    const float shift =
        SoftmaxShift(BlockReduce(max, [](float p, float q) { return MaxPropagateNaN(p, q); }));
    float sum = 0.0f;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) sum += expf(Load(x[k]) - shift);
    sum = BlockReduce(sum, [](float p, float q) { return p + q; });
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      y[k] = SoftmaxValue<T>(Load(x[k]), shift, sum, log);
    }
  }
}

template <typename T>
__global__ void SoftmaxColsKernel(const T* in, T* out, int64_t outer, int64_t n, int64_t inner,
                                  bool log) {
  for (int64_t o = GlobalThread(); o < outer * inner; o += GridThreads()) {
    const int64_t start = (o / inner) * n * inner + o % inner;
    const T* x = in + start;
    T* y = out + start;
    float max = -INFINITY;
    for (int64_t k = 0; k < n; ++k) max = MaxPropagateNaN(max, Load(x[k * inner]));
    const float shift = SoftmaxShift(max);
    float sum = 0.0f;
    for (int64_t k = 0; k < n; ++k) sum += expf(Load(x[k * inner]) - shift);
    for (int64_t k = 0; k < n; ++k)
      y[k * inner] = SoftmaxValue<T>(Load(x[k * inner]), shift, sum, log);
  }
}

// Below this a block per row leaves most of its threads idle; a thread per
// row is cheaper.
constexpr int64_t kMinRowLength = 64;

bool UseRowKernel(int64_t n, int64_t inner) { return inner == 1 && n >= kMinRowLength; }

// Rows get one block each (capped; the kernels loop), columns one thread each.
unsigned RowBlocks(int64_t rows) {
  constexpr int64_t kMaxBlocks = 65535;
  return static_cast<unsigned>(rows < kMaxBlocks ? rows : kMaxBlocks);
}

template <typename T, typename A, typename TO>
cudaError_t Sum(const void* in, void* out, int64_t outer, int64_t n, int64_t inner, float scale,
                cudaStream_t stream) {
  const T* x = static_cast<const T*>(in);
  TO* y = static_cast<TO*>(out);
  if (UseRowKernel(n, inner)) {
    if (RowsPackable(n, x)) {
      SumRowsKernel<T, A, TO, true>
          <<<RowBlocks(outer), kThreads, 0, stream>>>(x, y, outer, n, scale);
    } else {
      SumRowsKernel<T, A, TO, false>
          <<<RowBlocks(outer), kThreads, 0, stream>>>(x, y, outer, n, scale);
    }
  } else {
    SumColsKernel<T, A, TO>
        <<<BlocksFor(outer * inner), kThreads, 0, stream>>>(x, y, outer, n, inner, scale);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t Max(const void* in, void* values, void* indices, int64_t outer, int64_t n,
                int64_t inner, cudaStream_t stream) {
  const T* x = static_cast<const T*>(in);
  T* v = static_cast<T*>(values);
  int64_t* i = static_cast<int64_t*>(indices);
  if (UseRowKernel(n, inner)) {
    MaxRowsKernel<T><<<RowBlocks(outer), kThreads, 0, stream>>>(x, v, i, outer, n);
  } else {
    MaxColsKernel<T><<<BlocksFor(outer * inner), kThreads, 0, stream>>>(x, v, i, outer, n, inner);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchReduce(ReduceOp op, DType in_dtype, const void* in, DType out_dtype,
                         void* out, int64_t outer, int64_t n, int64_t inner,
                         cudaStream_t stream) {
  if (outer * inner == 0) return cudaSuccess;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean: {
      // Mean multiplies by 1/n like the CPU kernels (n == 0 gives NaN there too).
      const float scale = op == ReduceOp::kMean ? 1.0f / static_cast<float>(n) : 1.0f;
      if (in_dtype == DType::kI32 || in_dtype == DType::kI64) {
        if (op == ReduceOp::kMean || out_dtype != DType::kI64) return cudaErrorNotSupported;
        return DispatchIndex(in_dtype, [&](auto tag) {
          using T = typename decltype(tag)::type;
          return Sum<T, int64_t, int64_t>(in, out, outer, n, inner, scale, stream);
        });
      }
      if (out_dtype != in_dtype) return cudaErrorNotSupported;
      return DispatchFloating(in_dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return Sum<T, float, T>(in, out, outer, n, inner, scale, stream);
      });
    }
    case ReduceOp::kMax:
    case ReduceOp::kArgmax: {
      if (n <= 0) return cudaErrorInvalidValue;
      const bool argmax = op == ReduceOp::kArgmax;
      if (out_dtype != (argmax ? DType::kI64 : in_dtype)) return cudaErrorNotSupported;
      return DispatchNumeric(in_dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return Max<T>(in, argmax ? nullptr : out, argmax ? out : nullptr, outer, n, inner,
                      stream);
      });
    }
  }
  return cudaErrorNotSupported;
}

cudaError_t LaunchSoftmax(DType dtype, const void* in, void* out, int64_t outer, int64_t n,
                          int64_t inner, bool log, cudaStream_t stream) {
  if (outer * n * inner == 0) return cudaSuccess;
  return DispatchFloating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(in);
    T* y = static_cast<T*>(out);
    if (UseRowKernel(n, inner)) {
      SoftmaxRowsKernel<T><<<RowBlocks(outer), kThreads, 0, stream>>>(x, y, outer, n, log);
    } else {
      SoftmaxColsKernel<T>
          <<<BlocksFor(outer * inner), kThreads, 0, stream>>>(x, y, outer, n, inner, log);
    }
    return cudaGetLastError();
  });
}

}  // namespace tpx::cuda
