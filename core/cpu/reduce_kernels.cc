// CPU DeviceKernels: reductions over the middle dim of [outer, n, inner]
// and softmax. inner == 1 reduces contiguous rows; otherwise whole inner-rows
// are accumulated at once so memory is read in order.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/cpu/column_sums.h"
#include "core/cpu/cpu_kernels.h"
#include "core/cpu/loops.h"
#include "core/cpu/parallel.h"
#include "core/cpu/vec_math.h"

namespace tpx::cpu {
namespace {

struct Layout {
  int64_t outer, n, inner;
};

// Sum of n contiguous values in f32; 8 independent partial sums so the
// compiler can vectorise without reassociation flags.
template <typename T>
float SumRow(const T* x, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += Load(x[i + j]);
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += Load(x[i]);
  return s;
}

// Sums over n for one outer index into acc[inner] (accumulator type A).
template <typename A, typename T>
void SumBlock(const T* x, int64_t n, int64_t inner, A* acc) {
  for (int64_t j = 0; j < inner; ++j) acc[j] = A(0);
  for (int64_t r = 0; r < n; ++r) {
    const T* row = x + r * inner;
    for (int64_t j = 0; j < inner; ++j) acc[j] += static_cast<A>(Load(row[j]));
  }
}

// Whether v takes the place of the running maximum `best` (and its
// position): the first maximum wins, and for floating values a NaN wins and
// then stays (NaN-propagating max). Written as one comparison per value so
// that column loops vectorise.
inline bool ReplacesMax(float best, float v) { return best == best && !(v <= best); }
template <typename I>
inline bool ReplacesMax(I best, I v) {
  return v > best;
}

// Max of the n contiguous values x[0..n): NaN if any is NaN, on f32 vectors
// (ScaledRowMax; bf16/f16 widened into `row` first).
template <typename T>
TPX_VECTOR_CLONES TPX_INLINE_CALLS float RowMaxOf(const T* x, int64_t n, std::vector<float>& row) {
  if constexpr (kIsReduced<T>) {
    for (int64_t k = 0; k < n; ++k) row[k] = Load(x[k]);
    return ScaledRowMax(row.data(), n, n, 1.0f);
  } else {
    return ScaledRowMax(x, n, n, 1.0f);
  }
}

// Adds rows [first, last) of x (rows of `inner`) into acc.
template <typename T>
TPX_VECTOR_CLONES void AddRows(const T* x, int64_t first, int64_t last, int64_t inner,
                               float* acc) {
  for (int64_t r = first; r < last; ++r) {
    const T* row = x + r * inner;
    for (int64_t j = 0; j < inner; ++j) acc[j] += Load(row[j]);
  }
}

// Floating sums over n in f32, split over the kernel threads: contiguous
// rows (inner == 1) per outer index; otherwise (bias gradients: [rows, h]
// summed to [h]) in fixed chunks of rows per outer index (core/cpu/column_sums.h),
// so the result does not depend on the thread count.
template <typename T>
absl::Status FloatSumOrMean(const Tensor& out, const Tensor& in, Layout r, float scale) {
  const T* x = in.template data<T>();
  T* o = out.data<T>();
  if (r.inner == 1) {
    ParallelFor(r.outer, r.n, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) o[i] = StoreAs<T>(SumRow(x + i * r.n, r.n) * scale);
    });
    return absl::OkStatus();
  }
  ColumnSums sums(r.n, r.inner, r.outer);
  if (!sums.ok()) return absl::ResourceExhaustedError("Sum: out of memory");
  const int64_t chunks = sums.chunks();
  ParallelFor(r.outer * chunks, ColumnSums::kRowsPerChunk * r.inner,
              [&](int64_t first, int64_t last) {
                for (int64_t q = first; q < last; ++q) {
                  const int64_t i = q / chunks, c = q % chunks;
                  AddRows(x + i * r.n * r.inner, sums.first_row(c), sums.last_row(c), r.inner,
                          sums.ZeroedPartial(c, i));
                }
              });
  for (int64_t i = 0; i < r.outer; ++i) sums.Total(i, scale, o + i * r.inner);
  return absl::OkStatus();
}

