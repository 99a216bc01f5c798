// Elementwise ops: argument checks, broadcasting and output allocation; the
// loops are the device's kernels (core/device_kernels.h).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/device_kernels.h"
#include "core/ops.h"
#include "core/ops_internal.h"
#include "core/status_macros.h"

namespace tpx::ops {
namespace {

using internal::CheckBool;
using internal::CheckFloating;
using internal::CheckInput;
using internal::CheckSameDType;
using internal::KernelsOf;

const char* ArithName(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "Add";
    case BinaryOp::kSub: return "Sub";
    case BinaryOp::kMul: return "Mul";
    default: return "Div";
  }
}

absl::StatusOr<Shape> CheckBinary(const Tensor& a, const Tensor& b, const char* op) {
  TPX_RETURN_IF_ERROR(CheckInput(a, op, "first input"));
  TPX_RETURN_IF_ERROR(CheckInput(b, op, "second input"));
  TPX_RETURN_IF_ERROR(CheckSameDType(a, b, op));
  return BroadcastShapes(a.shape(), b.shape(), op);
}

// out = a (op) b with a and b broadcast to `shape`; out has `out_dtype`.
absl::StatusOr<Tensor> BroadcastBinary(BinaryOp op, const Tensor& a, const Tensor& b,
                                       const Shape& shape, DType out_dtype, double alpha,
                                       const char* name) {
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k, KernelsOf(name, {&a, &b}));
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(shape, out_dtype, a.device()));
  TPX_ASSIGN_OR_RETURN(Tensor ae, a.Expand(shape));
  TPX_ASSIGN_OR_RETURN(Tensor be, b.Expand(shape));
  TPX_RETURN_IF_ERROR(k->Binary(op, out, ae, be, alpha));
  return out;
}

// a (op) alpha * b; alpha only used by kAdd.
absl::StatusOr<Tensor> Arithmetic(const Tensor& a, const Tensor& b, BinaryOp op, double alpha) {
  const char* name = ArithName(op);
  TPX_ASSIGN_OR_RETURN(Shape shape, CheckBinary(a, b, name));
  if (a.dtype() == DType::kBool || (op == BinaryOp::kDiv && !IsFloatingPoint(a.dtype()))) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": unsupported dtype ", a.ToString()));
  }
  return BroadcastBinary(op, a, b, shape, a.dtype(), alpha, name);
}

absl::StatusOr<Tensor> Comparison(const Tensor& a, const Tensor& b, BinaryOp op,
                                  const char* name) {
  TPX_ASSIGN_OR_RETURN(Shape shape, CheckBinary(a, b, name));
  return BroadcastBinary(op, a, b, shape, DType::kBool, 1.0, name);
}

// A 0-d tensor of t's dtype and device holding s, for scalar operands.
absl::StatusOr<Tensor> ScalarLike(const Tensor& t, double s) {
  return Tensor::Full({}, s, t.dtype(), t.device());
}

// out = op(t) with out of t's shape and `out_dtype`.
absl::StatusOr<Tensor> UnaryOut(UnaryOp op, const Tensor& t, DType out_dtype, double scalar,
                                const char* name) {
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k, KernelsOf(name, {&t}));
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(t.shape(), out_dtype, t.device()));
  TPX_RETURN_IF_ERROR(k->Unary(op, out, t, scalar));
  return out;
}

absl::StatusOr<Tensor> FloatUnary(const Tensor& t, UnaryOp op, const char* name) {
  TPX_RETURN_IF_ERROR(CheckInput(t, name));
  TPX_RETURN_IF_ERROR(CheckFloating(t, name));
  return UnaryOut(op, t, t.dtype(), 0.0, name);
}

absl::StatusOr<Tensor> CompareScalar(const Tensor& t, double s, UnaryOp op, const char* name) {
  TPX_RETURN_IF_ERROR(CheckInput(t, name));
  return UnaryOut(op, t, DType::kBool, s, name);
}

absl::StatusOr<Tensor> Logical(const Tensor& a, const Tensor& b, BinaryOp op, const char* name) {
  TPX_ASSIGN_OR_RETURN(Shape shape, CheckBinary(a, b, name));
  TPX_RETURN_IF_ERROR(CheckBool(a, name, "first input"));
  return BroadcastBinary(op, a, b, shape, DType::kBool, 1.0, name);
}

}  // namespace

