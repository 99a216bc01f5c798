// Differentiable reductions, softmax, matrix products and layer norm.
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd/functional.h"
#include "core/autograd/ops.h"
#include "core/autograd/ops_internal.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tpx::ag {

using internal::ApplyOp;
using internal::LambdaOp;
using internal::ReduceTo;
using internal::Tensors;

namespace {

// g (the gradient of a reduction over dim d) broadcast back to `shape` as a
// contiguous tensor, times `scale`.
absl::StatusOr<Tensor> SpreadOverDim(const Tensor& g, const Shape& shape, int64_t d, bool keepdim,
                                     double scale) {
  Tensor gk = g;
  if (!keepdim) {
    TPX_ASSIGN_OR_RETURN(gk, g.Unsqueeze(d));
  }
  TPX_ASSIGN_OR_RETURN(Tensor expanded, gk.Expand(shape));
  if (scale != 1.0) return ops::Scale(expanded, scale);
  return expanded.Contiguous();
}

absl::StatusOr<Variable> Reduce(const Variable& x, int64_t dim, bool keepdim, bool mean) {
  if (!x.defined())
    return absl::InvalidArgumentError(mean ? "Mean: undefined Variable"
                                           : "Sum: undefined Variable");
  TPX_ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim, x.dim(), mean ? "Mean" : "Sum"));
  return ApplyOp(
      mean ? "Mean" : "Sum",
      [d, keepdim, mean](LambdaOp&, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y,
                             mean ? ops::Mean(in[0], d, keepdim) : ops::Sum(in[0], d, keepdim));
        return Tensors{y};
      },
      [d, keepdim, mean](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        const Shape& shape = op.input_shape(0);
        double scale = mean ? 1.0 / static_cast<double>(shape[d]) : 1.0;
        TPX_ASSIGN_OR_RETURN(Tensor dx, SpreadOverDim(g[0], shape, d, keepdim, scale));
        return Tensors{dx};
      },
      {x});
}

absl::StatusOr<Variable> ReduceAll(const Variable& x, bool mean) {
  return ApplyOp(
      mean ? "MeanAll" : "SumAll",
      [mean](LambdaOp&, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::SumAll(in[0]));
        if (mean) {
          TPX_ASSIGN_OR_RETURN(y, ops::Scale(y, 1.0 / static_cast<double>(in[0].numel())));
        }
        return Tensors{y};
      },
      [mean](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        const Shape& shape = op.input_shape(0);
        TPX_ASSIGN_OR_RETURN(Tensor expanded, g[0].Expand(shape));
        double scale = mean ? 1.0 / static_cast<double>(NumElements(shape)) : 1.0;
        TPX_ASSIGN_OR_RETURN(Tensor dx, ops::Scale(expanded, scale));
        return Tensors{dx};
      },
      {x});
}

}  // namespace

absl::StatusOr<Variable> Sum(const Variable& x, int64_t dim, bool keepdim) {
  return Reduce(x, dim, keepdim, /*mean=*/false);
}
absl::StatusOr<Variable> Mean(const Variable& x, int64_t dim, bool keepdim) {
  return Reduce(x, dim, keepdim, /*mean=*/true);
}
absl::StatusOr<Variable> Sum(const Variable& x) { return ReduceAll(x, /*mean=*/false); }
absl::StatusOr<Variable> Mean(const Variable& x) { return ReduceAll(x, /*mean=*/true); }

absl::StatusOr<Variable> Max(const Variable& x, int64_t dim, bool keepdim) {
  if (!x.defined()) return absl::InvalidArgumentError("Max: undefined Variable");
  TPX_ASSIGN_OR_RETURN(int64_t d, NormalizeDim(dim, x.dim(), "Max"));
  return ApplyOp(
      "Max",
      [d, keepdim](LambdaOp& op, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::Max(in[0], d, keepdim));
        TPX_ASSIGN_OR_RETURN(Tensor arg, ops::Argmax(in[0], d, /*keepdim=*/true));
        op.Save({arg});
        return Tensors{y};
      },
      [d, keepdim](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        const Shape& shape = op.input_shape(0);
        // One-hot of the argmax along d: positions [1, .., n, .., 1] == argmax.
        TPX_ASSIGN_OR_RETURN(Tensor positions, Tensor::Arange(0.0, static_cast<double>(shape[d]),
                                                              1.0, DType::kI64, g[0].device()));
        Shape pos_shape(shape.size(), 1);
        pos_shape[d] = shape[d];
        TPX_ASSIGN_OR_RETURN(positions, positions.Reshape(pos_shape));
        TPX_ASSIGN_OR_RETURN(Tensor arg, op.Saved(0).To(DType::kI64));
        TPX_ASSIGN_OR_RETURN(Tensor one_hot, ops::Eq(positions, arg));
        Tensor gk = g[0];
        if (!keepdim) {
          TPX_ASSIGN_OR_RETURN(gk, g[0].Unsqueeze(d));
        }
        TPX_ASSIGN_OR_RETURN(Tensor zero, internal::ZeroLike0d(g[0]));
        TPX_ASSIGN_OR_RETURN(Tensor dx, ops::Where(one_hot, gk, zero));
        return Tensors{dx};
      },
      {x});
}

