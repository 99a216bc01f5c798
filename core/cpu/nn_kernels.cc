// CPU DeviceKernels: the fused transformer kernels (layer norm forward and
// backward, scaled and causal softmax forward and backward). Each walks a
// row once or twice in f32 instead of the five to twelve passes and
// temporaries of the composed ops, and rows are split over the kernel
// threads. Row loops are compiled per ISA (TPX_VECTOR_CLONES).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu/cpu_kernels.h"
#include "core/cpu/loops.h"
#include "core/cpu/parallel.h"
#include "core/cpu/vec_math.h"

namespace tpx::cpu {
namespace {

// Rows per partial sum of the layer-norm weight/bias gradients: a fixed
// chunking, so the sums do not depend on the thread count.
constexpr int64_t kRowsPerChunk = 32;

// Sum of x[0..n) with eight independent partial sums (vectorises without
// reassociation flags), combined pairwise as core/cpu/reduce_kernels.cc does.
inline float Sum8(const float* x, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += x[i + j];
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += x[i];
  return s;
}

// One row of layer norm. w, b may be null.
TPX_VECTOR_CLONES
void LayerNormRow(const float* x, const float* w, const float* b, float* y, int64_t h, float eps,
                  float* mean_out, float* rstd_out) {
  const float mean = Sum8(x, h) / static_cast<float>(h);
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= h; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const float c = x[i + j] - mean;
      acc[j] += c * c;
    }
  }
  float sq = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < h; ++i) sq += (x[i] - mean) * (x[i] - mean);
  const float rstd = 1.0f / std::sqrt(sq / static_cast<float>(h) + eps);
  if (w != nullptr && b != nullptr) {
    for (int64_t j = 0; j < h; ++j) y[j] = (x[j] - mean) * rstd * w[j] + b[j];
  } else if (w != nullptr) {
    for (int64_t j = 0; j < h; ++j) y[j] = (x[j] - mean) * rstd * w[j];
  } else if (b != nullptr) {
    for (int64_t j = 0; j < h; ++j) y[j] = (x[j] - mean) * rstd + b[j];
  } else {
    for (int64_t j = 0; j < h; ++j) y[j] = (x[j] - mean) * rstd;
  }
  *mean_out = mean;
  *rstd_out = rstd;
}

// One row of the layer-norm backward: dx (may be null) and the row's
// contribution to dw/db accumulators (may be null).
TPX_VECTOR_CLONES
void LayerNormBackwardRow(const float* g, const float* x, float mean, float rstd, const float* w,
                          float* dx, float* dw_acc, float* db_acc, int64_t h) {
  if (dx != nullptr) {
    // dxhat = g * w; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
    float a1[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float a2[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= h; i += 8) {
      for (int j = 0; j < 8; ++j) {
        const float d = g[i + j] * w[i + j];
        a1[j] += d;
        a2[j] += d * ((x[i + j] - mean) * rstd);
      }
    }
    float s1 = ((a1[0] + a1[1]) + (a1[2] + a1[3])) + ((a1[4] + a1[5]) + (a1[6] + a1[7]));
    float s2 = ((a2[0] + a2[1]) + (a2[2] + a2[3])) + ((a2[4] + a2[5]) + (a2[6] + a2[7]));
    for (; i < h; ++i) {
      const float d = g[i] * w[i];
      s1 += d;
      s2 += d * ((x[i] - mean) * rstd);
    }
    const float m1 = s1 / static_cast<float>(h);
    const float m2 = s2 / static_cast<float>(h);
    for (int64_t j = 0; j < h; ++j) {
      const float d = g[j] * w[j];
      dx[j] = rstd * (d - m1 - ((x[j] - mean) * rstd) * m2);
    }
  }
  if (dw_acc != nullptr) {
    for (int64_t j = 0; j < h; ++j) dw_acc[j] += g[j] * ((x[j] - mean) * rstd);
  }
  if (db_acc != nullptr) {
    for (int64_t j = 0; j < h; ++j) db_acc[j] += g[j];
  }
}

// y[0..valid) = softmax(scale * x[0..valid)), y[valid..n) = 0.
TPX_VECTOR_CLONES
void SoftmaxRow(const float* x, float* y, int64_t valid, int64_t n, float scale) {
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  if (valid > 0) {
    float m[8] = {kLowest, kLowest, kLowest, kLowest, kLowest, kLowest, kLowest, kLowest};
    bool nan = false;
    int64_t i = 0;
    for (; i + 8 <= valid; i += 8) {
      for (int j = 0; j < 8; ++j) {
        const float v = scale * x[i + j];
        nan |= v != v;
        m[j] = v > m[j] ? v : m[j];
      }
    }
    for (; i < valid; ++i) {
      const float v = scale * x[i];
      nan |= v != v;
      m[0] = v > m[0] ? v : m[0];
    }
    float mx = m[0];
    for (int j = 1; j < 8; ++j) mx = m[j] > mx ? m[j] : mx;
    if (nan) mx = std::numeric_limits<float>::quiet_NaN();
    if (std::isinf(mx) && mx < 0) mx = 0.0f;  // all -inf: avoid inf - inf
    for (int64_t j = 0; j < valid; ++j) y[j] = Exp(scale * x[j] - mx);
    const float inv = 1.0f / Sum8(y, valid);
    for (int64_t j = 0; j < valid; ++j) y[j] *= inv;
  }
  for (int64_t j = std::max<int64_t>(valid, 0); j < n; ++j) y[j] = 0.0f;
}

// dx = scale * y * (g - sum(g * y)).
TPX_VECTOR_CLONES
void SoftmaxBackwardRow(const float* g, const float* y, float* dx, int64_t n, float scale) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += g[i + j] * y[i + j];
  }
  float dot = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) dot += g[i] * y[i];
  for (int64_t j = 0; j < n; ++j) dx[j] = scale * (y[j] * (g[j] - dot));
}

