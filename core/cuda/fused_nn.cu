// Fused transformer kernels: layer norm, scaled (causal) softmax and
// bias + GeLU, forward and backward, one pass over each row where the
// composed ops take several launches. Row-wise work gives each row a
// RowGroup (a warp for short rows, a block for long ones) that reduces in
// registers and shared memory and re-reads its row (from cache) for each
// pass. Column sums over rows (layer-norm dweight and dbias, bias-GeLU
// dbias) are f32 partials per chunk of rows, added in a fixed order by a
// second kernel (no atomics), so they come out the same on every run. Arithmetic is in
// f32, in the order of the CPU kernels (core/cpu/nn_kernels.cc), rounded
// once.
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

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return MaxPropagateNaN(a, b); }
};

// Exact GeLU and its derivative, as the elementwise kernels compute them.
__device__ __forceinline__ float Gelu(float z) { return 0.5f * z * (1.0f + erff(z * kInvSqrt2)); }
__device__ __forceinline__ float GeluGrad(float z) {
  const float cdf = 0.5f * (1.0f + erff(z * kInvSqrt2));
  const float pdf = kInvSqrt2Pi * expf(-0.5f * z * z);
  return cdf + z * pdf;
}

// ---- A lane's units of one row. ----

// The units u = Lane(), Lane() + G, ... below `units` of one row, for the
// passes of a row kernel: f(u, v) with v the unit's U values. With N > 0
// (a warp per row and at most N units per lane) the lane loads all its
// units into registers at once: the row's loads are in flight together,
// later passes read registers instead of reloading the row, and a pass can
// leave values for the next (the softmax's exponentials). On an H200 the
// forward layer norm went from 0.59-0.62 to 0.69 of a copy's bandwidth and
// the causal softmax from 0.65 to 0.80 (bf16 0.34 to 0.41). The backward
// kernels, which would hold two rows, ran up to 8% slower that way and
// reload theirs. N = 0 loads each unit in each pass.
template <typename T, int U, int G, int N>
class LaneUnits {
 public:
  static_assert(N == 0 || G == kWarp, "only warp rows are held in registers");
  // Whether what a pass writes into a unit's values is what the next pass
  // gets (N > 0); else each pass gets the row as loaded.
  static constexpr bool kHeld = N > 0;
  __device__ LaneUnits(const T* row, int64_t units) : row_(row), units_(units) {
    if constexpr (N > 0) {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const int64_t u = RowGroup<G>::Lane() + static_cast<int64_t>(i) * G;
        if (u < units_) LoadUnit<U>(row_ + u * U, v_[i]);
      }
    }
  }
  template <typename F>
  __device__ void ForEach(F f) {
    // f may change v: see kHeld.
    if constexpr (N > 0) {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const int64_t u = RowGroup<G>::Lane() + static_cast<int64_t>(i) * G;
        if (u < units_) f(u, v_[i]);
      }
    } else {
      for (int64_t u = RowGroup<G>::Lane(); u < units_; u += G) {
        float v[U];
        LoadUnit<U>(row_ + u * U, v);
        f(u, v);
      }
    }
  }

 private:
  const T* row_;
  int64_t units_;
  float v_[N > 0 ? N : 1][U];
};

// ---- Layer norm. ----

