// Reductions over one dim, SumTo (un-broadcast) and softmax.
//
// Every kernel views its (contiguous) input as [outer, n, inner] where n is
// the reduced dim: inner == 1 reduces contiguous rows, otherwise whole
// inner-rows are accumulated at once so memory is read in order.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cpu/loops.h"
#include "core/cpu/vec_math.h"
#include "core/ops.h"
#include "core/ops_internal.h"
#include "core/status_macros.h"

namespace tpx::ops {
namespace {

using internal::CheckFloating;
using internal::CheckInput;

struct ReduceLayout {
  Tensor input;  // contiguous
  int64_t dim = 0;
  int64_t outer = 1, n = 1, inner = 1;
  Shape out_shape;
};

absl::StatusOr<ReduceLayout> PrepareReduce(const Tensor& t, int64_t dim, bool keepdim,
                                           const char* op) {
  TPX_RETURN_IF_ERROR(CheckInput(t, op));
  ReduceLayout r;
  TPX_ASSIGN_OR_RETURN(r.dim, NormalizeDim(dim, t.dim(), op));
  TPX_ASSIGN_OR_RETURN(r.input, t.Contiguous());
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d < r.dim) r.outer *= t.size(d);
    if (d > r.dim) r.inner *= t.size(d);
  }
  r.n = t.size(r.dim);
  r.out_shape = t.shape();
  if (keepdim) {
    r.out_shape[r.dim] = 1;
  } else {
    r.out_shape.erase(r.out_shape.begin() + r.dim);
  }
  return r;
}

// Sum of n contiguous values in f32; 8 independent partial sums so the
// compiler can vectorise without reassociation flags.
template <typename T>
float SumRow(const T* x, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += cpu::Load(x[i + j]);
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += cpu::Load(x[i]);
  return s;
}

// Sums over n for one outer index into acc[inner] (accumulator type A).
template <typename A, typename T>
void SumBlock(const T* x, int64_t n, int64_t inner, A* acc) {
  for (int64_t j = 0; j < inner; ++j) acc[j] = A(0);
  for (int64_t r = 0; r < n; ++r) {
    const T* row = x + r * inner;
    for (int64_t j = 0; j < inner; ++j) acc[j] += static_cast<A>(cpu::Load(row[j]));
  }
}

// NaN-propagating max step.
inline float MaxStep(float acc, float v) {
  if (std::isnan(acc)) return acc;
  return v <= acc ? acc : v;  // v > acc, or v is NaN
}
template <typename I>
inline I MaxStep(I acc, I v) {
  return v > acc ? v : acc;
}

template <typename T>
auto LowestOf() {
  using C = cpu::ComputeType<T>;
  if constexpr (std::is_floating_point_v<C>) {
    return -std::numeric_limits<C>::infinity();
  } else {
    return std::numeric_limits<C>::lowest();
  }
}

absl::StatusOr<Tensor> SumOrMean(const Tensor& t, int64_t dim, bool keepdim, bool mean,
                                 const char* op) {
  TPX_ASSIGN_OR_RETURN(ReduceLayout r, PrepareReduce(t, dim, keepdim, op));
  if (t.dtype() == DType::kBool || (mean && !IsFloatingPoint(t.dtype()))) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": unsupported dtype ", t.ToString()));
  }
  const DType out_dtype = IsFloatingPoint(t.dtype()) ? t.dtype() : DType::kI64;
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(r.out_shape, out_dtype));
  const float scale = mean ? 1.0f / static_cast<float>(r.n) : 1.0f;
  cpu::DispatchDType(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      const T* x = r.input.template data<T>();
      if constexpr (std::is_integral_v<T>) {
        int64_t* o = out.data<int64_t>();
        std::vector<int64_t> acc(r.inner);
        for (int64_t i = 0; i < r.outer; ++i) {
          SumBlock<int64_t>(x + i * r.n * r.inner, r.n, r.inner, acc.data());
          for (int64_t j = 0; j < r.inner; ++j) o[i * r.inner + j] = acc[j];
        }
      } else {
        T* o = out.data<T>();
        if (r.inner == 1) {
          for (int64_t i = 0; i < r.outer; ++i) {
            o[i] = cpu::StoreAs<T>(SumRow(x + i * r.n, r.n) * scale);
          }
        } else {
          std::vector<float> acc(r.inner);
          for (int64_t i = 0; i < r.outer; ++i) {
            SumBlock<float>(x + i * r.n * r.inner, r.n, r.inner, acc.data());
            for (int64_t j = 0; j < r.inner; ++j) {
              o[i * r.inner + j] = cpu::StoreAs<T>(acc[j] * scale);
            }
          }
        }
      }
    }
  });
  return out;
}