// A row of T as f32: the row itself for f32, else converted into `buf`.
template <typename T>
const float* RowAsFloat(const T* row, int64_t n, std::vector<float>& buf) {
  if constexpr (std::is_same_v<T, float>) {
    return row;
  } else {
    buf.resize(n);
    for (int64_t j = 0; j < n; ++j) buf[j] = Load(row[j]);
    return buf.data();
  }
}

// Where a row of T is computed in f32: the output row for f32, else `buf`
// (stored with StoreRow afterwards).
template <typename T>
float* OutRowAsFloat(T* row, int64_t n, std::vector<float>& buf) {
  if constexpr (std::is_same_v<T, float>) {
    return row;
  } else {
    buf.resize(n);
    return buf.data();
  }
}

template <typename T>
void StoreRow(const float* src, T* row, int64_t n) {
  if constexpr (!std::is_same_v<T, float>) {
    for (int64_t j = 0; j < n; ++j) row[j] = StoreAs<T>(src[j]);
  }
}

const float* OptionalF32(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

}  // namespace

absl::Status CpuDeviceKernels::LayerNorm(const Tensor& y, const Tensor& mean, const Tensor& rstd,
                                         const Tensor& x, const Tensor& weight,
                                         const Tensor& bias, int64_t rows, int64_t h,
                                         double eps) {
  const float* w = OptionalF32(weight);
  const float* b = OptionalF32(bias);
  float* mo = mean.data<float>();
  float* ro = rstd.data<float>();
  const float e = static_cast<float>(eps);
  DispatchFloat(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    ParallelFor(rows, h, [&](int64_t first, int64_t last) {
      std::vector<float> xbuf, ybuf;
      for (int64_t r = first; r < last; ++r) {
        const float* xr = RowAsFloat(xp + r * h, h, xbuf);
        float* yr = OutRowAsFloat(yp + r * h, h, ybuf);
        LayerNormRow(xr, w, b, yr, h, e, mo + r, ro + r);
        StoreRow(yr, yp + r * h, h);
      }
    });
  });
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::LayerNormBackward(const Tensor& dx, const Tensor& dweight,
                                                 const Tensor& dbias, const Tensor& grad,
                                                 const Tensor& x, const Tensor& mean,
                                                 const Tensor& rstd, const Tensor& weight,
                                                 int64_t rows, int64_t h) {
  std::vector<float> ones;
  const float* w = OptionalF32(weight);
  if (w == nullptr) {
    ones.assign(h, 1.0f);
    w = ones.data();
  }
  const float* mp = mean.data<float>();
  const float* rp = rstd.data<float>();
  const bool want_dw = dweight.defined(), want_db = dbias.defined();
  const int64_t chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  // Per chunk: h partial sums of dweight, then h of dbias.
  std::vector<float> partial((want_dw || want_db) ? chunks * 2 * h : 0, 0.0f);
  DispatchFloat(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* gp = grad.data<T>();
    const T* xp = x.data<T>();
    T* dxp = dx.defined() ? dx.data<T>() : nullptr;
    ParallelFor(chunks, kRowsPerChunk * h, [&](int64_t first, int64_t last) {
      std::vector<float> gbuf, xbuf, dxbuf;
      for (int64_t c = first; c < last; ++c) {
        float* dw_acc = want_dw ? partial.data() + c * 2 * h : nullptr;
        float* db_acc = want_db ? partial.data() + c * 2 * h + h : nullptr;
        const int64_t r_end = std::min(rows, (c + 1) * kRowsPerChunk);
        for (int64_t r = c * kRowsPerChunk; r < r_end; ++r) {
          const float* gr = RowAsFloat(gp + r * h, h, gbuf);
          const float* xr = RowAsFloat(xp + r * h, h, xbuf);
          float* dxr = dxp != nullptr ? OutRowAsFloat(dxp + r * h, h, dxbuf) : nullptr;
          LayerNormBackwardRow(gr, xr, mp[r], rp[r], w, dxr, dw_acc, db_acc, h);
          if (dxr != nullptr) StoreRow(dxr, dxp + r * h, h);
        }
      }
    });
  });
  float* dw = want_dw ? dweight.data<float>() : nullptr;
  float* db = want_db ? dbias.data<float>() : nullptr;
  if (dw != nullptr) std::fill_n(dw, h, 0.0f);
  if (db != nullptr) std::fill_n(db, h, 0.0f);
  for (int64_t c = 0; c < chunks; ++c) {
    const float* pc = partial.data() + c * 2 * h;
    if (dw != nullptr) {
      for (int64_t j = 0; j < h; ++j) dw[j] += pc[j];
    }
    if (db != nullptr) {
      for (int64_t j = 0; j < h; ++j) db[j] += pc[h + j];
    }
  }
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::ScaledSoftmax(const Tensor& out, const Tensor& in, int64_t batch,
                                             int64_t m, int64_t n, double scale, bool causal) {
  const float s = static_cast<float>(scale);
  DispatchFloat(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = in.data<T>();
    T* yp = out.data<T>();
    ParallelFor(batch * m, n, [&](int64_t first, int64_t last) {
      std::vector<float> xbuf, ybuf;
      for (int64_t r = first; r < last; ++r) {
        const int64_t i = r % m;
        const int64_t valid = causal ? std::clamp<int64_t>(i + 1 + n - m, 0, n) : n;
        const float* xr = RowAsFloat(xp + r * n, n, xbuf);
        float* yr = OutRowAsFloat(yp + r * n, n, ybuf);
        SoftmaxRow(xr, yr, valid, n, s);
        StoreRow(yr, yp + r * n, n);
      }
    });
  });
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::ScaledSoftmaxBackward(const Tensor& dx, const Tensor& grad,
                                                     const Tensor& y, int64_t rows, int64_t n,
                                                     double scale) {
  const float s = static_cast<float>(scale);
  DispatchFloat(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* gp = grad.data<T>();
    const T* yp = y.data<T>();
    T* dp = dx.data<T>();
    ParallelFor(rows, n, [&](int64_t first, int64_t last) {
      std::vector<float> gbuf, ybuf, dbuf;
      for (int64_t r = first; r < last; ++r) {
        const float* gr = RowAsFloat(gp + r * n, n, gbuf);
        const float* yr = RowAsFloat(yp + r * n, n, ybuf);
        float* dr = OutRowAsFloat(dp + r * n, n, dbuf);
        SoftmaxBackwardRow(gr, yr, dr, n, s);
        StoreRow(dr, dp + r * n, n);
      }
    });
  });
  return absl::OkStatus();
}

}  // namespace tpx::cpu
