// Reductions over one dim, SumTo (un-broadcast) and softmax: argument checks
// and output allocation; the loops are the device's kernels
// (core/device_kernels.h), which see the input as [outer, n, inner].
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/device_kernels.h"
#include "core/ops.h"
#include "core/ops_internal.h"
#include "core/status_macros.h"

namespace tpx::ops {
namespace {

using internal::CheckFloating;
using internal::CheckInput;

struct ReduceLayout {
  DeviceKernels* kernels = nullptr;
  Tensor input;  // contiguous
  int64_t dim = 0;
  int64_t outer = 1, n = 1, inner = 1;
  Shape out_shape;
};

absl::StatusOr<ReduceLayout> PrepareReduce(const Tensor& t, int64_t dim, bool keepdim,
                                           const char* op) {
  TPX_RETURN_IF_ERROR(CheckInput(t, op));
  ReduceLayout r;
  TPX_ASSIGN_OR_RETURN(r.kernels, internal::KernelsOf(op, {&t}));
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

absl::StatusOr<Tensor> RunReduce(const ReduceLayout& r, ReduceOp op, DType out_dtype) {
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(r.out_shape, out_dtype, r.input.device()));
  TPX_RETURN_IF_ERROR(r.kernels->Reduce(op, out, r.input, r.outer, r.n, r.inner));
  return out;
}

absl::StatusOr<Tensor> SumOrMean(const Tensor& t, int64_t dim, bool keepdim, bool mean,
                                 const char* op) {
  TPX_ASSIGN_OR_RETURN(ReduceLayout r, PrepareReduce(t, dim, keepdim, op));
  if (t.dtype() == DType::kBool || (mean && !IsFloatingPoint(t.dtype()))) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": unsupported dtype ", t.ToString()));
  }
  const DType out_dtype = IsFloatingPoint(t.dtype()) ? t.dtype() : DType::kI64;
  return RunReduce(r, mean ? ReduceOp::kMean : ReduceOp::kSum, out_dtype);
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
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(t.shape(), t.dtype(), t.device()));
  TPX_RETURN_IF_ERROR(r.kernels->Softmax(out, r.input, r.outer, r.n, r.inner, log));
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
  return RunReduce(r, ReduceOp::kMax, t.dtype());
}

absl::StatusOr<Tensor> Argmax(const Tensor& t, int64_t dim, bool keepdim) {
  TPX_ASSIGN_OR_RETURN(ReduceLayout r, PrepareMax(t, dim, keepdim, "Argmax"));
  return RunReduce(r, ReduceOp::kArgmax, DType::kI64);
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
