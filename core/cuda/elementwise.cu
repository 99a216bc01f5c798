// Elementwise CUDA kernels: Fill, Copy (dtype conversion), unary math and
// comparisons, binary arithmetic/comparison/logic, Where. One kernel per
// operand count walks a StridedLayout; the per-element work is a functor, and
// related ops share a kernel through a runtime switch (uniform across the
// grid) so only the dtype combinations the ops allow are instantiated.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/cuda/device_math.cuh"
#include "core/cuda/launch.h"

namespace tpx::cuda {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

// ---- Kernels by operand count. ----

template <typename E>
__global__ void FillKernel(StridedLayout l, E* dst, E value) {
  for (int64_t i = GlobalThread(); i < l.numel; i += GridThreads()) {
    int64_t off[1];
    Offsets(l, i, off);
    dst[off[0]] = value;
  }
}

// out = StoreAs<TO>(f(Load(in))).
template <typename TO, typename TI, typename F>
__global__ void UnaryKernel(StridedLayout l, TO* out, const TI* in, F f) {
  for (int64_t i = GlobalThread(); i < l.numel; i += GridThreads()) {
    int64_t off[2];
    Offsets(l, i, off);
    out[off[0]] = StoreAs<TO>(f(Load(in[off[1]])));
  }
}

// out = StoreAs<TO>(f(Load(a), Load(b))).
template <typename TO, typename TA, typename TB, typename F>
__global__ void BinaryKernel(StridedLayout l, TO* out, const TA* a, const TB* b, F f) {
  for (int64_t i = GlobalThread(); i < l.numel; i += GridThreads()) {
    int64_t off[3];
    Offsets(l, i, off);
    out[off[0]] = StoreAs<TO>(f(Load(a[off[1]]), Load(b[off[2]])));
  }
}

// ---- Contiguous operands: kPack elements per thread and step (Packed). ----

// UnaryKernel over contiguous, pack-aligned operands; the tail after the last
// whole pack goes element by element.
template <typename TO, typename TI, typename F>
__global__ void UnaryPackedKernel(int64_t n, TO* out, const TI* in, F f) {
  const int64_t packs = n / kPack;
  for (int64_t p = GlobalThread(); p < packs; p += GridThreads()) {
    const Packed<TI> x = reinterpret_cast<const Packed<TI>*>(in)[p];
    Packed<TO> y;
#pragma unroll
    for (int k = 0; k < kPack; ++k) y.v[k] = StoreAs<TO>(f(Load(x.v[k])));
    reinterpret_cast<Packed<TO>*>(out)[p] = y;
  }
  for (int64_t i = packs * kPack + GlobalThread(); i < n; i += GridThreads()) {
    out[i] = StoreAs<TO>(f(Load(in[i])));
  }
}

// BinaryKernel over contiguous, pack-aligned operands.
template <typename TO, typename TA, typename TB, typename F>
__global__ void BinaryPackedKernel(int64_t n, TO* out, const TA* a, const TB* b, F f) {
  const int64_t packs = n / kPack;
  for (int64_t p = GlobalThread(); p < packs; p += GridThreads()) {
    const Packed<TA> x = reinterpret_cast<const Packed<TA>*>(a)[p];
    const Packed<TB> y = reinterpret_cast<const Packed<TB>*>(b)[p];
    Packed<TO> z;
#pragma unroll
    for (int k = 0; k < kPack; ++k) z.v[k] = StoreAs<TO>(f(Load(x.v[k]), Load(y.v[k])));
    reinterpret_cast<Packed<TO>*>(out)[p] = z;
  }
  for (int64_t i = packs * kPack + GlobalThread(); i < n; i += GridThreads()) {
    out[i] = StoreAs<TO>(f(Load(a[i]), Load(b[i])));
  }
}

template <typename E>
__global__ void WhereKernel(StridedLayout l, E* out, const uint8_t* cond, const E* a,
                            const E* b) {
  for (int64_t i = GlobalThread(); i < l.numel; i += GridThreads()) {
    int64_t off[4];
    Offsets(l, i, off);
    out[off[0]] = cond[off[1]] != 0 ? a[off[2]] : b[off[3]];
  }
}

// ---- Per-element functors (values already loaded: float for floating). ----

struct Identity {
  template <typename V>
  __device__ V operator()(V x) const {
    return x;
  }
};

// Floating unary math; C is float.
struct FloatMath {
  UnaryOp op;
  float scalar;
  __device__ float operator()(float x) const {
    switch (op) {
      case UnaryOp::kNeg: return -x;
      case UnaryOp::kExp: return expf(x);
      case UnaryOp::kLog: return logf(x);
      case UnaryOp::kSqrt: return sqrtf(x);
      case UnaryOp::kTanh: return tanhf(x);
      case UnaryOp::kRelu: return x > 0.0f ? x : (x == x ? 0.0f : x);  // NaN stays NaN
      case UnaryOp::kGelu: return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
      default: return x * scalar;  // kScale
    }
  }
};

// x (op) scalar in double, so i64 ids compare exactly; kNot on bool.
struct ScalarCompare {
  UnaryOp op;
  double scalar;
  template <typename V>
  __device__ bool operator()(V x) const {
    const double v = static_cast<double>(x);
    switch (op) {
      case UnaryOp::kLtScalar: return v < scalar;
      case UnaryOp::kGeScalar: return v >= scalar;
      case UnaryOp::kEqScalar: return v == scalar;
      default: return !(v != 0.0);  // kNot
    }
  }
};

// a (op) alpha * b for kAdd; b is converted to a's compute type C first.
template <typename C>
struct Arith {
  BinaryOp op;
  C alpha;
  template <typename V>
  __device__ C operator()(C x, V y_loaded) const {
    const C y = static_cast<C>(y_loaded);
    switch (op) {
      case BinaryOp::kAdd: return x + alpha * y;
      case BinaryOp::kSub: return x - y;
      case BinaryOp::kMul: return x * y;
      default: return x / y;  // kDiv (floating only)
    }
  }
};

struct Compare {
  BinaryOp op;
  template <typename C>
  __device__ bool operator()(C x, C y) const {
    switch (op) {
      case BinaryOp::kEq: return x == y;
      case BinaryOp::kLt: return x < y;
      default: return x >= y;  // kGe
    }
  }
};

struct Logical {
  bool is_and;
  __device__ bool operator()(bool x, bool y) const { return is_and ? (x && y) : (x || y); }
};

// grad * GELU'(x), exact erf form.
struct GeluBackward {
  __device__ float operator()(float g, float x) const {
    const float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
    return g * (cdf + x * pdf);
  }
};

// ---- Launch helpers. ----

template <typename TO, typename TI, typename F>
cudaError_t Unary(const StridedLayout& l, void* out, const void* in, F f, cudaStream_t stream) {
  TO* o = static_cast<TO*>(out);
  const TI* x = static_cast<const TI*>(in);
  if (l.contiguous && AllPackAligned(o, x)) {
    UnaryPackedKernel<<<ElementBlocks(l.numel, true), kThreads, 0, stream>>>(l.numel, o, x, f);
  } else {
    UnaryKernel<<<BlocksFor(l.numel), kThreads, 0, stream>>>(l, o, x, f);
  }
  return cudaGetLastError();
}

template <typename TO, typename TA, typename TB, typename F>
cudaError_t Binary(const StridedLayout& l, void* out, const void* a, const void* b, F f,
                   cudaStream_t stream) {
  TO* o = static_cast<TO*>(out);
  const TA* x = static_cast<const TA*>(a);
  const TB* y = static_cast<const TB*>(b);
  if (l.contiguous && AllPackAligned(o, x, y)) {
    BinaryPackedKernel<<<ElementBlocks(l.numel, true), kThreads, 0, stream>>>(l.numel, o, x, y, f);
  } else {
    BinaryKernel<<<BlocksFor(l.numel), kThreads, 0, stream>>>(l, o, x, y, f);
  }
  return cudaGetLastError();
}


}  // namespace