// mean, then the mean of squared deviations, then y; one row per group.
template <typename T, int U, int G, int N>
__global__ void LayerNormKernel(const T* x, const float* w, const float* b, T* y, float* mean,
                                float* rstd, int64_t rows, int64_t h, float eps) {
  using Group = RowGroup<G>;
  const int64_t units = h / U;
  for (int64_t row = Group::FirstRow(); row < rows; row += Group::RowStride()) {
    T* yr = y + row * h;
    LaneUnits<T, U, G, N> xs(x + row * h, units);
    float sum = 0.0f;
    xs.ForEach([&](int64_t, const float(&v)[U]) {
#pragma unroll
      for (int k = 0; k < U; ++k) sum += v[k];
    });
    const float m = Group::Reduce(sum, AddOp{}) / static_cast<float>(h);
    float sq = 0.0f;
    xs.ForEach([&](int64_t, const float(&v)[U]) {
#pragma unroll
      for (int k = 0; k < U; ++k) {
        const float c = v[k] - m;
        sq += c * c;
      }
    });
    const float rs = 1.0f / sqrtf(Group::Reduce(sq, AddOp{}) / static_cast<float>(h) + eps);
    xs.ForEach([&](int64_t u, const float(&v)[U]) {
      float o[U], wv[U], bv[U];
      if (w != nullptr) LoadUnit<U>(w + u * U, wv);
      if (b != nullptr) LoadUnit<U>(b + u * U, bv);
#pragma unroll
      for (int k = 0; k < U; ++k) {
        o[k] = (v[k] - m) * rs;
        if (w != nullptr) o[k] = o[k] * wv[k];
        if (b != nullptr) o[k] = o[k] + bv[k];
      }
      StoreUnit<U>(yr + u * U, o);
    });
    if (Group::Lane() == 0) {
      mean[row] = m;
      rstd[row] = rs;
    }
  }
}

// Unit u of a row's grad and x, and of the weight (ones where w is null).
template <int U, typename T>
__device__ __forceinline__ void LoadBackwardUnit(const T* gr, const T* xr, const float* w,
                                                 int64_t u, float (&gv)[U], float (&xv)[U],
                                                 float (&wv)[U]) {
  LoadUnit<U>(gr + u * U, gv);
  LoadUnit<U>(xr + u * U, xv);
  if (w != nullptr) {
    LoadUnit<U>(w + u * U, wv);
  } else {
#pragma unroll
    for (int k = 0; k < U; ++k) wv[k] = 1.0f;
  }
}

// A unit's terms of the two row sums dx needs: s1 += g w, s2 += g w xhat.
// Both backward kernels take them from here, so their dx has the same bits.
template <int U>
__device__ __forceinline__ void AddDxSums(const float (&gv)[U], const float (&xv)[U],
                                          const float (&wv)[U], float mr, float rs, float& s1,
                                          float& s2) {
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const float d = gv[k] * wv[k];
    s1 += d;
    s2 += d * ((xv[k] - mr) * rs);
  }
}

// One element of dx from the row's means m1 = mean(g w), m2 = mean(g w xhat).
__device__ __forceinline__ float LayerNormDx(float g, float w, float xhat, float rs, float m1,
                                             float m2) {
  return rs * (g * w - m1 - xhat * m2);
}

// dx = rstd * (g w - mean(g w) - xhat * mean(g w xhat)) per row; w null
// stands for ones.
template <typename T, int U, int G>
__global__ void LayerNormBackwardKernel(const T* g, const T* x, const float* mean,
                                        const float* rstd, const float* w, T* dx, int64_t rows,
                                        int64_t h) {
  using Group = RowGroup<G>;
  const int64_t units = h / U;
  for (int64_t row = Group::FirstRow(); row < rows; row += Group::RowStride()) {
    const T* gr = g + row * h;
    const T* xr = x + row * h;
    const float mr = mean[row], rs = rstd[row];
    float s1 = 0.0f, s2 = 0.0f;
    for (int64_t u = Group::Lane(); u < units; u += G) {
      float gv[U], xv[U], wv[U];
      LoadBackwardUnit<U>(gr, xr, w, u, gv, xv, wv);
      AddDxSums<U>(gv, xv, wv, mr, rs, s1, s2);
    }
    const float m1 = Group::Reduce(s1, AddOp{}) / static_cast<float>(h);
    const float m2 = Group::Reduce(s2, AddOp{}) / static_cast<float>(h);
    T* dr = dx + row * h;
    for (int64_t u = Group::Lane(); u < units; u += G) {
      float gv[U], xv[U], wv[U];
      LoadBackwardUnit<U>(gr, xr, w, u, gv, xv, wv);
#pragma unroll
      for (int k = 0; k < U; ++k) gv[k] = LayerNormDx(gv[k], wv[k], (xv[k] - mr) * rs, rs, m1, m2);
      StoreUnit<U>(dr + u * U, gv);
    }
  }
}

