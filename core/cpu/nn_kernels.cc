// CPU DeviceKernels: the fused transformer kernels (layer norm forward and
// backward, scaled and causal softmax forward and backward, bias + GeLU
// forward and backward). Each walks a
// row once or twice, reading and writing bf16/f16 in place and computing in
// f32, instead of the five to twelve passes and temporaries of the composed
// ops, and rows are split over the kernel threads. Row loops are compiled
// per ISA (TPX_VECTOR_CLONES).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu/column_sums.h"
#include "core/cpu/cpu_kernels.h"
#include "core/cpu/loops.h"
#include "core/cpu/parallel.h"
#include "core/cpu/vec_math.h"

namespace tpx::cpu {
namespace {

// One row of layer norm, read and written in T (f32 arithmetic). w, b may
// be null.
template <typename T>
TPX_VECTOR_CLONES void LayerNormRow(const T* x, const float* w, const float* b, T* y, int64_t h,
                                    float eps, float* mean_out, float* rstd_out) {
  const float mean = Sum8(h, [x](int64_t j) { return Load(x[j]); }) / static_cast<float>(h);
  const float sq = Sum8(h, [x, mean](int64_t j) {
    const float c = Load(x[j]) - mean;
    return c * c;
  });
  const float rstd = 1.0f / std::sqrt(sq / static_cast<float>(h) + eps);
  if (w != nullptr && b != nullptr) {
    for (int64_t j = 0; j < h; ++j) y[j] = StoreAs<T>((Load(x[j]) - mean) * rstd * w[j] + b[j]);
  } else if (w != nullptr) {
    for (int64_t j = 0; j < h; ++j) y[j] = StoreAs<T>((Load(x[j]) - mean) * rstd * w[j]);
  } else if (b != nullptr) {
    for (int64_t j = 0; j < h; ++j) y[j] = StoreAs<T>((Load(x[j]) - mean) * rstd + b[j]);
  } else {
    for (int64_t j = 0; j < h; ++j) y[j] = StoreAs<T>((Load(x[j]) - mean) * rstd);
  }
  *mean_out = mean;
  *rstd_out = rstd;
}

// One row of the layer-norm backward: dx (may be null) and the row's
// contribution to dw/db accumulators (may be null). The outputs never
// overlap each other or the inputs; saying so lets the fused loop vectorise
// (GCC gives up on the run-time overlap checks of five arrays).
template <typename T>
TPX_VECTOR_CLONES void LayerNormBackwardRow(const T* __restrict g, const T* __restrict x,
                                            float mean, float rstd, const float* __restrict w,
                                            T* __restrict dx, float* __restrict dw_acc,
                                            float* __restrict db_acc, int64_t h) {
  if (dx != nullptr) {
    // dxhat = g * w; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
    const float s1 = Sum8(h, [g, w](int64_t j) { return Load(g[j]) * w[j]; });
    const float s2 = Sum8(h, [&](int64_t j) {
      return Load(g[j]) * w[j] * ((Load(x[j]) - mean) * rstd);
    });
    const float m1 = s1 / static_cast<float>(h);
    const float m2 = s2 / static_cast<float>(h);
    if (dw_acc != nullptr && db_acc != nullptr) {
      // The usual case: the weight and bias gradients in the same pass as dx
      // (same arithmetic as the separate loops below).
      for (int64_t j = 0; j < h; ++j) {
        const float gj = Load(g[j]);
        const float xhat = (Load(x[j]) - mean) * rstd;
        dx[j] = StoreAs<T>(rstd * (gj * w[j] - m1 - xhat * m2));
        dw_acc[j] += gj * xhat;
        db_acc[j] += gj;
      }
      return;
    }
    for (int64_t j = 0; j < h; ++j) {
      const float d = Load(g[j]) * w[j];
      dx[j] = StoreAs<T>(rstd * (d - m1 - ((Load(x[j]) - mean) * rstd) * m2));
    }
  }
  if (dw_acc != nullptr) {
    for (int64_t j = 0; j < h; ++j) dw_acc[j] += Load(g[j]) * ((Load(x[j]) - mean) * rstd);
  }
  if (db_acc != nullptr) {
    for (int64_t j = 0; j < h; ++j) db_acc[j] += Load(g[j]);
  }
}

// y[0..valid) = softmax(scale * x[0..valid)), y[valid..n) = 0. The
// exponentials go to `e` (f32, n elements; y itself for f32).
template <typename T>
TPX_VECTOR_CLONES void SoftmaxRow(const T* x, T* y, float* e, int64_t valid, int64_t n,
                                  float scale) {
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  if (valid > 0) {
    float m[8] = {kLowest, kLowest, kLowest, kLowest, kLowest, kLowest, kLowest, kLowest};
    bool nan = false;
    int64_t i = 0;
    for (; i + 8 <= valid; i += 8) {
      for (int j = 0; j < 8; ++j) {
        const float v = scale * Load(x[i + j]);
        nan |= v != v;
        m[j] = v > m[j] ? v : m[j];
      }
    }
    for (; i < valid; ++i) {
      const float v = scale * Load(x[i]);
      nan |= v != v;
      m[0] = v > m[0] ? v : m[0];
    }
    float mx = m[0];
    for (int j = 1; j < 8; ++j) mx = m[j] > mx ? m[j] : mx;
    if (nan) mx = std::numeric_limits<float>::quiet_NaN();
    if (std::isinf(mx) && mx < 0) mx = 0.0f;  // all -inf: avoid inf - inf
    for (int64_t j = 0; j < valid; ++j) e[j] = Exp(scale * Load(x[j]) - mx);
    const float inv = 1.0f / Sum8(valid, [e](int64_t j) { return e[j]; });
    for (int64_t j = 0; j < valid; ++j) y[j] = StoreAs<T>(e[j] * inv);
  }
  for (int64_t j = std::max<int64_t>(valid, 0); j < n; ++j) y[j] = StoreAs<T>(0.0f);
}

// y = GeLU(x + b) over a row.
template <typename T>
TPX_VECTOR_CLONES TPX_INLINE_CALLS void BiasGeluRow(const T* x, const T* b, T* y, int64_t h) {
  StoreRow(y, h, [&](int64_t j) { return Gelu(Load(x[j]) + Load(b[j])); });
}

// dx = g * GeLU'(x + b) over a row, and dx added to db_acc (f32, before
// dx is rounded to T) when db_acc is not null.
template <typename T>
TPX_VECTOR_CLONES TPX_INLINE_CALLS void BiasGeluBackwardRow(const T* g, const T* x, const T* b, T* dx,
                                           float* db_acc, int64_t h) {
  if (db_acc == nullptr) {
    StoreRow(dx, h, [&](int64_t j) { return Load(g[j]) * GeluGrad(Load(x[j]) + Load(b[j])); });
    return;
  }
  StoreRow(dx, h, [&](int64_t j) {
    const float d = Load(g[j]) * GeluGrad(Load(x[j]) + Load(b[j]));
    db_acc[j] += d;
    return d;
  });
}

// dx = scale * y * (g - sum(g * y)).
template <typename T>
TPX_VECTOR_CLONES void SoftmaxBackwardRow(const T* g, const T* y, T* dx, int64_t n,
                                          float scale) {
  const float dot = Sum8(n, [g, y](int64_t j) { return Load(g[j]) * Load(y[j]); });
  for (int64_t j = 0; j < n; ++j) {
    dx[j] = StoreAs<T>(scale * (Load(y[j]) * (Load(g[j]) - dot)));
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
  ParallelFloatRows(x.dtype(), rows, h, [&](auto tag, int64_t first, int64_t last) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    for (int64_t r = first; r < last; ++r) {
      LayerNormRow(xp + r * h, w, b, yp + r * h, h, e, mo + r, ro + r);
    }
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
  // Per chunk of rows: sum 0 of dweight, sum 1 of dbias.
  ColumnSums sums(rows, (want_dw || want_db) ? h : 0, 2);
  if (!sums.ok()) return absl::ResourceExhaustedError("LayerNormBackward: out of memory");
  constexpr int64_t kChunk = ColumnSums::kRowsPerChunk;
  ParallelFloatRows(x.dtype(), sums.chunks(), kChunk * h,
                    [&](auto tag, int64_t first, int64_t last) {
    using T = decltype(tag);
    const T* gp = grad.data<T>();
    const T* xp = x.data<T>();
    T* dxp = dx.defined() ? dx.data<T>() : nullptr;
    for (int64_t c = first; c < last; ++c) {
      float* dw_acc = want_dw ? sums.ZeroedPartial(c, 0) : nullptr;
      float* db_acc = want_db ? sums.ZeroedPartial(c, 1) : nullptr;
      for (int64_t r = sums.first_row(c); r < sums.last_row(c); ++r) {
        LayerNormBackwardRow(gp + r * h, xp + r * h, mp[r], rp[r], w,
                             dxp != nullptr ? dxp + r * h : nullptr, dw_acc, db_acc, h);
      }
    }
  });
  if (want_dw) sums.Total(0, 1.0f, dweight.data<float>());
  if (want_db) sums.Total(1, 1.0f, dbias.data<float>());
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::ScaledSoftmax(const Tensor& out, const Tensor& in, int64_t batch,
                                             int64_t m, int64_t n, double scale, bool causal) {
  const float s = static_cast<float>(scale);
  ParallelFloatRows(in.dtype(), batch * m, n, [&](auto tag, int64_t first, int64_t last) {
    using T = decltype(tag);
    const T* xp = in.data<T>();
    T* yp = out.data<T>();
    std::vector<float> ebuf(std::is_same_v<T, float> ? 0 : n);
    for (int64_t r = first; r < last; ++r) {
      const int64_t i = r % m;
      const int64_t valid = causal ? std::clamp<int64_t>(i + 1 + n - m, 0, n) : n;
      T* yr = yp + r * n;
      float* er = ebuf.data();
      if constexpr (std::is_same_v<T, float>) er = yr;
      SoftmaxRow(xp + r * n, yr, er, valid, n, s);
    }
  });
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::ScaledSoftmaxBackward(const Tensor& dx, const Tensor& grad,
                                                     const Tensor& y, int64_t rows, int64_t n,
                                                     double scale) {
  const float s = static_cast<float>(scale);
  ParallelFloatRows(y.dtype(), rows, n, [&](auto tag, int64_t first, int64_t last) {
    using T = decltype(tag);
    const T* gp = grad.data<T>();
    const T* yp = y.data<T>();
    T* dp = dx.data<T>();
    for (int64_t r = first; r < last; ++r) {
      SoftmaxBackwardRow(gp + r * n, yp + r * n, dp + r * n, n, s);
    }
  });
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::BiasGelu(const Tensor& y, const Tensor& x, const Tensor& bias,
                                        int64_t rows, int64_t h) {
  ParallelFloatRows(x.dtype(), rows, h, [&](auto tag, int64_t first, int64_t last) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    const T* bp = bias.data<T>();
    T* yp = y.data<T>();
    for (int64_t r = first; r < last; ++r) BiasGeluRow(xp + r * h, bp, yp + r * h, h);
  });
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::BiasGeluBackward(const Tensor& dx, const Tensor& dbias,
                                                const Tensor& grad, const Tensor& x,
                                                const Tensor& bias, int64_t rows, int64_t h) {
  const bool want_db = dbias.defined();
  // dbias is summed per chunk of rows while dx is written (chunks of one
  // row without it, so the threads split as finely as before).
  ColumnSums sums(want_db ? rows : 0, h, 1);
  if (!sums.ok()) return absl::ResourceExhaustedError("BiasGeluBackward: out of memory");
  const int64_t per_item = want_db ? ColumnSums::kRowsPerChunk : 1;
  const int64_t items = want_db ? sums.chunks() : rows;
  ParallelFloatRows(x.dtype(), items, per_item * h, [&](auto tag, int64_t first, int64_t last) {
    using T = decltype(tag);
    const T* gp = grad.data<T>();
    const T* xp = x.data<T>();
    const T* bp = bias.data<T>();
    T* dp = dx.data<T>();
    for (int64_t c = first; c < last; ++c) {
      float* db_acc = want_db ? sums.ZeroedPartial(c, 0) : nullptr;
      const int64_t r_end = std::min(rows, (c + 1) * per_item);
      for (int64_t r = c * per_item; r < r_end; ++r) {
        BiasGeluBackwardRow(gp + r * h, xp + r * h, bp, dp + r * h, db_acc, h);
      }
    }
  });
  if (want_db) {
    DispatchFloat(dbias.dtype(), [&](auto tag) {
      using T = decltype(tag);
      sums.Total(0, 1.0f, dbias.data<T>());
    });
  }
  return absl::OkStatus();
}

}  // namespace tpx::cpu
