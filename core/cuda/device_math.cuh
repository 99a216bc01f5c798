// Device-side helpers shared by the .cu files (private to //core/cuda):
// element types per DType, load/convert/store with the CPU kernels' rounding,
// host-side dispatch on DType, launch geometry and strided offsets.
#ifndef TPX_CORE_CUDA_DEVICE_MATH_CUH_
#define TPX_CORE_CUDA_DEVICE_MATH_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda/strided_layout.h"
#include "core/dtype.h"

namespace tpx::cuda {

// ---- Element types. bool is stored as one byte 0/1 (uint8_t). ----
template <typename T>
inline constexpr bool kIsReduced =
    std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;
template <typename T>
inline constexpr bool kIsFloating = kIsReduced<T> || std::is_same_v<T, float>;
template <typename T>
inline constexpr bool kIsBool = std::is_same_v<T, uint8_t>;

// Arithmetic happens in: float for floating types, bool for bool, else T.
template <typename T>
using Compute =
    std::conditional_t<kIsFloating<T>, float, std::conditional_t<kIsBool<T>, bool, T>>;

template <typename T>
__device__ __forceinline__ Compute<T> Load(T v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else if constexpr (kIsBool<T>) {
    return v != 0;
  } else {
    return v;
  }
}

// A computed value as element type T: round to nearest even for bf16/f16
// (from f32, as the CPU does), C++ conversion for numbers, != 0 for bool.
template <typename T, typename V>
__device__ __forceinline__ T StoreAs(V v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (kIsBool<T>) {
    return v != V(0) ? 1 : 0;
  } else {
    return static_cast<T>(v);
  }
}

// ---- Runs of kPack elements moved as one wide access (up to 16 bytes per
// instruction, several for wider runs). One element at a time, a warp asks
// for too few bytes at once to keep HBM busy, most of all for bf16. ----
inline constexpr int kPack = 8;

template <typename T>
struct alignas(sizeof(T) * kPack < 16 ? sizeof(T) * kPack : 16) Packed {
  T v[kPack];
};

// Whether p may be read or written as Packed<T> (host or device).
template <typename T>
__host__ __device__ __forceinline__ bool IsPackAligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % alignof(Packed<T>) == 0;
}

// ---- Host-side dispatch: fn(Tag<T>{}) with T the element type. ----
template <typename T>
struct Tag {
  using type = T;
};

template <typename Fn>
cudaError_t DispatchAll(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(Tag<float>{});
    case DType::kBF16: return fn(Tag<__nv_bfloat16>{});
    case DType::kF16: return fn(Tag<__half>{});
    case DType::kI32: return fn(Tag<int32_t>{});
    case DType::kI64: return fn(Tag<int64_t>{});
    case DType::kBool: return fn(Tag<uint8_t>{});
  }
  return cudaErrorNotSupported;
}

template <typename Fn>
cudaError_t DispatchFloating(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(Tag<float>{});
    case DType::kBF16: return fn(Tag<__nv_bfloat16>{});
    case DType::kF16: return fn(Tag<__half>{});
    default: return cudaErrorNotSupported;
  }
}

// f32, bf16, f16, i32, i64 (everything arithmetic works on).
template <typename Fn>
cudaError_t DispatchNumeric(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(Tag<float>{});
    case DType::kBF16: return fn(Tag<__nv_bfloat16>{});
    case DType::kF16: return fn(Tag<__half>{});
    case DType::kI32: return fn(Tag<int32_t>{});
    case DType::kI64: return fn(Tag<int64_t>{});
    default: return cudaErrorNotSupported;
  }
}

template <typename Fn>
cudaError_t DispatchIndex(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kI32: return fn(Tag<int32_t>{});
    case DType::kI64: return fn(Tag<int64_t>{});
    default: return cudaErrorNotSupported;
  }
}

// Pure data movement only needs the element size.
template <typename Fn>
cudaError_t DispatchBySize(size_t elem_size, Fn&& fn) {
  switch (elem_size) {
    case 1: return fn(Tag<uint8_t>{});
    case 2: return fn(Tag<uint16_t>{});
    case 4: return fn(Tag<uint32_t>{});
    case 8: return fn(Tag<uint64_t>{});
    default: return cudaErrorNotSupported;
  }
}

// ---- Launch geometry: grid-stride loops over a capped grid. ----
inline constexpr int kThreads = 256;  // a power of two (BlockReduce)