absl::StatusOr<Shape> BroadcastShapes(absl::Span<const int64_t> a, absl::Span<const int64_t> b,
                                      const char* op) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t x = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t y = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (x != y && x != 1 && y != 1) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": shapes ", ShapeString(a), " and ",
                                                     ShapeString(b), " are not broadcastable"));
    }
    out[i] = x == 1 ? y : x;
  }
  return out;
}

absl::StatusOr<Tensor> Add(const Tensor& a, const Tensor& b) {
  return Arithmetic(a, b, BinaryOp::kAdd, 1.0);
}
absl::StatusOr<Tensor> Sub(const Tensor& a, const Tensor& b) {
  return Arithmetic(a, b, BinaryOp::kSub, 1.0);
}
absl::StatusOr<Tensor> Mul(const Tensor& a, const Tensor& b) {
  return Arithmetic(a, b, BinaryOp::kMul, 1.0);
}
absl::StatusOr<Tensor> Div(const Tensor& a, const Tensor& b) {
  return Arithmetic(a, b, BinaryOp::kDiv, 1.0);
}
absl::StatusOr<Tensor> AddScaled(const Tensor& a, const Tensor& b, double alpha) {
  return Arithmetic(a, b, BinaryOp::kAdd, alpha);
}

absl::StatusOr<Tensor> Scale(const Tensor& t, double s) {
  TPX_RETURN_IF_ERROR(CheckInput(t, "Scale"));
  TPX_ASSIGN_OR_RETURN(Tensor scalar, ScalarLike(t, s));
  return Arithmetic(t, scalar, BinaryOp::kMul, 1.0);
}

absl::StatusOr<Tensor> AddScalar(const Tensor& t, double s) {
  TPX_RETURN_IF_ERROR(CheckInput(t, "AddScalar"));
  if (!IsFloatingPoint(t.dtype()) && s != std::trunc(s)) {
    return absl::InvalidArgumentError(absl::StrCat("AddScalar: non-integer ", s, " added to ",
                                                   t.ToString()));
  }
  TPX_ASSIGN_OR_RETURN(Tensor scalar, ScalarLike(t, s));
  return Arithmetic(t, scalar, BinaryOp::kAdd, 1.0);
}

absl::Status AddInPlace(const Tensor& dst, const Tensor& src, double alpha) {
  TPX_RETURN_IF_ERROR(CheckInput(dst, "AddInPlace", "destination"));
  TPX_RETURN_IF_ERROR(CheckInput(src, "AddInPlace", "source"));
  TPX_RETURN_IF_ERROR(CheckFloating(dst, "AddInPlace", "destination"));
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k, KernelsOf("AddInPlace", {&dst, &src}));
  TPX_ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(dst.shape(), src.shape(), "AddInPlace"));
  if (shape != dst.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("AddInPlace: source shape ",
                                                   ShapeString(src.shape()),
                                                   " does not broadcast to destination shape ",
                                                   ShapeString(dst.shape())));
  }
  TPX_ASSIGN_OR_RETURN(Tensor se, src.Expand(shape));
  return k->Binary(BinaryOp::kAdd, dst, dst, se, alpha);
}

absl::Status ScaleInPlace(const Tensor& dst, double s) {
  TPX_RETURN_IF_ERROR(CheckInput(dst, "ScaleInPlace"));
  TPX_RETURN_IF_ERROR(CheckFloating(dst, "ScaleInPlace"));
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k, KernelsOf("ScaleInPlace", {&dst}));
  return k->Unary(UnaryOp::kScale, dst, dst, s);
}

absl::Status Fill(const Tensor& dst, double value) {
  TPX_RETURN_IF_ERROR(CheckInput(dst, "Fill"));
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k, KernelsOf("Fill", {&dst}));
  return k->Fill(dst, value);
}

absl::StatusOr<Tensor> Neg(const Tensor& t) { return FloatUnary(t, UnaryOp::kNeg, "Neg"); }
absl::StatusOr<Tensor> Exp(const Tensor& t) { return FloatUnary(t, UnaryOp::kExp, "Exp"); }
absl::StatusOr<Tensor> Log(const Tensor& t) { return FloatUnary(t, UnaryOp::kLog, "Log"); }
absl::StatusOr<Tensor> Sqrt(const Tensor& t) { return FloatUnary(t, UnaryOp::kSqrt, "Sqrt"); }
absl::StatusOr<Tensor> Tanh(const Tensor& t) { return FloatUnary(t, UnaryOp::kTanh, "Tanh"); }
absl::StatusOr<Tensor> Relu(const Tensor& t) { return FloatUnary(t, UnaryOp::kRelu, "Relu"); }
absl::StatusOr<Tensor> Gelu(const Tensor& x) { return FloatUnary(x, UnaryOp::kGelu, "Gelu"); }

