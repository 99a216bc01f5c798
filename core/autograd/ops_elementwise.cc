// Elementwise differentiable ops.
#include <vector>

#include "core/autograd/ops.h"
#include "core/autograd/ops_internal.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tpx::ag {

using internal::ApplyOp;
using internal::LambdaOp;
using internal::ReduceTo;
using internal::Tensors;

absl::StatusOr<Variable> Add(const Variable& a, const Variable& b) {
  return ApplyOp(
      "Add",
      [](LambdaOp&, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::Add(in[0], in[1]));
        return Tensors{y};
      },
      [](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        Tensors d(2);
        for (int i = 0; i < 2; ++i) {
          if (op.needs_input_grad(i)) {
            TPX_ASSIGN_OR_RETURN(d[i], ReduceTo(g[0], op.input_shape(i)));
          }
        }
        return d;
      },
      {a, b});
}

absl::StatusOr<Variable> Sub(const Variable& a, const Variable& b) {
  return ApplyOp(
      "Sub",
      [](LambdaOp&, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::Sub(in[0], in[1]));
        return Tensors{y};
      },
      [](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        Tensors d(2);
        if (op.needs_input_grad(0)) {
          TPX_ASSIGN_OR_RETURN(d[0], ReduceTo(g[0], op.input_shape(0)));
        }
        if (op.needs_input_grad(1)) {
          TPX_ASSIGN_OR_RETURN(Tensor neg, ops::Neg(g[0]));
          TPX_ASSIGN_OR_RETURN(d[1], ReduceTo(neg, op.input_shape(1)));
        }
        return d;
      },
      {a, b});
}

absl::StatusOr<Variable> Mul(const Variable& a, const Variable& b) {
  return ApplyOp(
      "Mul",
      [](LambdaOp& op, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::Mul(in[0], in[1]));
        // da needs b, db needs a.
        op.Save(
            {op.needs_input_grad(1) ? in[0] : Tensor(), op.needs_input_grad(0) ? in[1] : Tensor()});
        return Tensors{y};
      },
      [](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        Tensors d(2);
        for (int i = 0; i < 2; ++i) {
          if (!op.needs_input_grad(i)) continue;
          TPX_ASSIGN_OR_RETURN(Tensor full, ops::Mul(g[0], op.Saved(1 - i)));
          TPX_ASSIGN_OR_RETURN(d[i], ReduceTo(full, op.input_shape(i)));
        }
        return d;
      },
      {a, b});
}

absl::StatusOr<Variable> Div(const Variable& a, const Variable& b) {
  return ApplyOp(
      "Div",
      [](LambdaOp& op, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::Div(in[0], in[1]));
        op.Save({in[1], op.needs_input_grad(1) ? y : Tensor()});
        return Tensors{y};
      },
      [](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        Tensors d(2);
        const Tensor& b = op.Saved(0);
        TPX_ASSIGN_OR_RETURN(Tensor g_over_b, ops::Div(g[0], b));
        if (op.needs_input_grad(0)) {
          TPX_ASSIGN_OR_RETURN(d[0], ReduceTo(g_over_b, op.input_shape(0)));
        }
        if (op.needs_input_grad(1)) {
          // d(a/b)/db = -(a/b)/b = -y/b.
          TPX_ASSIGN_OR_RETURN(Tensor t, ops::Mul(g_over_b, op.Saved(1)));
          TPX_ASSIGN_OR_RETURN(Tensor neg, ops::Neg(t));
          TPX_ASSIGN_OR_RETURN(d[1], ReduceTo(neg, op.input_shape(1)));
        }
        return d;
      },
      {a, b});
}

absl::StatusOr<Variable> Scale(const Variable& x, double s) {
  return ApplyOp(
      "Scale",
      [s](LambdaOp&, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::Scale(in[0], s));
        return Tensors{y};
      },
      [s](LambdaOp&, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor d, ops::Scale(g[0], s));
        return Tensors{d};
      },
      {x});
}

absl::StatusOr<Variable> AddScalar(const Variable& x, double s) {
  return ApplyOp(
      "AddScalar",
      [s](LambdaOp&, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::AddScalar(in[0], s));
        return Tensors{y};
      },
      [](LambdaOp&, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        return Tensors{g[0]};
      },
      {x});
}

absl::StatusOr<Variable> Neg(const Variable& x) {
  return ApplyOp(
      "Neg",
      [](LambdaOp&, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::Neg(in[0]));
        return Tensors{y};
      },
      [](LambdaOp&, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor d, ops::Neg(g[0]));
        return Tensors{d};
      },
      {x});
}

absl::StatusOr<Variable> Exp(const Variable& x) {
  return ApplyOp(
      "Exp",
      [](LambdaOp& op, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::Exp(in[0]));
        op.Save({y});
        return Tensors{y};
      },
      [](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor d, ops::Mul(g[0], op.Saved(0)));
        return Tensors{d};
      },
      {x});
}

absl::StatusOr<Variable> Log(const Variable& x) {
  return ApplyOp(
      "Log",
      [](LambdaOp& op, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::Log(in[0]));
        op.Save({in[0]});
        return Tensors{y};
      },
      [](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor d, ops::Div(g[0], op.Saved(0)));
        return Tensors{d};
      },
      {x});
}