inline unsigned BlocksFor(int64_t work_items) {
  constexpr int64_t kMaxBlocks = 65535;
  const int64_t blocks = (work_items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Element offsets of linear index i in the first N operands of `l`.
template <int N>
__device__ __forceinline__ void Offsets(const StridedLayout& l, int64_t i, int64_t (&offset)[N]) {
  if (l.contiguous) {
    for (int k = 0; k < N; ++k) offset[k] = i;
    return;
  }
  for (int k = 0; k < N; ++k) offset[k] = 0;
  for (int d = l.rank - 1; d >= 0; --d) {
    const int64_t coord = i % l.sizes[d];
    i /= l.sizes[d];
    for (int k = 0; k < N; ++k) offset[k] += coord * l.strides[k][d];
  }
}

// Reduces one value per thread of a kThreads block with `combine`
// (associative and commutative); every thread gets the result.
template <typename V, typename Combine>
__device__ V BlockReduce(V value, Combine combine) {
  __shared__ V partial[kThreads];
  const int t = threadIdx.x;
  partial[t] = value;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (t < half) partial[t] = combine(partial[t], partial[t + half]);
    __syncthreads();
  }
  const V result = partial[0];
  __syncthreads();  // the buffer may be reused by the next call
  return result;
}

// NaN-propagating max (fmaxf would drop NaN).
__device__ __forceinline__ float MaxPropagateNaN(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}

// ---- Rows of a contiguous [rows, n] matrix, one group of threads per row:
// a warp for rows of up to kWarpRowMax elements (reductions by shuffles, no
// block barriers), the whole kThreads block for longer ones. ----
inline constexpr int kWarp = 32;
inline constexpr int64_t kWarpRowMax = 1024;

// Reduces one value per lane of a warp with `combine` (associative and
// commutative); every lane gets the same result. All 32 lanes must call it.
template <typename V, typename Combine>
__device__ __forceinline__ V WarpReduce(V value, Combine combine) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    value = combine(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

// kGroup threads (kWarp or kThreads) per row; blocks of kThreads threads
// walk the rows grid-stride. A group's loop condition is uniform across it,
// so every lane (every thread, for a block) reaches each Reduce.
template <int kGroup>
struct RowGroup {
  static_assert(kGroup == kWarp || kGroup == kThreads);
  static constexpr int kRowsPerBlock = kThreads / kGroup;

  __device__ static int Lane() { return threadIdx.x % kGroup; }
  __device__ static int64_t FirstRow() {
    return static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kGroup;
  }
  __device__ static int64_t RowStride() {
    return static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  }
  template <typename V, typename Combine>
  __device__ static V Reduce(V value, Combine combine) {
    if constexpr (kGroup == kWarp) {
      return WarpReduce(value, combine);
    } else {
      return BlockReduce(value, combine);
    }
  }
};

// Blocks for `rows` rows of kGroup threads each (capped; the kernels loop).
inline unsigned RowGroupBlocks(int64_t rows, int group) {
  constexpr int64_t kMaxBlocks = 65535;
  const int64_t per_block = kThreads / group;
  const int64_t blocks = (rows + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

// ---- Units of U consecutive elements (1, or kPack as one Packed run),
// widened to f32 and back: row kernels take U = kPack when the row length
// is a multiple of kPack and every operand is pack-aligned (so every row
// start is too), else U = 1. ----
template <int U, typename T>
__device__ __forceinline__ void LoadUnit(const T* p, float (&v)[U]) {
  if constexpr (U == 1) {
    v[0] = Load(*p);
  } else {
    static_assert(U == kPack);
    const Packed<T> run = *reinterpret_cast<const Packed<T>*>(p);
#pragma unroll
    for (int k = 0; k < U; ++k) v[k] = Load(run.v[k]);
  }
}

template <int U, typename T>
__device__ __forceinline__ void StoreUnit(T* p, const float (&v)[U]) {
  if constexpr (U == 1) {
    *p = StoreAs<T>(v[0]);
  } else {
    static_assert(U == kPack);
    Packed<T> run;
#pragma unroll
    for (int k = 0; k < U; ++k) run.v[k] = StoreAs<T>(v[k]);
    *reinterpret_cast<Packed<T>*>(p) = run;
  }
}

// Grid for a grid-stride loop over n elements, kPack per thread and step
// when packed.
inline unsigned ElementBlocks(int64_t n, bool packed) {
  return BlocksFor(packed ? (n + kPack - 1) / kPack : n);
}

// Whether every non-null pointer may be read or written as Packed runs of
// its element type.
template <typename... T>
inline bool AllPackAligned(const T*... ptrs) {
  return ((ptrs == nullptr || IsPackAligned<T>(ptrs)) && ...);
}

// Whether rows of n elements at `ptrs` can be moved in Packed units.
template <typename... T>
inline bool RowsPackable(int64_t n, const T*... ptrs) {
  return n % kPack == 0 && AllPackAligned(ptrs...);
}

// fn(std::integral_constant<int, U>{}) with the row kernels' unit U: kPack
// when `packable`, else 1.
template <typename Fn>
cudaError_t WithUnit(bool packable, Fn&& fn) {
  if (packable) return fn(std::integral_constant<int, kPack>{});
  return fn(std::integral_constant<int, 1>{});
}

// fn(std::integral_constant<int, G>{}) with the RowGroup size for rows of n.
template <typename Fn>
cudaError_t WithRowGroup(int64_t n, Fn&& fn) {
  if (n <= kWarpRowMax) return fn(std::integral_constant<int, kWarp>{});
  return fn(std::integral_constant<int, kThreads>{});
}

}  // namespace tpx::cuda

#endif  // TPX_CORE_CUDA_DEVICE_MATH_CUH_