// LayerNormBackwardKernel's dx on warp rows in packs, with the weight and
// bias gradients' partial sums in the same pass: warp c of `chunks` takes
// rows c, c + chunks, ... and each lane keeps the sums of its columns (N
// packs) in registers until it writes them to row c of the partials
// (either may be null). g and x are read once for all three results,
// where dx and LayerNormParamGradKernel read them once each; dx comes out
// the same bits.
template <typename T, int N>
__global__ void LayerNormBackwardFusedKernel(const T* g, const T* x, const float* mean,
                                             const float* rstd, const float* w, T* dx,
                                             float* dw_partial, float* db_partial, int64_t rows,
                                             int64_t h, int64_t chunks) {
  constexpr int U = kPack;
  const int64_t units = h / U;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (warp >= chunks) return;  // the whole warp
  float dw[N][U] = {}, db[N][U] = {};
  for (int64_t row = warp; row < rows; row += chunks) {
    const T* gr = g + row * h;
    const T* xr = x + row * h;
    const float mr = mean[row], rs = rstd[row];
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int64_t u = lane + static_cast<int64_t>(i) * kWarp;
      if (u >= units) continue;
      float gv[U], xv[U], wv[U];
      LoadBackwardUnit<U>(gr, xr, w, u, gv, xv, wv);
      AddDxSums<U>(gv, xv, wv, mr, rs, s1, s2);
    }
    const float m1 = WarpReduce(s1, AddOp{}) / static_cast<float>(h);
    const float m2 = WarpReduce(s2, AddOp{}) / static_cast<float>(h);
    T* dr = dx + row * h;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int64_t u = lane + static_cast<int64_t>(i) * kWarp;
      if (u >= units) continue;
      float gv[U], xv[U], wv[U], out[U];
      LoadBackwardUnit<U>(gr, xr, w, u, gv, xv, wv);
#pragma unroll
      for (int k = 0; k < U; ++k) {
        const float xhat = (xv[k] - mr) * rs;
        out[k] = LayerNormDx(gv[k], wv[k], xhat, rs, m1, m2);
        dw[i][k] += gv[k] * xhat;
        db[i][k] += gv[k];
      }
      StoreUnit<U>(dr + u * U, out);
    }
  }
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int64_t u = lane + static_cast<int64_t>(i) * kWarp;
    if (u >= units) continue;
    if (dw_partial != nullptr) StoreUnit<U>(dw_partial + warp * h + u * U, dw[i]);
    if (db_partial != nullptr) StoreUnit<U>(db_partial + warp * h + u * U, db[i]);
  }
}

// ---- Column sums over rows: grid (column tiles, chunks of rows); each
// thread owns U adjacent columns and walks its chunk's rows, so a warp reads
// each row's columns contiguously. ----

// The first of the U columns this thread owns (>= h: none).
template <int U>
__device__ __forceinline__ int64_t OwnColumn() {
  return (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * U;
}

// Partials of dweight (sum g xhat) and dbias (sum g) of chunk blockIdx.y;
// either partial pointer may be null.
template <typename T, int U>
__global__ void LayerNormParamGradKernel(const T* g, const T* x, const float* mean,
                                         const float* rstd, float* dw_partial, float* db_partial,
                                         int64_t rows, int64_t h, int64_t chunk_rows) {
  const int64_t col = OwnColumn<U>();
  if (col >= h) return;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t last = first + chunk_rows < rows ? first + chunk_rows : rows;
  float dw[U] = {}, db[U] = {};
  for (int64_t r = first; r < last; ++r) {
    float gv[U];
    LoadUnit<U>(g + r * h + col, gv);
    if (dw_partial != nullptr) {
      float xv[U];
      LoadUnit<U>(x + r * h + col, xv);
      const float mr = mean[r], rs = rstd[r];
#pragma unroll
      for (int k = 0; k < U; ++k) dw[k] += gv[k] * ((xv[k] - mr) * rs);
    }
#pragma unroll
    for (int k = 0; k < U; ++k) db[k] += gv[k];
  }
  const int64_t at = static_cast<int64_t>(blockIdx.y) * h + col;
  if (dw_partial != nullptr) StoreUnit<U>(dw_partial + at, dw);
  if (db_partial != nullptr) StoreUnit<U>(db_partial + at, db);
}

// Lanes of chunks per column in ColumnTotalKernel's blocks of kWarp
// columns.
constexpr int kChunkLanes = kThreads / kWarp;

// out[j] = the sum over chunks c of partial[c * h + j]: lane y of a column
// adds chunks y, y + kChunkLanes, ... in order, then lane 0 adds the lanes'
// sums in lane order, so the result does not depend on scheduling.
template <typename TO>
__global__ void ColumnTotalKernel(const float* partial, int64_t chunks, int64_t h, TO* out) {
  __shared__ float lane_sums[kChunkLanes][kWarp];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarp + threadIdx.x;
  float acc = 0.0f;
  if (j < h) {
    for (int64_t c = threadIdx.y; c < chunks; c += kChunkLanes) acc += partial[c * h + j];
  }
  lane_sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < h) {
    float total = lane_sums[0][threadIdx.x];
    for (int l = 1; l < kChunkLanes; ++l) total += lane_sums[l][threadIdx.x];
    out[j] = StoreAs<TO>(total);
  }
}

