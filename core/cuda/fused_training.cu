// Fused training kernels: the vocab-parallel loss's row statistics and
// gradient, the gradient norm's sum of squares, AdamW and dropout with bias
// and residual. Rows go to RowGroups (device_math.cuh); element-wise work
// walks the tensors grid-stride in Packed runs where every operand is
// pack-aligned. Arithmetic is in f32 (f64 for the sum of squares), in the
// order of the CPU kernels (core/cpu/training_kernels.cc), rounded once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/cuda/device_math.cuh"
#include "core/cuda/launch.h"

namespace tpx::cuda {
namespace {

// The target of a row the loss ignores (core/device_kernels.h).
constexpr int64_t kIgnoredRow = -2;

struct AddOp {
  template <typename V>
  __device__ V operator()(V a, V b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return MaxPropagateNaN(a, b); }
};

// v as it reads back after a store in T.
template <typename T>
__device__ __forceinline__ float RoundTo(float v) {
  return Load(StoreAs<T>(v));
}

// ---- Cross entropy. ----

// {max, sum exp(x - max), sum (x - max), x[target] or 0} per row of cols:
// the max first, then both sums (none for a row whose max is -inf).
template <typename T, int U, int G>
__global__ void CrossEntropyStatsKernel(const T* logits, const int64_t* target, float* stats,
                                        int64_t rows, int64_t cols) {
  using Group = RowGroup<G>;
  const int64_t units = cols / U;
  for (int64_t row = Group::FirstRow(); row < rows; row += Group::RowStride()) {
    const int64_t t = target[row];
    float* out = stats + row * 4;
    if (t == kIgnoredRow) {  // the same for the whole group
      if (Group::Lane() == 0) {
        out[0] = -INFINITY;
        out[1] = out[2] = out[3] = 0.0f;
      }
      continue;
    }
    const T* x = logits + row * cols;
    float mx = -INFINITY;
    for (int64_t u = Group::Lane(); u < units; u += G) {
      float v[U];
      LoadUnit<U>(x + u * U, v);
#pragma unroll
      for (int k = 0; k < U; ++k) mx = MaxPropagateNaN(mx, v[k]);
    }
    mx = Group::Reduce(mx, MaxOp{});
    float sum_exp = 0.0f, sum_d = 0.0f;
    if (mx != -INFINITY) {
      for (int64_t u = Group::Lane(); u < units; u += G) {
        float v[U];
        LoadUnit<U>(x + u * U, v);
#pragma unroll
        for (int k = 0; k < U; ++k) {
          const float d = v[k] - mx;
          sum_exp += expf(d);
          sum_d += d;
        }
      }
    }
    sum_exp = Group::Reduce(sum_exp, AddOp{});
    sum_d = Group::Reduce(sum_d, AddOp{});
    if (Group::Lane() == 0) {
      out[0] = mx;
      out[1] = sum_exp;
      out[2] = sum_d;
      out[3] = t >= 0 && t < cols ? Load(x[t]) : 0.0f;
    }
  }
}

// dx_j = g (exp(x_j - lse) - smooth_over_k), rounded, then minus g
// target_coeff at the target column (rounded again, as the CPU does); 0
// for ignored rows. dx may be logits: each unit is read before it is written,
// by the same thread.
template <typename T, int U, int G>
__global__ void CrossEntropyBackwardKernel(const T* logits, const float* lse, const float* g,
                                           const int64_t* target, T* dx, int64_t rows, int64_t cols,
                                           float smooth_over_k, float target_coeff) {
  using Group = RowGroup<G>;
  const int64_t units = cols / U;
  for (int64_t row = Group::FirstRow(); row < rows; row += Group::RowStride()) {
    const int64_t t = target[row];
    const T* x = logits + row * cols;
    T* d = dx + row * cols;
    if (t == kIgnoredRow) {
      for (int64_t u = Group::Lane(); u < units; u += G) {
        float zero[U];
#pragma unroll
        for (int k = 0; k < U; ++k) zero[k] = 0.0f;
        StoreUnit<U>(d + u * U, zero);
      }
      continue;
    }
    const float l = lse[row], gr = g[row];
    for (int64_t u = Group::Lane(); u < units; u += G) {
      float v[U];
      LoadUnit<U>(x + u * U, v);
#pragma unroll
      for (int k = 0; k < U; ++k) {
        float o = gr * (expf(v[k] - l) - smooth_over_k);
        if (u * U + k == t) o = RoundTo<T>(o) - gr * target_coeff;
        v[k] = o;
      }
      StoreUnit<U>(d + u * U, v);
    }
  }
}

// ---- Sum of squares: per-block f64 partials, then one block adds them. ----

template <typename T, bool kPacked>
__global__ void SumOfSquaresKernel(const T* x, int64_t n, double* partial) {
  double acc = 0.0;
  int64_t done = 0;
  if constexpr (kPacked) {
    const int64_t packs = n / kPack;
    for (int64_t p = GlobalThread(); p < packs; p += GridThreads()) {
      const Packed<T> run = reinterpret_cast<const Packed<T>*>(x)[p];
#pragma unroll
      for (int k = 0; k < kPack; ++k) {
        const double v = Load(run.v[k]);
        acc += v * v;
      }
    }
    done = packs * kPack;
  }
  for (int64_t i = done + GlobalThread(); i < n; i += GridThreads()) {
    const double v = Load(x[i]);
    acc += v * v;
  }
  acc = BlockReduce(acc, AddOp{});
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void SumPartialsKernel(const double* partial, int64_t count, double* out) {
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = BlockReduce(acc, AddOp{});
  if (threadIdx.x == 0) *out = acc;
}

// ---- AdamW. ----

__device__ __forceinline__ void AdamWUpdate(float& p, float g, float& m, float& s,
                                            const AdamWCoefficients& c) {
  g *= c.grad_scale;
  p *= c.decay;
  m = c.beta1 * m + (1.0f - c.beta1) * g;
  s = c.beta2 * s + (1.0f - c.beta2) * g * g;
  p -= c.step_size * m / (sqrtf(s) * c.inv_sqrt_bias2 + c.eps);
}

// kPacked: every pointer is pack-aligned; the tail after the last whole
// pack goes element by element.
template <typename G, bool kPacked>
__global__ void AdamWKernel(float* p, const G* g, float* m, float* s, __nv_bfloat16* working,
                            int64_t n, AdamWCoefficients c) {
  int64_t done = 0;
  if constexpr (kPacked) {
    const int64_t packs = n / kPack;
    for (int64_t q = GlobalThread(); q < packs; q += GridThreads()) {
      Packed<float> pq = reinterpret_cast<const Packed<float>*>(p)[q];
      Packed<float> mq = reinterpret_cast<const Packed<float>*>(m)[q];
      Packed<float> sq = reinterpret_cast<const Packed<float>*>(s)[q];
      const Packed<G> gq = reinterpret_cast<const Packed<G>*>(g)[q];
#pragma unroll
      for (int k = 0; k < kPack; ++k) AdamWUpdate(pq.v[k], Load(gq.v[k]), mq.v[k], sq.v[k], c);
      reinterpret_cast<Packed<float>*>(p)[q] = pq;
      reinterpret_cast<Packed<float>*>(m)[q] = mq;
      reinterpret_cast<Packed<float>*>(s)[q] = sq;
      if (working != nullptr) {
        Packed<__nv_bfloat16> wq;
#pragma unroll
        for (int k = 0; k < kPack; ++k) wq.v[k] = StoreAs<__nv_bfloat16>(pq.v[k]);
        reinterpret_cast<Packed<__nv_bfloat16>*>(working)[q] = wq;
      }
    }
    done = packs * kPack;
  }
  for (int64_t i = done + GlobalThread(); i < n; i += GridThreads()) {
    float pi = p[i], mi = m[i], si = s[i];
    AdamWUpdate(pi, Load(g[i]), mi, si, c);
    p[i] = pi;
    m[i] = mi;
    s[i] = si;
    if (working != nullptr) working[i] = StoreAs<__nv_bfloat16>(pi);
  }
}

// ---- Dropout + bias + residual. ----

// The optional operands of DropoutAdd (null: absent) and its scale.
template <typename T>
struct DropoutOperands {
  const T* bias;
  int64_t bias_n;
  const uint8_t* keep;
  const T* residual;
  float scale;
};

// (keep ? (x + b) * scale : 0) + r for one element, with the CPU's order.
template <typename T>
__device__ __forceinline__ float DropoutAddOne(const DropoutOperands<T>& o, float x, float b,
                                               bool kept, float r) {
  float v = x;
  if (o.bias != nullptr) v += b;
  if (o.keep != nullptr) {
    v = kept ? v * o.scale : 0.0f;
  } else {
    v *= o.scale;
  }
  if (o.residual != nullptr) v += r;
  return v;
}

// kPacked: out, x, keep and residual are pack-aligned (the bias, small and
// cached, is read element by element); the tail goes element by element.
// out may be x or residual: each element is read before it is written, by
// the same thread.
template <typename T, bool kPacked>
__global__ void DropoutAddKernel(T* out, const T* x, int64_t n, DropoutOperands<T> o) {
  int64_t done = 0;
  if constexpr (kPacked) {
    const int64_t packs = n / kPack;
    for (int64_t q = GlobalThread(); q < packs; q += GridThreads()) {
      const Packed<T> xq = reinterpret_cast<const Packed<T>*>(x)[q];
      Packed<uint8_t> kq;
      Packed<T> rq;
      if (o.keep != nullptr) kq = reinterpret_cast<const Packed<uint8_t>*>(o.keep)[q];
      if (o.residual != nullptr) rq = reinterpret_cast<const Packed<T>*>(o.residual)[q];
      int64_t col = o.bias != nullptr ? (q * kPack) % o.bias_n : 0;
      Packed<T> yq;
#pragma unroll
      for (int k = 0; k < kPack; ++k) {
        float b = 0.0f;
        if (o.bias != nullptr) {
          b = Load(o.bias[col]);
          if (++col == o.bias_n) col = 0;
        }
        const bool kept = o.keep != nullptr && kq.v[k] != 0;
        const float r = o.residual != nullptr ? Load(rq.v[k]) : 0.0f;
        yq.v[k] = StoreAs<T>(DropoutAddOne(o, Load(xq.v[k]), b, kept, r));
      }
      reinterpret_cast<Packed<T>*>(out)[q] = yq;
    }
    done = packs * kPack;
  }
  for (int64_t i = done + GlobalThread(); i < n; i += GridThreads()) {
    const float b = o.bias != nullptr ? Load(o.bias[i % o.bias_n]) : 0.0f;
    const bool kept = o.keep != nullptr && o.keep[i] != 0;
    const float r = o.residual != nullptr ? Load(o.residual[i]) : 0.0f;
    out[i] = StoreAs<T>(DropoutAddOne(o, Load(x[i]), b, kept, r));
  }
}

}  // namespace

cudaError_t LaunchCrossEntropyStats(DType dtype, const void* logits, const int64_t* target,
                                    float* stats, int64_t rows, int64_t v, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  return DispatchFloating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(logits);
    return WithUnit(RowsPackable(v, x), [&](auto unit) {
      return WithRowGroup(v, [&](auto group) {
        constexpr int U = decltype(unit)::value, G = decltype(group)::value;
        CrossEntropyStatsKernel<T, U, G>
            <<<RowGroupBlocks(rows, G), kThreads, 0, stream>>>(x, target, stats, rows, v);
        return cudaGetLastError();
      });
    });
  });
}

