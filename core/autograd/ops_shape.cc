// Differentiable views, shape changes, concat/split and gather.
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/autograd/ops.h"
#include "core/autograd/ops_internal.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tpx::ag {

using internal::ApplyMultiOp;
using internal::ApplyOp;
using internal::LambdaOp;
using internal::ReduceTo;
using internal::Tensors;

absl::StatusOr<Variable> Reshape(const Variable& x, Shape shape) {
  return ApplyOp(
      "Reshape",
      [shape](LambdaOp&, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, in[0].Reshape(shape));
        return Tensors{y};
      },
      [](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor d, g[0].Reshape(op.input_shape(0)));
        return Tensors{d};
      },
      {x});
}

absl::StatusOr<Variable> Transpose(const Variable& x, int64_t dim0, int64_t dim1) {
  return ApplyOp(
      "Transpose",
      [dim0, dim1](LambdaOp&, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, in[0].Transpose(dim0, dim1));
        return Tensors{y};
      },
      [dim0, dim1](LambdaOp&, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor d, g[0].Transpose(dim0, dim1));
        return Tensors{d};
      },
      {x});
}

absl::StatusOr<Variable> Permute(const Variable& x, absl::Span<const int64_t> dims) {
  std::vector<int64_t> perm(dims.begin(), dims.end());
  return ApplyOp(
      "Permute",
      [perm](LambdaOp&, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, in[0].Permute(perm));
        return Tensors{y};
      },
      [perm](LambdaOp&, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        // Forward validated perm; invert it (negative dims count from the end).
        const int64_t rank = static_cast<int64_t>(perm.size());
        std::vector<int64_t> inverse(perm.size());
        for (int64_t i = 0; i < rank; ++i) {
          TPX_ASSIGN_OR_RETURN(int64_t p, NormalizeDim(perm[i], rank, "Permute"));
          inverse[p] = i;
        }
        TPX_ASSIGN_OR_RETURN(Tensor d, g[0].Permute(inverse));
        return Tensors{d};
      },
      {x});
}

absl::StatusOr<Variable> Unsqueeze(const Variable& x, int64_t dim) {
  return ApplyOp(
      "Unsqueeze",
      [dim](LambdaOp&, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, in[0].Unsqueeze(dim));
        return Tensors{y};
      },
      [](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor d, g[0].Reshape(op.input_shape(0)));
        return Tensors{d};
      },
      {x});
}

absl::StatusOr<Variable> Squeeze(const Variable& x, int64_t dim) {
  return ApplyOp(
      "Squeeze",
      [dim](LambdaOp&, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, in[0].Squeeze(dim));
        return Tensors{y};
      },
      [](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor d, g[0].Reshape(op.input_shape(0)));
        return Tensors{d};
      },
      {x});
}

absl::StatusOr<Variable> Expand(const Variable& x, Shape shape) {
  return ApplyOp(
      "Expand",
      [shape](LambdaOp&, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, in[0].Expand(shape));
        return Tensors{y};
      },
      [](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor d, ReduceTo(g[0], op.input_shape(0)));
        return Tensors{d};
      },
      {x});
}

absl::StatusOr<Variable> Narrow(const Variable& x, int64_t dim, int64_t start, int64_t length) {
  return ApplyOp(
      "Narrow",
      [dim, start, length](LambdaOp&, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, in[0].Narrow(dim, start, length));
        return Tensors{y};
      },
      [dim, start, length](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor d,
                             Tensor::Zeros(op.input_shape(0), g[0].dtype(), g[0].device()));
        TPX_ASSIGN_OR_RETURN(Tensor window, d.Narrow(dim, start, length));
        TPX_RETURN_IF_ERROR(window.CopyFrom(g[0]));
        return Tensors{d};
      },
      {x});
}

absl::StatusOr<Variable> Concat(absl::Span<const Variable> xs, int64_t dim) {
  return ApplyOp(
      "Concat",
      [dim](LambdaOp&, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::Concat(in, dim));
        return Tensors{y};
      },
      [dim](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim, g[0].dim(), "Concat"));
        std::vector<int64_t> sizes;
        for (size_t i = 0; i < op.num_inputs(); ++i) sizes.push_back(op.input_shape(i)[d]);
        return ops::Split(g[0], sizes, d);
      },
      xs);
}

absl::StatusOr<std::vector<Variable>> Split(const Variable& x, absl::Span<const int64_t> sizes,
                                            int64_t dim) {
  std::vector<int64_t> piece_sizes(sizes.begin(), sizes.end());
  return ApplyMultiOp(
      "Split",
      [piece_sizes, dim](LambdaOp&, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        return ops::Split(in[0], piece_sizes, dim);
      },
      [dim](LambdaOp&, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        // Pieces without a gradient arrive as zeros (materialized by the engine).
        TPX_ASSIGN_OR_RETURN(Tensor d, ops::Concat(g, dim));
        return Tensors{d};
      },
      {x});
}

absl::StatusOr<std::vector<Variable>> Chunk(const Variable& x, int64_t parts, int64_t dim) {
  if (!x.defined()) return absl::InvalidArgumentError("Chunk: undefined Variable");
  if (parts < 1) return absl::InvalidArgumentError(absl::StrCat("Chunk: parts = ", parts));
  TPX_ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim, x.dim(), "Chunk"));
  std::vector<int64_t> sizes = ops::SplitSizes(x.shape()[d], parts);
  return Split(x, sizes, d);
}

absl::StatusOr<Variable> IndexSelect(const Variable& x, int64_t dim, const Tensor& index) {
  return ApplyOp(
      "IndexSelect",
      [dim, index](LambdaOp& op, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::IndexSelect(in[0], dim, index));
        op.Save({index});
        return Tensors{y};
      },
      [dim](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor d,
                             Tensor::Zeros(op.input_shape(0), g[0].dtype(), g[0].device()));
        TPX_RETURN_IF_ERROR(ops::IndexAdd(d, dim, op.Saved(0), g[0]));
        return Tensors{d};
      },
      {x});
}

}  // namespace tpx::ag