// ---- Bias + GeLU, two ways. On an H200, f32 [16384, 4096]: 0.97 of a
// copy's bandwidth walking the tensor flat against 0.70-0.72 by column
// tiles; bf16: 0.61-0.63 flat against 0.68-0.69 by column tiles, where
// the per-unit bias costs more than the walk saves (GeLU's erf already
// holds bf16 below the bandwidth). ----

// Column tiles as above, the bias loaded once per thread.
template <typename T, int U>
__global__ void BiasGeluColumnsKernel(const T* x, const T* bias, T* y, int64_t rows, int64_t h,
                                      int64_t chunk_rows) {
  const int64_t col = OwnColumn<U>();
  if (col >= h) return;
  float b[U];
  LoadUnit<U>(bias + col, b);
  const int64_t first = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t last = first + chunk_rows < rows ? first + chunk_rows : rows;
  for (int64_t r = first; r < last; ++r) {
    float v[U];
    LoadUnit<U>(x + r * h + col, v);
#pragma unroll
    for (int k = 0; k < U; ++k) v[k] = Gelu(v[k] + b[k]);
    StoreUnit<U>(y + r * h + col, v);
  }
}

// A grid-stride walk over the units of [rows, h] as one flat tensor (as
// the elementwise kernels walk theirs), each unit's bias read beside it
// from cache.
template <typename T, int U>
__global__ void BiasGeluFlatKernel(const T* x, const T* bias, T* y, int64_t units,
                                   int64_t row_units) {
  // The unit's column: a 32-bit remainder where the units allow (a 64-bit
  // one costs several times as many instructions).
  const bool narrow = units <= INT32_MAX;
  for (int64_t u = GlobalThread(); u < units; u += GridThreads()) {
    const int64_t col =
        narrow ? static_cast<int32_t>(u) % static_cast<int32_t>(row_units) : u % row_units;
    float v[U], b[U];
    LoadUnit<U>(x + u * U, v);
    LoadUnit<U>(bias + col * U, b);
#pragma unroll
    for (int k = 0; k < U; ++k) v[k] = Gelu(v[k] + b[k]);
    StoreUnit<U>(y + u * U, v);
  }
}

// dx = g * GeLU'(x + b), and (partial not null) the chunk's sum of dx per
// column before dx is rounded.
template <typename T, int U>
__global__ void BiasGeluBackwardKernel(const T* g, const T* x, const T* bias, T* dx, float* partial,
                                       int64_t rows, int64_t h, int64_t chunk_rows) {
  const int64_t col = OwnColumn<U>();
  if (col >= h) return;
  float b[U];
  LoadUnit<U>(bias + col, b);
  const int64_t first = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t last = first + chunk_rows < rows ? first + chunk_rows : rows;
  float db[U] = {};
  for (int64_t r = first; r < last; ++r) {
    float gv[U], xv[U];
    LoadUnit<U>(g + r * h + col, gv);
    LoadUnit<U>(x + r * h + col, xv);
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const float d = gv[k] * GeluGrad(xv[k] + b[k]);
      db[k] += d;
      gv[k] = d;
    }
    StoreUnit<U>(dx + r * h + col, gv);
  }
  if (partial != nullptr) StoreUnit<U>(partial + static_cast<int64_t>(blockIdx.y) * h + col, db);
}