absl::StatusOr<Variable> Softmax(const Variable& x, int64_t dim) {
  return ApplyOp(
      "Softmax",
      [dim](LambdaOp& op, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::Softmax(in[0], dim));
        op.Save({y});
        return Tensors{y};
      },
      [dim](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor dx, SoftmaxBackward(g[0], op.Saved(0), dim));
        return Tensors{dx};
      },
      {x});
}

namespace {

// ScaledSoftmax from the unfused ops, for devices without the kernel:
// softmax(scale * x + mask), the mask -inf above the shifted diagonal.
absl::StatusOr<Tensor> ComposedScaledSoftmax(const Tensor& x, double scale, bool causal) {
  TPX_ASSIGN_OR_RETURN(Tensor z, ops::Scale(x, scale));
  if (causal) {
    const int64_t m = x.size(-2), n = x.size(-1);
    TPX_ASSIGN_OR_RETURN(Tensor rows, Tensor::Arange(0.0, static_cast<double>(m), 1.0,
                                                     DType::kF32, x.device()));
    TPX_ASSIGN_OR_RETURN(rows, rows.Reshape({m, 1}));
    TPX_ASSIGN_OR_RETURN(Tensor cols, Tensor::Arange(static_cast<double>(m - n),
                                                     static_cast<double>(m), 1.0, DType::kF32,
                                                     x.device()));
    TPX_ASSIGN_OR_RETURN(Tensor visible, ops::Ge(rows, cols));  // [m, n]: i >= j - (n - m)
    TPX_ASSIGN_OR_RETURN(Tensor neg_inf,
                         Tensor::Full({}, -std::numeric_limits<double>::infinity(), x.dtype(),
                                      x.device()));
    TPX_ASSIGN_OR_RETURN(z, ops::Where(visible, z, neg_inf));
  }
  return ops::Softmax(z, -1);
}

}  // namespace

absl::StatusOr<Variable> ScaledSoftmax(const Variable& x, double scale, bool causal) {
  if (!x.defined()) return absl::InvalidArgumentError("ScaledSoftmax: undefined Variable");
  return ApplyOp(
      "ScaledSoftmax",
      [scale, causal](LambdaOp& op, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        absl::StatusOr<Tensor> y = ops::ScaledSoftmax(in[0], scale, causal);
        if (absl::IsUnimplemented(y.status())) y = ComposedScaledSoftmax(in[0], scale, causal);
        TPX_RETURN_IF_ERROR(y.status());
        op.Save({*y});
        return Tensors{*y};
      },
      [scale](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        absl::StatusOr<Tensor> dx = ops::ScaledSoftmaxBackward(g[0], op.Saved(0), scale);
        if (absl::IsUnimplemented(dx.status())) {
          TPX_ASSIGN_OR_RETURN(Tensor d, SoftmaxBackward(g[0], op.Saved(0), -1));
          dx = ops::Scale(d, scale);
        }
        TPX_RETURN_IF_ERROR(dx.status());
        return Tensors{*dx};
      },
      {x});
}

absl::StatusOr<Variable> LogSoftmax(const Variable& x, int64_t dim) {
  return ApplyOp(
      "LogSoftmax",
      [dim](LambdaOp& op, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::LogSoftmax(in[0], dim));
        op.Save({y});
        return Tensors{y};
      },
      [dim](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor dx, LogSoftmaxBackward(g[0], op.Saved(0), dim));
        return Tensors{dx};
      },
      {x});
}