cudaError_t LaunchFill(const StridedLayout& l, size_t elem_size, void* dst, uint64_t bits,
                       cudaStream_t stream) {
  if (l.numel == 0) return cudaSuccess;
  return DispatchBySize(elem_size, [&](auto tag) {
    using E = typename decltype(tag)::type;
    E value;
    std::memcpy(&value, &bits, sizeof(E));  // the low bytes (little-endian)
    FillKernel<<<BlocksFor(l.numel), kThreads, 0, stream>>>(l, static_cast<E*>(dst), value);
    return cudaGetLastError();
  });
}

cudaError_t LaunchCopy(const StridedLayout& l, DType out_dtype, void* out, DType in_dtype,
                       const void* in, cudaStream_t stream) {
  if (l.numel == 0) return cudaSuccess;
  if (out_dtype == in_dtype && l.contiguous) {
    return cudaMemcpyAsync(out, in, static_cast<size_t>(l.numel) * SizeOf(out_dtype),
                           cudaMemcpyDeviceToDevice, stream);
  }
  return DispatchAll(out_dtype, [&](auto to) {
    return DispatchAll(in_dtype, [&](auto ti) {
      using TO = typename decltype(to)::type;
      using TI = typename decltype(ti)::type;
      return Unary<TO, TI>(l, out, in, Identity{}, stream);
    });
  });
}