// Rows per chunk of the column sums over [rows, h] (rows > 0).
int64_t ChunkRows(int64_t rows, int64_t h) {
  const int64_t chunks = ColumnSumChunks(rows, h);
  return (rows + chunks - 1) / chunks;
}

// The launch shape of the column kernels over [rows, h] (rows > 0) in units
// of U columns.
struct ColumnGrid {
  dim3 blocks;
  unsigned threads;
  int64_t chunk_rows;
};

ColumnGrid ColumnGridFor(int64_t rows, int64_t h, int unit) {
  const int64_t units = h / unit;
  // Whole warps, at most a block's kThreads: short rows leave no idle warps.
  const int64_t threads = std::min<int64_t>(kThreads, (units + kWarp - 1) / kWarp * kWarp);
  const int64_t tiles = (units + threads - 1) / threads;
  const int64_t chunk_rows = ChunkRows(rows, h);
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  return ColumnGrid{dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(chunks)),
                    static_cast<unsigned>(threads), chunk_rows};
}

// The chunks ColumnGridFor(rows, h, ...) launches (0 without rows; at most
// ColumnSumChunks(rows, h)).
int64_t ChunksLaunched(int64_t rows, int64_t h) {
  if (rows == 0) return 0;
  const int64_t chunk_rows = ChunkRows(rows, h);
  return (rows + chunk_rows - 1) / chunk_rows;
}

template <typename TO>
cudaError_t LaunchColumnTotal(const float* partial, int64_t chunks, int64_t h, TO* out,
                              cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((h + kWarp - 1) / kWarp);
  ColumnTotalKernel<TO><<<blocks, dim3(kWarp, kChunkLanes), 0, stream>>>(partial, chunks, h, out);
  return cudaGetLastError();
}

// The shift that keeps exp() in range; an all -inf row shifts by 0 (not
// -inf, which would give inf - inf).
__device__ __forceinline__ float SoftmaxShift(float max) {
  return isinf(max) && max < 0.0f ? 0.0f : max;
}

// ---- Scaled (causal) softmax. ----

// Row r = (b, i) sees columns [0, valid), valid = clamp(i + 1 + n - m, 0,
// n) when causal; units wholly past valid are not read.
template <typename T, int U, int G, int N>
__global__ void ScaledSoftmaxKernel(const T* in, T* out, int64_t rows, int64_t m, int64_t n,
                                    float scale, bool causal) {
  using Group = RowGroup<G>;
  const int64_t units = n / U;
  for (int64_t row = Group::FirstRow(); row < rows; row += Group::RowStride()) {
    T* yr = out + row * n;
    int64_t valid = n;
    if (causal) {
      valid = row % m + 1 + n - m;
      valid = valid < 0 ? 0 : (valid > n ? n : valid);
    }
    const int64_t read = (valid + U - 1) / U;
    using Units = LaneUnits<T, U, G, N>;
    Units xs(in + row * n, read);
    float mx = -INFINITY;
    xs.ForEach([&](int64_t u, const float(&v)[U]) {
#pragma unroll
      for (int k = 0; k < U; ++k) {
        if (u * U + k < valid) mx = MaxPropagateNaN(mx, scale * v[k]);
      }
    });
    const float shift = SoftmaxShift(Group::Reduce(mx, MaxOp{}));
    float sum = 0.0f;
    // Held rows keep each exponential for the last pass.
    xs.ForEach([&](int64_t u, float(&v)[U]) {
#pragma unroll
      for (int k = 0; k < U; ++k) {
        if (u * U + k < valid) {
          const float e = expf(scale * v[k] - shift);
          sum += e;
          if constexpr (Units::kHeld) v[k] = e;
        }
      }
    });
    const float inv = 1.0f / Group::Reduce(sum, AddOp{});
    xs.ForEach([&](int64_t u, const float(&v)[U]) {
      float o[U];
#pragma unroll
      for (int k = 0; k < U; ++k) {
        const float e = Units::kHeld ? v[k] : expf(scale * v[k] - shift);
        o[k] = u * U + k < valid ? e * inv : 0.0f;
      }
      StoreUnit<U>(yr + u * U, o);
    });
    // The units past the causal edge are zeros, never read.
    for (int64_t u = read + (Group::Lane() - read % G + G) % G; u < units; u += G) {
      const float zeros[U] = {};
      StoreUnit<U>(yr + u * U, zeros);
    }
  }
}