cudaError_t LaunchCrossEntropyBackward(DType dtype, const void* logits, const float* lse,
                                       const float* g, const int64_t* target, void* dx,
                                       int64_t rows, int64_t v, float smooth_over_k,
                                       float target_coeff, cudaStream_t stream) {
  if (rows == 0 || v == 0) return cudaSuccess;
  return DispatchFloating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(logits);
    T* d = static_cast<T*>(dx);
    return WithUnit(RowsPackable(v, x, d), [&](auto unit) {
      return WithRowGroup(v, [&](auto group) {
        constexpr int U = decltype(unit)::value, G = decltype(group)::value;
        CrossEntropyBackwardKernel<T, U, G><<<RowGroupBlocks(rows, G), kThreads, 0, stream>>>(
            x, lse, g, target, d, rows, v, smooth_over_k, target_coeff);
        return cudaGetLastError();
      });
    });
  });
}

cudaError_t LaunchSumOfSquares(DType dtype, const void* x, int64_t n, double* workspace,
                               cudaStream_t stream) {
  return DispatchFloating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x);
    double* partial = workspace + 1;
    const bool packed = IsPackAligned<T>(xp);
    const unsigned blocks = std::max(
        1u, std::min(ElementBlocks(n, packed), static_cast<unsigned>(kSumOfSquaresWorkspace - 1)));
    if (packed) {
      SumOfSquaresKernel<T, true><<<blocks, kThreads, 0, stream>>>(xp, n, partial);
    } else {
      SumOfSquaresKernel<T, false><<<blocks, kThreads, 0, stream>>>(xp, n, partial);
    }
    const cudaError_t rc = cudaGetLastError();
    if (rc != cudaSuccess) return rc;
    SumPartialsKernel<<<1, kThreads, 0, stream>>>(partial, blocks, workspace);
    return cudaGetLastError();
  });
}