absl::Status SumOrMean(const Tensor& out, const Tensor& in, Layout r, bool mean) {
  const float scale = mean ? 1.0f / static_cast<float>(r.n) : 1.0f;
  if (IsFloatingPoint(in.dtype())) {
    return DispatchFloat(in.dtype(), [&](auto tag) {
      return FloatSumOrMean<decltype(tag)>(out, in, r, scale);
    });
  }
  DispatchDType(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const T* x = in.template data<T>();
      int64_t* o = out.data<int64_t>();
      std::vector<int64_t> acc(r.inner);
      for (int64_t i = 0; i < r.outer; ++i) {
        SumBlock<int64_t>(x + i * r.n * r.inner, r.n, r.inner, acc.data());
        for (int64_t j = 0; j < r.inner; ++j) o[i * r.inner + j] = acc[j];
      }
    }
  });
  return absl::OkStatus();
}

// The maxima and their first positions (ReplacesMax) over the n rows of
// one [n, inner] block, a row of `inner` at a time on vectors.
template <typename T, typename C = ComputeType<T>>
TPX_VECTOR_CLONES TPX_INLINE_CALLS void ColumnsMaxOf(const T* x, int64_t n, int64_t inner,
                                                     C* best, int64_t* where) {
  for (int64_t j = 0; j < inner; ++j) {
    best[j] = Load(x[j]);
    where[j] = 0;
  }
  for (int64_t k = 1; k < n; ++k) {
    const T* row = x + k * inner;
    for (int64_t j = 0; j < inner; ++j) {
      const C v = Load(row[j]), b = best[j];
      const bool take = ReplacesMax(b, v);
      best[j] = take ? v : b;
      where[j] = take ? k : where[j];
    }
  }
}

// Max values (values != nullptr) or argmax (indices != nullptr) over n.
void MaxOrArgmax(const Tensor& in, Layout r, const Tensor* values, const Tensor* indices) {
  if (r.inner == 1 && r.n > 0 && IsFloatingPoint(in.dtype())) {
    // Contiguous rows: the maximum on vectors, then (argmax) the first
    // position holding it, or the first NaN.
    DispatchFloat(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* x = in.template data<T>();
      T* vo = values ? values->data<T>() : nullptr;
      int64_t* io = indices ? indices->data<int64_t>() : nullptr;
      ParallelFor(r.outer, r.n, [&](int64_t first, int64_t last) {
        std::vector<float> row(kIsReduced<T> ? r.n : 0);
        for (int64_t i = first; i < last; ++i) {
          const T* xr = x + i * r.n;
          const float m = RowMaxOf(xr, r.n, row);
          if (vo) vo[i] = StoreAs<T>(m);
          if (io) {
            int64_t k = 0;
            if (m != m) {
              while (Load(xr[k]) == Load(xr[k])) ++k;
            } else {
              while (Load(xr[k]) != m) ++k;
            }
            io[i] = k;
          }
        }
      });
    });
    return;
  }
  DispatchDType(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      using C = ComputeType<T>;
      const T* x = in.template data<T>();
      T* vo = values ? values->data<T>() : nullptr;
      int64_t* io = indices ? indices->data<int64_t>() : nullptr;
      std::vector<C> best(r.inner);
      std::vector<int64_t> where(r.inner);
      for (int64_t i = 0; i < r.outer; ++i) {
        ColumnsMaxOf(x + i * r.n * r.inner, r.n, r.inner, best.data(), where.data());
        for (int64_t j = 0; j < r.inner; ++j) {
          if (vo) vo[i * r.inner + j] = StoreAs<T>(best[j]);
          if (io) io[i * r.inner + j] = where[j];
        }
      }
    }
  });
}

// Log-softmax of the n contiguous values x[0..n) into y, through `row` (n
// floats): widened once, then every pass on f32 vectors (ScaledRowMax, Exp
// over the row, Sum8). A NaN makes the row NaN; a row of -inf is -inf -
// -inf (NaN). (Softmax's rows are ScaledSoftmax's, core/cpu/nn_kernels.cc.)
template <typename T>
TPX_VECTOR_CLONES TPX_INLINE_CALLS void LogSoftmaxRowOf(const T* x, T* y, float* row, int64_t n) {
  for (int64_t k = 0; k < n; ++k) row[k] = Load(x[k]);
  float mx = ScaledRowMax(row, n, n, 1.0f);
  if (std::isinf(mx) && mx < 0) mx = 0.0f;  // all -inf: avoid inf - inf
  const float lse = mx + std::log(Sum8(n, [row, mx](int64_t k) { return Exp(row[k] - mx); }));
  StoreRow(y, n, [row, lse](int64_t k) { return row[k] - lse; });
}