template <typename T, int U, int G>
__global__ void ScaledSoftmaxBackwardKernel(const T* g, const T* y, T* dx, int64_t rows, int64_t n,
                                            float scale) {
  using Group = RowGroup<G>;
  const int64_t units = n / U;
  for (int64_t row = Group::FirstRow(); row < rows; row += Group::RowStride()) {
    const T* gr = g + row * n;
    const T* yr = y + row * n;
    float dot = 0.0f;
    for (int64_t u = Group::Lane(); u < units; u += G) {
      float gv[U], yv[U];
      LoadUnit<U>(gr + u * U, gv);
      LoadUnit<U>(yr + u * U, yv);
#pragma unroll
      for (int k = 0; k < U; ++k) dot += gv[k] * yv[k];
    }
    dot = Group::Reduce(dot, AddOp{});
    T* dr = dx + row * n;
    for (int64_t u = Group::Lane(); u < units; u += G) {
      float gv[U], yv[U];
      LoadUnit<U>(gr + u * U, gv);
      LoadUnit<U>(yr + u * U, yv);
#pragma unroll
      for (int k = 0; k < U; ++k) gv[k] = scale * (yv[k] * (gv[k] - dot));
      StoreUnit<U>(dr + u * U, gv);
    }
  }
}

// fn(std::integral_constant<int, N>{}) with the units per lane that
// LaneUnits holds in registers for rows of `units` units of U elements, one
// row per group of G threads: up to 4 (rows up to 1024 elements in whole
// packs, on a warp), else 0 (pass by pass).
template <int U, int G, typename Fn>
cudaError_t WithLaneUnits(int64_t units, Fn&& fn) {
  if constexpr (G == kWarp && U > 1) {
    if (units <= kWarp) return fn(std::integral_constant<int, 1>{});
    if (units <= 2 * kWarp) return fn(std::integral_constant<int, 2>{});
    if (units <= 4 * kWarp) return fn(std::integral_constant<int, 4>{});
  }
  return fn(std::integral_constant<int, 0>{});
}

}  // namespace

int64_t ColumnSumChunks(int64_t rows, int64_t h) {
  // Enough chunks for about one wave of threads on a large GPU (an H100
  // holds 132 x 2048), each of at least kMinChunkRows rows so the partials
  // stay a small fraction of the data they sum.
  constexpr int64_t kTargetThreads = int64_t{1} << 18;
  constexpr int64_t kMinChunkRows = 16;
  constexpr int64_t kMaxChunks = 65535;  // gridDim.y
  const int64_t threads_per_chunk = std::max<int64_t>(1, (h + kPack - 1) / kPack);
  const int64_t wanted = std::max<int64_t>(1, kTargetThreads / threads_per_chunk);
  const int64_t most = std::max<int64_t>(1, (rows + kMinChunkRows - 1) / kMinChunkRows);
  return std::min({wanted, most, kMaxChunks});
}

cudaError_t LaunchLayerNorm(DType dtype, const void* x, const float* weight, const float* bias,
                            void* y, float* mean, float* rstd, int64_t rows, int64_t h, float eps,
                            cudaStream_t stream) {
  if (rows == 0 || h == 0) return cudaSuccess;
  return DispatchFloating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x);
    T* yp = static_cast<T*>(y);
    return WithUnit(RowsPackable(h, xp, yp, weight, bias), [&](auto unit) {
      return WithRowGroup(h, [&](auto group) {
        constexpr int U = decltype(unit)::value, G = decltype(group)::value;
        return WithLaneUnits<U, G>(h / U, [&](auto cached) {
          constexpr int N = decltype(cached)::value;
          LayerNormKernel<T, U, G, N><<<RowGroupBlocks(rows, G), kThreads, 0, stream>>>(
              xp, weight, bias, yp, mean, rstd, rows, h, eps);
          return cudaGetLastError();
        });
      });
    });
  });
}