cudaError_t LaunchAdamWStep(float* param, DType grad_dtype, const void* grad, float* exp_avg,
                            float* exp_avg_sq, void* working, int64_t n, const AdamWCoefficients& c,
                            cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  __nv_bfloat16* w = static_cast<__nv_bfloat16*>(working);
  auto launch = [&](auto tag) {
    using G = typename decltype(tag)::type;
    const G* g = static_cast<const G*>(grad);
    if (AllPackAligned(param, g, exp_avg, exp_avg_sq, w)) {
      AdamWKernel<G, true>
          <<<ElementBlocks(n, true), kThreads, 0, stream>>>(param, g, exp_avg, exp_avg_sq, w, n, c);
    } else {
      AdamWKernel<G, false><<<ElementBlocks(n, false), kThreads, 0, stream>>>(param, g, exp_avg,
                                                                              exp_avg_sq, w, n, c);
    }
    return cudaGetLastError();
  };
  switch (grad_dtype) {
    case DType::kF32: return launch(Tag<float>{});
    case DType::kBF16: return launch(Tag<__nv_bfloat16>{});
    default: return cudaErrorNotSupported;
  }
}

cudaError_t LaunchDropoutAdd(DType dtype, void* out, const void* x, const void* bias,
                             const void* keep, const void* residual, int64_t n, int64_t bias_n,
                             float scale, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (bias != nullptr && (bias_n <= 0 || n % bias_n != 0)) return cudaErrorInvalidValue;
  return DispatchFloating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* y = static_cast<T*>(out);
    const T* xp = static_cast<const T*>(x);
    const DropoutOperands<T> o{static_cast<const T*>(bias), bias_n,
                               static_cast<const uint8_t*>(keep), static_cast<const T*>(residual),
                               scale};
    if (AllPackAligned(y, xp, o.keep, o.residual)) {
      DropoutAddKernel<T, true><<<ElementBlocks(n, true), kThreads, 0, stream>>>(y, xp, n, o);
    } else {
      DropoutAddKernel<T, false><<<ElementBlocks(n, false), kThreads, 0, stream>>>(y, xp, n, o);
    }
    return cudaGetLastError();
  });
}

}  // namespace tpx::cuda