cudaError_t LaunchUnary(UnaryOp op, const StridedLayout& l, DType out_dtype, void* out,
                        DType in_dtype, const void* in, double scalar, cudaStream_t stream) {
  if (l.numel == 0) return cudaSuccess;
  switch (op) {
    case UnaryOp::kLtScalar:
    case UnaryOp::kGeScalar:
    case UnaryOp::kEqScalar:
    case UnaryOp::kNot:
      if (out_dtype != DType::kBool || (op == UnaryOp::kNot && in_dtype != DType::kBool)) {
        return cudaErrorNotSupported;
      }
      return DispatchAll(in_dtype, [&](auto ti) {
        using TI = typename decltype(ti)::type;
        return Unary<uint8_t, TI>(l, out, in, ScalarCompare{op, scalar}, stream);
      });
    default:  // floating math, kScale included
      if (out_dtype != in_dtype) return cudaErrorNotSupported;
      return DispatchFloating(in_dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return Unary<T, T>(l, out, in, FloatMath{op, static_cast<float>(scalar)}, stream);
      });
  }
}

cudaError_t LaunchBinary(BinaryOp op, const StridedLayout& l, DType out_dtype, void* out,
                         DType a_dtype, const void* a, DType b_dtype, const void* b,
                         double alpha, cudaStream_t stream) {
  if (l.numel == 0) return cudaSuccess;
  switch (op) {
    case BinaryOp::kAdd:
    case BinaryOp::kSub:
    case BinaryOp::kMul:
    case BinaryOp::kDiv: {
      if (out_dtype != a_dtype) return cudaErrorNotSupported;
      if (op == BinaryOp::kDiv && !IsFloatingPoint(a_dtype)) return cudaErrorNotSupported;
      if (b_dtype == a_dtype) {
        return DispatchNumeric(a_dtype, [&](auto tag) {
          using T = typename decltype(tag)::type;
          using C = Compute<T>;
          return Binary<T, T, T>(l, out, a, b, Arith<C>{op, static_cast<C>(alpha)}, stream);
        });
      }
      // Mixed dtypes: kAdd of any b into a floating a (f32 main_grad += bf16 grad).
      if (op != BinaryOp::kAdd) return cudaErrorNotSupported;
      return DispatchFloating(a_dtype, [&](auto ta) {
        return DispatchAll(b_dtype, [&](auto tb) {
          using T = typename decltype(ta)::type;
          using TB = typename decltype(tb)::type;
          return Binary<T, T, TB>(l, out, a, b, Arith<float>{op, static_cast<float>(alpha)},
                                  stream);
        });
      });
    }
    case BinaryOp::kEq:
    case BinaryOp::kLt:
    case BinaryOp::kGe:
      if (out_dtype != DType::kBool || a_dtype != b_dtype) return cudaErrorNotSupported;
      return DispatchAll(a_dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return Binary<uint8_t, T, T>(l, out, a, b, Compare{op}, stream);
      });
    case BinaryOp::kAnd:
    case BinaryOp::kOr:
      if (out_dtype != DType::kBool || a_dtype != DType::kBool || b_dtype != DType::kBool) {
        return cudaErrorNotSupported;
      }
      return Binary<uint8_t, uint8_t, uint8_t>(l, out, a, b, Logical{op == BinaryOp::kAnd},
                                               stream);
    case BinaryOp::kGeluBackward:
      if (out_dtype != a_dtype || b_dtype != a_dtype) return cudaErrorNotSupported;
      return DispatchFloating(a_dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return Binary<T, T, T>(l, out, a, b, GeluBackward{}, stream);
      });
  }
  return cudaErrorNotSupported;
}

cudaError_t LaunchWhere(const StridedLayout& l, size_t elem_size, void* out, const void* cond,
                        const void* a, const void* b, cudaStream_t stream) {
  if (l.numel == 0) return cudaSuccess;
  return DispatchBySize(elem_size, [&](auto tag) {
    using E = typename decltype(tag)::type;
    WhereKernel<<<BlocksFor(l.numel), kThreads, 0, stream>>>(
        l, static_cast<E*>(out), static_cast<const uint8_t*>(cond), static_cast<const E*>(a),
        static_cast<const E*>(b));
    return cudaGetLastError();
  });
}

}  // namespace tpx::cuda