absl::StatusOr<Variable> Sqrt(const Variable& x) {
  return ApplyOp(
      "Sqrt",
      [](LambdaOp& op, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::Sqrt(in[0]));
        op.Save({y});
        return Tensors{y};
      },
      [](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor two_y, ops::Scale(op.Saved(0), 2.0));
        TPX_ASSIGN_OR_RETURN(Tensor d, ops::Div(g[0], two_y));
        return Tensors{d};
      },
      {x});
}

absl::StatusOr<Variable> Tanh(const Variable& x) {
  return ApplyOp(
      "Tanh",
      [](LambdaOp& op, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::Tanh(in[0]));
        op.Save({y});
        return Tensors{y};
      },
      [](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        const Tensor& y = op.Saved(0);
        TPX_ASSIGN_OR_RETURN(Tensor y2, ops::Mul(y, y));
        TPX_ASSIGN_OR_RETURN(Tensor gy2, ops::Mul(g[0], y2));
        TPX_ASSIGN_OR_RETURN(Tensor d, ops::Sub(g[0], gy2));  // g * (1 - y^2)
        return Tensors{d};
      },
      {x});
}

absl::StatusOr<Variable> Relu(const Variable& x) {
  return ApplyOp(
      "Relu",
      [](LambdaOp& op, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::Relu(in[0]));
        op.Save({y});
        return Tensors{y};
      },
      [](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        // Zero gradient where the output was clamped (x <= 0).
        TPX_ASSIGN_OR_RETURN(Tensor clamped, ops::EqScalar(op.Saved(0), 0.0));
        TPX_ASSIGN_OR_RETURN(Tensor d, ops::MaskedFill(g[0], clamped, 0.0));
        return Tensors{d};
      },
      {x});
}

absl::StatusOr<Variable> Gelu(const Variable& x) {
  return ApplyOp(
      "Gelu",
      [](LambdaOp& op, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::Gelu(in[0]));
        op.Save({in[0]});
        return Tensors{y};
      },
      [](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor d, ops::GeluBackward(g[0], op.Saved(0)));
        return Tensors{d};
      },
      {x});
}

absl::StatusOr<Variable> BiasGelu(const Variable& x, const Variable& bias) {
  return ApplyOp(
      "BiasGelu",
      [](LambdaOp& op, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        absl::StatusOr<Tensor> y = ops::BiasGelu(in[0], in[1]);
        if (absl::IsUnimplemented(y.status())) {
          TPX_ASSIGN_OR_RETURN(Tensor z, ops::Add(in[0], in[1]));
          y = ops::Gelu(z);
        }
        TPX_RETURN_IF_ERROR(y.status());
        op.Save({in[0], in[1]});
        return Tensors{*y};
      },
      [](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        const Tensor& x = op.Saved(0);
        const Tensor& bias = op.Saved(1);
        absl::StatusOr<ops::BiasGeluGradients> fused = ops::BiasGeluBackward(g[0], x, bias);
        if (!absl::IsUnimplemented(fused.status())) {
          TPX_RETURN_IF_ERROR(fused.status());
          return Tensors{fused->dx, fused->dbias};
        }
        TPX_ASSIGN_OR_RETURN(Tensor z, ops::Add(x, bias));
        TPX_ASSIGN_OR_RETURN(Tensor dx, ops::GeluBackward(g[0], z));
        TPX_ASSIGN_OR_RETURN(Tensor db, ops::SumTo(dx, bias.shape()));
        return Tensors{dx, db};
      },
      {x, bias});
}

absl::StatusOr<Variable> MaskedFill(const Variable& x, const Tensor& mask, double value) {
  return ApplyOp(
      "MaskedFill",
      [mask, value](LambdaOp& op, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::MaskedFill(in[0], mask, value));
        op.Save({mask});
        return Tensors{y};
      },
      [](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor d, ops::MaskedFill(g[0], op.Saved(0), 0.0));
        return Tensors{d};
      },
      {x});
}

absl::StatusOr<Variable> Where(const Tensor& cond, const Variable& a, const Variable& b) {
  return ApplyOp(
      "Where",
      [cond](LambdaOp& op, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, ops::Where(cond, in[0], in[1]));
        op.Save({cond});
        return Tensors{y};
      },
      [](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        Tensors d(2);
        const Tensor& cond = op.Saved(0);
        TPX_ASSIGN_OR_RETURN(Tensor zero, internal::ZeroLike0d(g[0]));
        if (op.needs_input_grad(0)) {
          TPX_ASSIGN_OR_RETURN(Tensor full, ops::Where(cond, g[0], zero));
          TPX_ASSIGN_OR_RETURN(d[0], ReduceTo(full, op.input_shape(0)));
        }
        if (op.needs_input_grad(1)) {
          TPX_ASSIGN_OR_RETURN(Tensor full, ops::Where(cond, zero, g[0]));
          TPX_ASSIGN_OR_RETURN(d[1], ReduceTo(full, op.input_shape(1)));
        }
        return d;
      },
      {a, b});
}

absl::StatusOr<Variable> To(const Variable& x, DType dtype) {
  return ApplyOp(
      "To",
      [dtype](LambdaOp&, absl::Span<const Tensor> in) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor y, in[0].To(dtype));
        return Tensors{y};
      },
      [](LambdaOp& op, absl::Span<const Tensor> g) -> absl::StatusOr<Tensors> {
        TPX_ASSIGN_OR_RETURN(Tensor d, g[0].To(op.input_dtype(0)));
        return Tensors{d};
      },
      {x});
}

}  // namespace tpx::ag