absl::StatusOr<Variable> Matmul(const Variable& a, const Variable& b, bool trans_a,
                                bool trans_b) {
  return ApplyOp(
      "Matmul",
      [trans_a, trans_b](LambdaOp& op, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::Matmul(in[0], in[1], trans_a, trans_b));
        op.Save(
            {op.needs_input_grad(1) ? in[0] : Tensor(), op.needs_input_grad(0) ? in[1] : Tensor()});
        return Tensors{y};
      },
      [trans_a, trans_b](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        // C = op(A) op(B): d op(A) = dC op(B)^T and d op(B) = op(A)^T dC,
        // each written so that the stored (untransposed) gradient comes out.
        Tensors d(2);
        const Tensor& a = op.Saved(0);
        const Tensor& b = op.Saved(1);
        if (op.needs_input_grad(0)) {
          if (trans_a && b.dim() == 2 && g[0].dim() == 3) {
            // No 2-D x batched product: form d op(A) and store it transposed.
            TPX_ASSIGN_OR_RETURN(Tensor dopa, ops::Matmul(g[0], b, false, !trans_b));
            TPX_ASSIGN_OR_RETURN(dopa, dopa.Transpose(1, 2));
            TPX_ASSIGN_OR_RETURN(d[0], dopa.Contiguous());
          } else if (trans_a) {
            TPX_ASSIGN_OR_RETURN(d[0], ops::Matmul(b, g[0], trans_b, /*trans_b=*/true));
          } else {
            TPX_ASSIGN_OR_RETURN(d[0], ops::Matmul(g[0], b, false, !trans_b));
          }
        }
        if (op.needs_input_grad(1)) {
          if (a.dim() == 3 && op.input_shape(1).size() == 2) {
            // b is shared by all batches: its gradient sums over them, one
            // product over the batch-flattened rows of op(a) and dC.
            Tensor rows = a;
            if (trans_a) {
              TPX_ASSIGN_OR_RETURN(Tensor at, a.Transpose(1, 2));
              TPX_ASSIGN_OR_RETURN(rows, at.Contiguous());
            }
            TPX_ASSIGN_OR_RETURN(Tensor a2, rows.Reshape({-1, rows.size(-1)}));
            TPX_ASSIGN_OR_RETURN(Tensor g2, g[0].Reshape({-1, g[0].size(-1)}));
            if (trans_b) {
              TPX_ASSIGN_OR_RETURN(d[1], ops::Matmul(g2, a2, /*trans_a=*/true, false));
            } else {
              TPX_ASSIGN_OR_RETURN(d[1], ops::Matmul(a2, g2, /*trans_a=*/true, false));
            }
          } else if (trans_b) {
            TPX_ASSIGN_OR_RETURN(d[1], ops::Matmul(g[0], a, /*trans_a=*/true, trans_a));
          } else {
            TPX_ASSIGN_OR_RETURN(d[1], ops::Matmul(a, g[0], !trans_a, false));
          }
        }
        return d;
      },
      {a, b});
}

absl::StatusOr<Variable> Linear(const Variable& x, const Variable& weight, const Variable& bias) {
  return ApplyOp(
      "Linear",
      [](LambdaOp& op, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::Linear(in[0], in[1], in[2]));
        op.Save(
            {op.needs_input_grad(1) ? in[0] : Tensor(), op.needs_input_grad(0) ? in[1] : Tensor()});
        return Tensors{y};
      },
      [](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(LinearGrads d,
                             LinearBackward(g[0], op.Saved(0), op.Saved(1),
                                            {op.needs_input_grad(0), op.needs_input_grad(1),
                                             op.needs_input_grad(2)}));
        return Tensors{d.input, d.weight, d.bias};
      },
      {x, weight, bias});
}

// The Function keeps LayerNormSaved in a member, released with the graph.
class LayerNormFunction final : public Function {
 public:
  explicit LayerNormFunction(double eps) : eps_(eps) {}
  std::string name() const override { return "LayerNorm"; }
  absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> in) override {
    TPX_ASSIGN_OR_RETURN(Tensor y, LayerNormForward(in[0], in[1], in[2], eps_, &saved_));
    SaveForBackward({in[1]});
    return std::vector<Tensor>{y};
  }
  absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor> g) override {
    TPX_ASSIGN_OR_RETURN(
        LayerNormGrads d,
        LayerNormBackward(g[0], saved_, saved(0),
                          {needs_input_grad(0), needs_input_grad(1), needs_input_grad(2)}));
    return std::vector<Tensor>{d.input, d.weight, d.bias};
  }

 protected:
  void ReleaseSavedState() override { saved_ = LayerNormSaved(); }

 private:
  double eps_;
  LayerNormSaved saved_;
};

absl::StatusOr<Variable> LayerNorm(const Variable& x, const Variable& weight, const Variable& bias,
                                   double eps) {
  return Apply(std::make_shared<LayerNormFunction>(eps), {x, weight, bias});
}

}  // namespace tpx::ag