// Max of n values at x[0], x[stride], ...; NaN if any is NaN. Eight
// independent maxima in the `v > m ? v : m` form (exactly vmaxps) let the
// compiler vectorise the contiguous case.
template <typename T>
float RowMax(const T* x, int64_t n, int64_t stride) {
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  float m[8] = {kLowest, kLowest, kLowest, kLowest, kLowest, kLowest, kLowest, kLowest};
  bool nan = false;
  int64_t i = 0;
  if (stride == 1) {
    for (; i + 8 <= n; i += 8) {
      for (int j = 0; j < 8; ++j) {
        const float v = cpu::Load(x[i + j]);
        nan |= v != v;
        m[j] = v > m[j] ? v : m[j];
      }
    }
  }
  for (; i < n; ++i) {
    const float v = cpu::Load(x[i * stride]);
    nan |= v != v;
    m[0] = v > m[0] ? v : m[0];
  }
  if (nan) return std::numeric_limits<float>::quiet_NaN();
  float r = m[0];
  for (int j = 1; j < 8; ++j) r = m[j] > r ? m[j] : r;
  return r;
}

// Max values and/or argmax over the dim.
absl::Status MaxKernel(const ReduceLayout& r, const Tensor* values, const Tensor* indices) {
  if (indices == nullptr && r.inner == 1 && IsFloatingPoint(r.input.dtype())) {
    cpu::DispatchFloat(r.input.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* x = r.input.template data<T>();
      T* o = values->data<T>();
      for (int64_t i = 0; i < r.outer; ++i) o[i] = cpu::StoreAs<T>(RowMax(x + i * r.n, r.n, 1));
    });
    return absl::OkStatus();
  }
  cpu::DispatchDType(r.input.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      using C = cpu::ComputeType<T>;
      const T* x = r.input.template data<T>();
      T* vo = values ? values->data<T>() : nullptr;
      int64_t* io = indices ? indices->data<int64_t>() : nullptr;
      std::vector<C> best(r.inner);
      std::vector<int64_t> where(r.inner);
      for (int64_t i = 0; i < r.outer; ++i) {
        const T* block = x + i * r.n * r.inner;
        for (int64_t j = 0; j < r.inner; ++j) {
          best[j] = cpu::Load(block[j]);
          where[j] = 0;
        }
        for (int64_t k = 1; k < r.n; ++k) {
          const T* row = block + k * r.inner;
          for (int64_t j = 0; j < r.inner; ++j) {
            const C v = cpu::Load(row[j]);
            const C m = MaxStep(best[j], v);
            // Update the index only on a strict change (first maximum wins; first NaN wins).
            if (!(m == best[j]) && !(std::isnan(static_cast<double>(best[j])))) {
              best[j] = m;
              where[j] = k;
            }
          }
        }
        for (int64_t j = 0; j < r.inner; ++j) {
          if (vo) vo[i * r.inner + j] = cpu::StoreAs<T>(best[j]);
          if (io) io[i * r.inner + j] = where[j];
        }
      }
    }
  });
  return absl::OkStatus();
}

absl::StatusOr<ReduceLayout> PrepareMax(const Tensor& t, int64_t dim, bool keepdim,
                                        const char* op) {
  TPX_ASSIGN_OR_RETURN(ReduceLayout r, PrepareReduce(t, dim, keepdim, op));
  if (t.dtype() == DType::kBool) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": unsupported dtype ", t.ToString()));
  }
  if (r.n == 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": dim ", r.dim, " of shape ",
                                                   ShapeString(t.shape()), " is empty"));
  }
  return r;
}