cudaError_t LaunchLayerNormBackward(DType dtype, const void* grad, const void* x, const float* mean,
                                    const float* rstd, const float* weight, void* dx,
                                    float* dweight, float* dbias, float* workspace, int64_t rows,
                                    int64_t h, cudaStream_t stream) {
  if (h == 0) return cudaSuccess;
  return DispatchFloating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gp = static_cast<const T*>(grad);
    const T* xp = static_cast<const T*>(x);
    T* dxp = static_cast<T*>(dx);
    float* dw_partial = dweight != nullptr ? workspace : nullptr;
    float* db_partial = dbias != nullptr
                            ? workspace + (dweight != nullptr ? h * ColumnSumChunks(rows, h) : 0)
                            : nullptr;
    // f32 warp rows in packs with dx and a parameter gradient: one fused
    // pass. On an H200 ([16384, 1024]) that took f32 from 0.41 to 0.54 of a
    // copy's bandwidth (counting 3 passes over memory) and bf16 from 0.34
    // to 0.31-0.32, so 16-bit dtypes keep the two kernels.
    const bool fused = sizeof(T) == 4 && dxp != nullptr && rows > 0 &&
                       (dweight != nullptr || dbias != nullptr) && h <= kWarpRowMax &&
                       RowsPackable(h, gp, xp, dxp, weight) &&
                       AllPackAligned(dw_partial, db_partial);
    // Rows of partials the column totals add.
    int64_t chunks = 0;
    if (fused) {
      chunks = ColumnSumChunks(rows, h);
      const cudaError_t rc = WithLaneUnits<kPack, kWarp>(h / kPack, [&](auto cached) {
        constexpr int N = decltype(cached)::value;
        // Neither case reaches here (f32 rows of at most kWarpRowMax in packs).
        if constexpr (N == 0 || sizeof(T) != 4) {
          return cudaErrorInvalidValue;
        } else {
          const unsigned blocks = static_cast<unsigned>((chunks * kWarp + kThreads - 1) / kThreads);
          LayerNormBackwardFusedKernel<T, N><<<blocks, kThreads, 0, stream>>>(
              gp, xp, mean, rstd, weight, dxp, dw_partial, db_partial, rows, h, chunks);
          return cudaGetLastError();
        }
      });
      if (rc != cudaSuccess) return rc;
    } else {
      if (dxp != nullptr && rows > 0) {
        const cudaError_t rc = WithUnit(RowsPackable(h, gp, xp, dxp, weight), [&](auto unit) {
          return WithRowGroup(h, [&](auto group) {
            constexpr int U = decltype(unit)::value, G = decltype(group)::value;
            LayerNormBackwardKernel<T, U, G><<<RowGroupBlocks(rows, G), kThreads, 0, stream>>>(
                gp, xp, mean, rstd, weight, dxp, rows, h);
            return cudaGetLastError();
          });
        });
        if (rc != cudaSuccess) return rc;
      }
      if (dweight == nullptr && dbias == nullptr) return cudaSuccess;
      if (rows > 0) {
        const cudaError_t rc =
            WithUnit(RowsPackable(h, gp, xp, dw_partial, db_partial), [&](auto unit) {
              constexpr int U = decltype(unit)::value;
              const ColumnGrid grid = ColumnGridFor(rows, h, U);
              LayerNormParamGradKernel<T, U><<<grid.blocks, grid.threads, 0, stream>>>(
                  gp, xp, mean, rstd, dw_partial, db_partial, rows, h, grid.chunk_rows);
              return cudaGetLastError();
            });
        if (rc != cudaSuccess) return rc;
      }
      chunks = ChunksLaunched(rows, h);
    }
    if (dweight != nullptr) {
      const cudaError_t rc = LaunchColumnTotal(dw_partial, chunks, h, dweight, stream);
      if (rc != cudaSuccess) return rc;
    }
    if (dbias != nullptr) return LaunchColumnTotal(db_partial, chunks, h, dbias, stream);
    return cudaSuccess;
  });
}