// The softmax over the middle dim of one [n, inner] block (x, y), a whole
// row of `inner` at a time so that memory is read in order and the inner
// columns' maxima and sums are vectors: stats holds 2 inner floats.
template <typename T>
TPX_VECTOR_CLONES TPX_INLINE_CALLS void SoftmaxColumnsOf(const T* x, T* y, float* stats,
                                                         int64_t n, int64_t inner, bool log) {
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  float* mx = stats;
  float* sum = stats + inner;
  for (int64_t j = 0; j < inner; ++j) mx[j] = kLowest;
  // NaN-propagating maxima (ReplacesMax): once a column holds NaN it keeps it.
  for (int64_t k = 0; k < n; ++k) {
    const T* row = x + k * inner;
    for (int64_t j = 0; j < inner; ++j) {
      const float v = Load(row[j]);
      mx[j] = ReplacesMax(mx[j], v) ? v : mx[j];
    }
  }
  for (int64_t j = 0; j < inner; ++j) {
    mx[j] = mx[j] == kLowest ? 0.0f : mx[j];  // all -inf: avoid inf - inf
    sum[j] = 0.0f;
  }
  for (int64_t k = 0; k < n; ++k) {
    const T* row = x + k * inner;
    for (int64_t j = 0; j < inner; ++j) sum[j] += Exp(Load(row[j]) - mx[j]);
  }
  if (log) {
    for (int64_t j = 0; j < inner; ++j) sum[j] = mx[j] + std::log(sum[j]);  // lse
    for (int64_t k = 0; k < n; ++k) {
      StoreRow(y + k * inner, inner,
               [x, sum, k, inner](int64_t j) { return Load(x[k * inner + j]) - sum[j]; });
    }
    return;
  }
  for (int64_t j = 0; j < inner; ++j) sum[j] = 1.0f / sum[j];  // reciprocals
  for (int64_t k = 0; k < n; ++k) {
    StoreRow(y + k * inner, inner, [x, mx, sum, k, inner](int64_t j) {
      return Exp(Load(x[k * inner + j]) - mx[j]) * sum[j];
    });
  }
}

}  // namespace

absl::Status CpuDeviceKernels::Reduce(ReduceOp op, const Tensor& out, const Tensor& in,
                                      int64_t outer, int64_t n, int64_t inner) {
  const Layout r{outer, n, inner};
  switch (op) {
    case ReduceOp::kSum: return SumOrMean(out, in, r, /*mean=*/false);
    case ReduceOp::kMean: return SumOrMean(out, in, r, /*mean=*/true);
    case ReduceOp::kMax: MaxOrArgmax(in, r, &out, nullptr); break;
    case ReduceOp::kArgmax: MaxOrArgmax(in, r, nullptr, &out); break;
  }
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::Softmax(const Tensor& out, const Tensor& in, int64_t outer,
                                       int64_t n, int64_t inner, bool log) {
  // Contiguous rows: softmax is ScaledSoftmax at scale 1 without a mask.
  if (inner == 1 && !log) return ScaledSoftmax(out, in, outer, 1, n, 1.0, /*causal=*/false);
  DispatchFloat(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = in.template data<T>();
    T* o = out.data<T>();
    if (inner == 1) {
      ParallelFor(outer, n, [&](int64_t first, int64_t last) {
        std::vector<float> row(n);
        for (int64_t i = first; i < last; ++i) LogSoftmaxRowOf(x + i * n, o + i * n, row.data(), n);
      });
      return;
    }
    ParallelFor(outer, n * inner, [&](int64_t first, int64_t last) {
      std::vector<float> stats(2 * inner);
      for (int64_t i = first; i < last; ++i) {
        SoftmaxColumnsOf(x + i * n * inner, o + i * n * inner, stats.data(), n, inner, log);
      }
    });
  });
  return absl::OkStatus();
}

}  // namespace tpx::cpu