absl::StatusOr<Tensor> SoftmaxImpl(const Tensor& t, int64_t dim, bool log, const char* op) {
  TPX_ASSIGN_OR_RETURN(ReduceLayout r, PrepareReduce(t, dim, /*keepdim=*/true, op));
  TPX_RETURN_IF_ERROR(CheckFloating(t, op));
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(t.shape(), t.dtype()));
  cpu::DispatchFloat(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = r.input.template data<T>();
    T* o = out.data<T>();
    std::vector<float> row(r.n);
    for (int64_t i = 0; i < r.outer; ++i) {
      for (int64_t j = 0; j < r.inner; ++j) {
        const T* in = x + i * r.n * r.inner + j;
        T* dst = o + i * r.n * r.inner + j;
        for (int64_t k = 0; k < r.n; ++k) row[k] = cpu::Load(in[k * r.inner]);
        float mx = RowMax(row.data(), r.n, 1);
        if (std::isinf(mx) && mx < 0) mx = 0.0f;  // all -inf: avoid inf - inf
        if (log) {
          float sum = 0.0f;
          for (int64_t k = 0; k < r.n; ++k) sum += cpu::Exp(row[k] - mx);
          const float lse = mx + std::log(sum);
          for (int64_t k = 0; k < r.n; ++k) dst[k * r.inner] = cpu::StoreAs<T>(row[k] - lse);
        } else {
          float sum = 0.0f;
          for (int64_t k = 0; k < r.n; ++k) {
            row[k] = cpu::Exp(row[k] - mx);
            sum += row[k];
          }
          const float inv = 1.0f / sum;
          for (int64_t k = 0; k < r.n; ++k) dst[k * r.inner] = cpu::StoreAs<T>(row[k] * inv);
        }
      }
    }
  });
  return out;
}

}  // namespace

absl::StatusOr<Tensor> Sum(const Tensor& t, int64_t dim, bool keepdim) {
  return SumOrMean(t, dim, keepdim, /*mean=*/false, "Sum");
}

absl::StatusOr<Tensor> Mean(const Tensor& t, int64_t dim, bool keepdim) {
  return SumOrMean(t, dim, keepdim, /*mean=*/true, "Mean");
}

absl::StatusOr<Tensor> Max(const Tensor& t, int64_t dim, bool keepdim) {
  TPX_ASSIGN_OR_RETURN(ReduceLayout r, PrepareMax(t, dim, keepdim, "Max"));
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(r.out_shape, t.dtype()));
  TPX_RETURN_IF_ERROR(MaxKernel(r, &out, nullptr));
  return out;
}

absl::StatusOr<Tensor> Argmax(const Tensor& t, int64_t dim, bool keepdim) {
  TPX_ASSIGN_OR_RETURN(ReduceLayout r, PrepareMax(t, dim, keepdim, "Argmax"));
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(r.out_shape, DType::kI64));
  TPX_RETURN_IF_ERROR(MaxKernel(r, nullptr, &out));
  return out;
}

absl::StatusOr<Tensor> SumAll(const Tensor& t) {
  TPX_RETURN_IF_ERROR(CheckInput(t, "SumAll"));
  TPX_ASSIGN_OR_RETURN(Tensor flat, t.Reshape({t.numel()}));
  return SumOrMean(flat, 0, /*keepdim=*/false, /*mean=*/false, "SumAll");
}

absl::StatusOr<Tensor> SumTo(const Tensor& t, absl::Span<const int64_t> shape) {
  TPX_RETURN_IF_ERROR(CheckInput(t, "SumTo"));
  absl::StatusOr<Shape> b = BroadcastShapes(shape, t.shape(), "SumTo");
  if (!b.ok() || *b != t.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("SumTo: shape ", ShapeString(shape),
                                                   " does not broadcast to ",
                                                   ShapeString(t.shape())));
  }
  Tensor out = t;
  const int64_t lead = t.dim() - static_cast<int64_t>(shape.size());
  for (int64_t d = 0; d < lead; ++d) {
    TPX_ASSIGN_OR_RETURN(out, Sum(out, 0, /*keepdim=*/false));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1 && out.size(static_cast<int64_t>(d)) != 1) {
      TPX_ASSIGN_OR_RETURN(out, Sum(out, static_cast<int64_t>(d), /*keepdim=*/true));
    }
  }
  return out;
}

absl::StatusOr<Tensor> Softmax(const Tensor& t, int64_t dim) {
  return SoftmaxImpl(t, dim, /*log=*/false, "Softmax");
}

absl::StatusOr<Tensor> LogSoftmax(const Tensor& t, int64_t dim) {
  return SoftmaxImpl(t, dim, /*log=*/true, "LogSoftmax");
}

}  // namespace tpx::ops