absl::StatusOr<Tensor> GeluBackward(const Tensor& grad, const Tensor& x) {
  TPX_RETURN_IF_ERROR(CheckInput(grad, "GeluBackward", "grad"));
  TPX_RETURN_IF_ERROR(CheckInput(x, "GeluBackward", "x"));
  TPX_RETURN_IF_ERROR(CheckFloating(x, "GeluBackward", "x"));
  TPX_RETURN_IF_ERROR(CheckSameDType(grad, x, "GeluBackward"));
  if (grad.shape() != x.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("GeluBackward: grad shape ",
                                                   ShapeString(grad.shape()),
                                                   " differs from x shape ",
                                                   ShapeString(x.shape())));
  }
  return BroadcastBinary(BinaryOp::kGeluBackward, grad, x, x.shape(), x.dtype(), 1.0,
                         "GeluBackward");
}

absl::StatusOr<Tensor> Eq(const Tensor& a, const Tensor& b) {
  return Comparison(a, b, BinaryOp::kEq, "Eq");
}
absl::StatusOr<Tensor> Lt(const Tensor& a, const Tensor& b) {
  return Comparison(a, b, BinaryOp::kLt, "Lt");
}
absl::StatusOr<Tensor> Ge(const Tensor& a, const Tensor& b) {
  return Comparison(a, b, BinaryOp::kGe, "Ge");
}

absl::StatusOr<Tensor> LtScalar(const Tensor& t, double s) {
  return CompareScalar(t, s, UnaryOp::kLtScalar, "LtScalar");
}
absl::StatusOr<Tensor> GeScalar(const Tensor& t, double s) {
  return CompareScalar(t, s, UnaryOp::kGeScalar, "GeScalar");
}
absl::StatusOr<Tensor> EqScalar(const Tensor& t, double s) {
  return CompareScalar(t, s, UnaryOp::kEqScalar, "EqScalar");
}

absl::StatusOr<Tensor> LogicalAnd(const Tensor& a, const Tensor& b) {
  return Logical(a, b, BinaryOp::kAnd, "LogicalAnd");
}
absl::StatusOr<Tensor> LogicalOr(const Tensor& a, const Tensor& b) {
  return Logical(a, b, BinaryOp::kOr, "LogicalOr");
}
absl::StatusOr<Tensor> LogicalNot(const Tensor& t) {
  TPX_RETURN_IF_ERROR(CheckInput(t, "LogicalNot"));
  TPX_RETURN_IF_ERROR(CheckBool(t, "LogicalNot", "input"));
  return UnaryOut(UnaryOp::kNot, t, DType::kBool, 0.0, "LogicalNot");
}

absl::StatusOr<Tensor> MaskedFill(const Tensor& t, const Tensor& mask, double value) {
  TPX_RETURN_IF_ERROR(CheckInput(t, "MaskedFill"));
  TPX_RETURN_IF_ERROR(CheckInput(mask, "MaskedFill", "mask"));
  TPX_RETURN_IF_ERROR(CheckBool(mask, "MaskedFill", "mask"));
  TPX_ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(t.shape(), mask.shape(), "MaskedFill"));
  if (shape != t.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("MaskedFill: mask shape ",
                                                   ShapeString(mask.shape()),
                                                   " does not broadcast to input shape ",
                                                   ShapeString(t.shape())));
  }
  TPX_ASSIGN_OR_RETURN(Tensor fill, ScalarLike(t, value));
  return Where(mask, fill, t);
}

absl::StatusOr<Tensor> Where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  TPX_RETURN_IF_ERROR(CheckInput(cond, "Where", "condition"));
  TPX_RETURN_IF_ERROR(CheckBool(cond, "Where", "condition"));
  TPX_ASSIGN_OR_RETURN(Shape ab, CheckBinary(a, b, "Where"));
  TPX_ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(cond.shape(), ab, "Where"));
  TPX_ASSIGN_OR_RETURN(DeviceKernels * k, KernelsOf("Where", {&cond, &a, &b}));
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(shape, a.dtype(), a.device()));
  TPX_ASSIGN_OR_RETURN(Tensor ce, cond.Expand(shape));
  TPX_ASSIGN_OR_RETURN(Tensor ae, a.Expand(shape));
  TPX_ASSIGN_OR_RETURN(Tensor be, b.Expand(shape));
  TPX_RETURN_IF_ERROR(k->Where(out, ce, ae, be));
  return out;
}

}  // namespace tpx::ops