cudaError_t LaunchScaledSoftmax(DType dtype, const void* in, void* out, int64_t batch, int64_t m,
                                int64_t n, float scale, bool causal, cudaStream_t stream) {
  const int64_t rows = batch * m;
  if (rows == 0 || n == 0) return cudaSuccess;
  return DispatchFloating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(in);
    T* yp = static_cast<T*>(out);
    return WithUnit(RowsPackable(n, xp, yp), [&](auto unit) {
      return WithRowGroup(n, [&](auto group) {
        constexpr int U = decltype(unit)::value, G = decltype(group)::value;
        return WithLaneUnits<U, G>(n / U, [&](auto cached) {
          constexpr int N = decltype(cached)::value;
          ScaledSoftmaxKernel<T, U, G, N>
              <<<RowGroupBlocks(rows, G), kThreads, 0, stream>>>(xp, yp, rows, m, n, scale, causal);
          return cudaGetLastError();
        });
      });
    });
  });
}

cudaError_t LaunchScaledSoftmaxBackward(DType dtype, const void* grad, const void* y, void* dx,
                                        int64_t rows, int64_t n, float scale, cudaStream_t stream) {
  if (rows == 0 || n == 0) return cudaSuccess;
  return DispatchFloating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gp = static_cast<const T*>(grad);
    const T* yp = static_cast<const T*>(y);
    T* dp = static_cast<T*>(dx);
    return WithUnit(RowsPackable(n, gp, yp, dp), [&](auto unit) {
      return WithRowGroup(n, [&](auto group) {
        constexpr int U = decltype(unit)::value, G = decltype(group)::value;
        ScaledSoftmaxBackwardKernel<T, U, G>
            <<<RowGroupBlocks(rows, G), kThreads, 0, stream>>>(gp, yp, dp, rows, n, scale);
        return cudaGetLastError();
      });
    });
  });
}

cudaError_t LaunchBiasGelu(DType dtype, const void* x, const void* bias, void* y, int64_t rows,
                           int64_t h, cudaStream_t stream) {
  if (rows == 0 || h == 0) return cudaSuccess;
  return DispatchFloating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x);
    const T* bp = static_cast<const T*>(bias);
    T* yp = static_cast<T*>(y);
    return WithUnit(RowsPackable(h, xp, bp, yp), [&](auto unit) {
      constexpr int U = decltype(unit)::value;
      if constexpr (sizeof(T) == 4) {
        const int64_t units = rows * h / U;
        BiasGeluFlatKernel<T, U>
            <<<BlocksFor(units), kThreads, 0, stream>>>(xp, bp, yp, units, h / U);
      } else {
        const ColumnGrid grid = ColumnGridFor(rows, h, U);
        BiasGeluColumnsKernel<T, U>
            <<<grid.blocks, grid.threads, 0, stream>>>(xp, bp, yp, rows, h, grid.chunk_rows);
      }
      return cudaGetLastError();
    });
  });
}

cudaError_t LaunchBiasGeluBackward(DType dtype, const void* grad, const void* x, const void* bias,
                                   void* dx, void* dbias, float* workspace, int64_t rows, int64_t h,
                                   cudaStream_t stream) {
  if (h == 0) return cudaSuccess;
  return DispatchFloating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gp = static_cast<const T*>(grad);
    const T* xp = static_cast<const T*>(x);
    const T* bp = static_cast<const T*>(bias);
    T* dp = static_cast<T*>(dx);
    float* partial = dbias != nullptr ? workspace : nullptr;
    if (rows > 0) {
      const cudaError_t rc = WithUnit(RowsPackable(h, gp, xp, bp, dp, partial), [&](auto unit) {
        constexpr int U = decltype(unit)::value;
        const ColumnGrid grid = ColumnGridFor(rows, h, U);
        BiasGeluBackwardKernel<T, U><<<grid.blocks, grid.threads, 0, stream>>>(
            gp, xp, bp, dp, partial, rows, h, grid.chunk_rows);
        return cudaGetLastError();
      });
      if (rc != cudaSuccess) return rc;
    }
    if (dbias == nullptr) return cudaSuccess;
    return LaunchColumnTotal(partial, ChunksLaunched(rows, h), h, static_cast<T*>(dbias), stream);
  });
}

}  // namespace tpx::cuda
