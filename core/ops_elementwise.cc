// Elementwise ops: broadcasting binary/ternary kernels, unary math, in-place
// accumulation.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "core/cpu/loops.h"
#include "core/cpu/vec_math.h"
#include "core/ops.h"
#include "core/ops_internal.h"
#include "core/status_macros.h"

namespace tpx::ops {
namespace {

using internal::CheckBool;
using internal::CheckFloating;
using internal::CheckInput;
using internal::CheckSameDType;

// out = f(a, b) elementwise, with a and b broadcast to out's shape. f gets
// the loaded values (float for floating types) and returns a value that is
// converted to TO. Contiguous rows and scalar-broadcast rows run tight loops.
template <typename TO, typename TA, typename TB, typename F>
void BinaryKernel(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  const std::vector<int64_t> sa = cpu::BroadcastStrides(a.shape(), a.strides(), out.shape());
  const std::vector<int64_t> sb = cpu::BroadcastStrides(b.shape(), b.strides(), out.shape());
  cpu::ForEachRow<3>(
      out.shape(),
      {static_cast<char*>(out.raw_data()), static_cast<char*>(a.raw_data()),
       static_cast<char*>(b.raw_data())},
      {out.strides(), sa, sb}, {sizeof(TO), sizeof(TA), sizeof(TB)},
      [&f](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t n) {
        TO* o = reinterpret_cast<TO*>(p[0]);
        const TA* x = reinterpret_cast<const TA*>(p[1]);
        const TB* y = reinterpret_cast<const TB*>(p[2]);
        if (s[0] == sizeof(TO) && s[1] == sizeof(TA) && s[2] == sizeof(TB)) {
          for (int64_t i = 0; i < n; ++i) o[i] = cpu::StoreAs<TO>(f(cpu::Load(x[i]), cpu::Load(y[i])));
        } else if (s[0] == sizeof(TO) && s[1] == sizeof(TA) && s[2] == 0) {
          const auto yv = cpu::Load(*y);
          for (int64_t i = 0; i < n; ++i) o[i] = cpu::StoreAs<TO>(f(cpu::Load(x[i]), yv));
        } else if (s[0] == sizeof(TO) && s[1] == 0 && s[2] == sizeof(TB)) {
          const auto xv = cpu::Load(*x);
          for (int64_t i = 0; i < n; ++i) o[i] = cpu::StoreAs<TO>(f(xv, cpu::Load(y[i])));
        } else {
          for (int64_t i = 0; i < n; ++i) {
            *reinterpret_cast<TO*>(p[0] + i * s[0]) =
                cpu::StoreAs<TO>(f(cpu::Load(*reinterpret_cast<const TA*>(p[1] + i * s[1])),
                                   cpu::Load(*reinterpret_cast<const TB*>(p[2] + i * s[2]))));
          }
        }
      });
}

// out = f(x) elementwise (same shapes).
template <typename TO, typename TI, typename F>
void UnaryKernel(const Tensor& out, const Tensor& in, F f) {
  cpu::ForEachRow<2>(
      out.shape(), {static_cast<char*>(out.raw_data()), static_cast<char*>(in.raw_data())},
      {out.strides(), in.strides()}, {sizeof(TO), sizeof(TI)},
      [&f](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) {
        if (s[0] == sizeof(TO) && s[1] == sizeof(TI)) {
          TO* o = reinterpret_cast<TO*>(p[0]);
          const TI* x = reinterpret_cast<const TI*>(p[1]);
          for (int64_t i = 0; i < n; ++i) o[i] = cpu::StoreAs<TO>(f(cpu::Load(x[i])));
        } else {
          for (int64_t i = 0; i < n; ++i) {
            *reinterpret_cast<TO*>(p[0] + i * s[0]) =
                cpu::StoreAs<TO>(f(cpu::Load(*reinterpret_cast<const TI*>(p[1] + i * s[1]))));
          }
        }
      });
}

enum class Arith { kAdd, kSub, kMul, kDiv };

const char* ArithName(Arith op) {
  switch (op) {
    case Arith::kAdd: return "Add";
    case Arith::kSub: return "Sub";
    case Arith::kMul: return "Mul";
    case Arith::kDiv: return "Div";
  }
  return "?";
}

absl::StatusOr<Shape> CheckBinary(const Tensor& a, const Tensor& b, const char* op) {
  TPX_RETURN_IF_ERROR(CheckInput(a, op, "first input"));
  TPX_RETURN_IF_ERROR(CheckInput(b, op, "second input"));
  TPX_RETURN_IF_ERROR(CheckSameDType(a, b, op));
  return BroadcastShapes(a.shape(), b.shape(), op);
}

// a (op) alpha * b. alpha only used by kAdd.
absl::StatusOr<Tensor> Arithmetic(const Tensor& a, const Tensor& b, Arith op, double alpha) {
  const char* name = ArithName(op);
  TPX_ASSIGN_OR_RETURN(Shape shape, CheckBinary(a, b, name));
  if (a.dtype() == DType::kBool || (op == Arith::kDiv && !IsFloatingPoint(a.dtype()))) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": unsupported dtype ", a.ToString()));
  }
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(shape, a.dtype()));
  cpu::DispatchDType(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      using C = cpu::ComputeType<T>;
      const C al = static_cast<C>(alpha);
      switch (op) {
        case Arith::kAdd:
          if (alpha == 1.0) {
            BinaryKernel<T, T, T>(out, a, b, [](C x, C y) { return x + y; });
          } else {
            BinaryKernel<T, T, T>(out, a, b, [al](C x, C y) { return x + al * y; });
          }
          break;
        case Arith::kSub: BinaryKernel<T, T, T>(out, a, b, [](C x, C y) { return x - y; }); break;
        case Arith::kMul: BinaryKernel<T, T, T>(out, a, b, [](C x, C y) { return x * y; }); break;
        case Arith::kDiv: BinaryKernel<T, T, T>(out, a, b, [](C x, C y) { return x / y; }); break;
      }
    }
  });
  return out;
}

enum class Cmp { kEq, kLt, kGe };

template <typename C>
bool Compare(Cmp cmp, C x, C y) {
  switch (cmp) {
    case Cmp::kEq: return x == y;
    case Cmp::kLt: return x < y;
    case Cmp::kGe: return x >= y;
  }
  return false;
}

absl::StatusOr<Tensor> Comparison(const Tensor& a, const Tensor& b, Cmp cmp, const char* name) {
  TPX_ASSIGN_OR_RETURN(Shape shape, CheckBinary(a, b, name));
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(shape, DType::kBool));
  cpu::DispatchDType(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = cpu::ComputeType<T>;
    BinaryKernel<bool, T, T>(out, a, b, [cmp](C x, C y) { return Compare(cmp, x, y); });
  });
  return out;
}

// A 0-d tensor of t's dtype holding s, for scalar right-hand sides.
absl::StatusOr<Tensor> ScalarLike(const Tensor& t, double s) {
  return Tensor::Scalar(s, t.dtype());
}

template <typename F>
absl::StatusOr<Tensor> FloatUnary(const Tensor& t, const char* name, F f) {
  TPX_RETURN_IF_ERROR(CheckInput(t, name));
  TPX_RETURN_IF_ERROR(CheckFloating(t, name));
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(t.shape(), t.dtype()));
  cpu::DispatchFloat(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    UnaryKernel<T, T>(out, t, f);
  });
  return out;
}

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

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
  return Arithmetic(a, b, Arith::kAdd, 1.0);
}
absl::StatusOr<Tensor> Sub(const Tensor& a, const Tensor& b) {
  return Arithmetic(a, b, Arith::kSub, 1.0);
}
absl::StatusOr<Tensor> Mul(const Tensor& a, const Tensor& b) {
  return Arithmetic(a, b, Arith::kMul, 1.0);
}
absl::StatusOr<Tensor> Div(const Tensor& a, const Tensor& b) {
  return Arithmetic(a, b, Arith::kDiv, 1.0);
}
absl::StatusOr<Tensor> AddScaled(const Tensor& a, const Tensor& b, double alpha) {
  return Arithmetic(a, b, Arith::kAdd, alpha);
}

absl::StatusOr<Tensor> Scale(const Tensor& t, double s) {
  TPX_RETURN_IF_ERROR(CheckInput(t, "Scale"));
  TPX_ASSIGN_OR_RETURN(Tensor scalar, ScalarLike(t, s));
  return Arithmetic(t, scalar, Arith::kMul, 1.0);
}

absl::StatusOr<Tensor> AddScalar(const Tensor& t, double s) {
  TPX_RETURN_IF_ERROR(CheckInput(t, "AddScalar"));
  if (!IsFloatingPoint(t.dtype()) && s != std::trunc(s)) {
    return absl::InvalidArgumentError(absl::StrCat("AddScalar: non-integer ", s, " added to ",
                                                   t.ToString()));
  }
  TPX_ASSIGN_OR_RETURN(Tensor scalar, ScalarLike(t, s));
  return Arithmetic(t, scalar, Arith::kAdd, 1.0);
}

absl::Status AddInPlace(const Tensor& dst, const Tensor& src, double alpha) {
  TPX_RETURN_IF_ERROR(CheckInput(dst, "AddInPlace", "destination"));
  TPX_RETURN_IF_ERROR(CheckInput(src, "AddInPlace", "source"));
  TPX_RETURN_IF_ERROR(CheckFloating(dst, "AddInPlace", "destination"));
  TPX_ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(dst.shape(), src.shape(), "AddInPlace"));
  if (shape != dst.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("AddInPlace: source shape ",
                                                   ShapeString(src.shape()),
                                                   " does not broadcast to destination shape ",
                                                   ShapeString(dst.shape())));
  }
  const float al = static_cast<float>(alpha);
  cpu::DispatchFloat(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    cpu::DispatchDType(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      if (alpha == 1.0) {
        BinaryKernel<D, D, S>(dst, dst, src,
                              [](float x, auto y) { return x + static_cast<float>(y); });
      } else {
        BinaryKernel<D, D, S>(dst, dst, src,
                              [al](float x, auto y) { return x + al * static_cast<float>(y); });
      }
    });
  });
  return absl::OkStatus();
}

absl::Status ScaleInPlace(const Tensor& dst, double s) {
  TPX_RETURN_IF_ERROR(CheckInput(dst, "ScaleInPlace"));
  TPX_RETURN_IF_ERROR(CheckFloating(dst, "ScaleInPlace"));
  const float sf = static_cast<float>(s);
  cpu::DispatchFloat(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    UnaryKernel<T, T>(dst, dst, [sf](float x) { return x * sf; });
  });
  return absl::OkStatus();
}

absl::Status Fill(const Tensor& dst, double value) {
  TPX_RETURN_IF_ERROR(CheckInput(dst, "Fill"));
  cpu::DispatchDType(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T v = cpu::StoreAs<T>(value);
    cpu::ForEachRow<1>(dst.shape(), {static_cast<char*>(dst.raw_data())}, {dst.strides()},
                       {sizeof(T)}, [v](std::array<char*, 1> p, std::array<int64_t, 1> s,
                                        int64_t n) {
                         for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
                       });
  });
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Neg(const Tensor& t) {
  return FloatUnary(t, "Neg", [](float x) { return -x; });
}
absl::StatusOr<Tensor> Exp(const Tensor& t) {
  return FloatUnary(t, "Exp", [](float x) { return cpu::Exp(x); });
}
absl::StatusOr<Tensor> Log(const Tensor& t) {
  return FloatUnary(t, "Log", [](float x) { return std::log(x); });
}
absl::StatusOr<Tensor> Sqrt(const Tensor& t) {
  return FloatUnary(t, "Sqrt", [](float x) { return std::sqrt(x); });
}
absl::StatusOr<Tensor> Tanh(const Tensor& t) {
  return FloatUnary(t, "Tanh", [](float x) { return std::tanh(x); });
}
absl::StatusOr<Tensor> Relu(const Tensor& t) {
  return FloatUnary(t, "Relu", [](float x) { return x > 0.0f ? x : (x == x ? 0.0f : x); });
}
absl::StatusOr<Tensor> Gelu(const Tensor& x) {
  return FloatUnary(x, "Gelu",
                    [](float v) { return 0.5f * v * (1.0f + std::erf(v * kInvSqrt2)); });
}

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
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(x.shape(), x.dtype()));
  cpu::DispatchFloat(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    BinaryKernel<T, T, T>(out, grad, x, [](float g, float v) {
      const float cdf = 0.5f * (1.0f + std::erf(v * kInvSqrt2));
      const float pdf = kInvSqrt2Pi * cpu::Exp(-0.5f * v * v);
      return g * (cdf + v * pdf);
    });
  });
  return out;
}

absl::StatusOr<Tensor> Eq(const Tensor& a, const Tensor& b) {
  return Comparison(a, b, Cmp::kEq, "Eq");
}
absl::StatusOr<Tensor> Lt(const Tensor& a, const Tensor& b) {
  return Comparison(a, b, Cmp::kLt, "Lt");
}
absl::StatusOr<Tensor> Ge(const Tensor& a, const Tensor& b) {
  return Comparison(a, b, Cmp::kGe, "Ge");
}

namespace {
// t (cmp) s with s compared in double so i64 ids compare exactly.
absl::StatusOr<Tensor> CompareScalar(const Tensor& t, double s, Cmp cmp, const char* name) {
  TPX_RETURN_IF_ERROR(CheckInput(t, name));
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(t.shape(), DType::kBool));
  cpu::DispatchDType(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    UnaryKernel<bool, T>(out, t, [s, cmp](auto x) {
      return Compare<double>(cmp, static_cast<double>(x), s);
    });
  });
  return out;
}
}  // namespace

absl::StatusOr<Tensor> LtScalar(const Tensor& t, double s) {
  return CompareScalar(t, s, Cmp::kLt, "LtScalar");
}
absl::StatusOr<Tensor> GeScalar(const Tensor& t, double s) {
  return CompareScalar(t, s, Cmp::kGe, "GeScalar");
}
absl::StatusOr<Tensor> EqScalar(const Tensor& t, double s) {
  return CompareScalar(t, s, Cmp::kEq, "EqScalar");
}

namespace {
absl::StatusOr<Tensor> Logical(const Tensor& a, const Tensor& b, bool is_and, const char* name) {
  TPX_ASSIGN_OR_RETURN(Shape shape, CheckBinary(a, b, name));
  TPX_RETURN_IF_ERROR(CheckBool(a, name, "first input"));
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(shape, DType::kBool));
  if (is_and) {
    BinaryKernel<bool, bool, bool>(out, a, b, [](bool x, bool y) { return x && y; });
  } else {
    BinaryKernel<bool, bool, bool>(out, a, b, [](bool x, bool y) { return x || y; });
  }
  return out;
}
}  // namespace

absl::StatusOr<Tensor> LogicalAnd(const Tensor& a, const Tensor& b) {
  return Logical(a, b, true, "LogicalAnd");
}
absl::StatusOr<Tensor> LogicalOr(const Tensor& a, const Tensor& b) {
  return Logical(a, b, false, "LogicalOr");
}
absl::StatusOr<Tensor> LogicalNot(const Tensor& t) {
  TPX_RETURN_IF_ERROR(CheckInput(t, "LogicalNot"));
  TPX_RETURN_IF_ERROR(CheckBool(t, "LogicalNot", "input"));
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(t.shape(), DType::kBool));
  UnaryKernel<bool, bool>(out, t, [](bool x) { return !x; });
  return out;
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
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(t.shape(), t.dtype()));
  cpu::DispatchDType(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T fill = cpu::StoreAs<T>(value);
    const auto fill_loaded = cpu::Load(fill);
    BinaryKernel<T, T, bool>(out, t, mask, [fill_loaded](auto x, bool m) {
      return m ? fill_loaded : x;
    });
  });
  return out;
}

absl::StatusOr<Tensor> Where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  TPX_RETURN_IF_ERROR(CheckInput(cond, "Where", "condition"));
  TPX_RETURN_IF_ERROR(CheckBool(cond, "Where", "condition"));
  TPX_ASSIGN_OR_RETURN(Shape ab, CheckBinary(a, b, "Where"));
  TPX_ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(cond.shape(), ab, "Where"));
  TPX_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(shape, a.dtype()));
  const auto sc = cpu::BroadcastStrides(cond.shape(), cond.strides(), shape);
  const auto sa = cpu::BroadcastStrides(a.shape(), a.strides(), shape);
  const auto sb = cpu::BroadcastStrides(b.shape(), b.strides(), shape);
  cpu::DispatchDType(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    cpu::ForEachRow<4>(
        shape,
        {static_cast<char*>(out.raw_data()), static_cast<char*>(cond.raw_data()),
         static_cast<char*>(a.raw_data()), static_cast<char*>(b.raw_data())},
        {out.strides(), sc, sa, sb}, {sizeof(T), 1, sizeof(T), sizeof(T)},
        [](std::array<char*, 4> p, std::array<int64_t, 4> s, int64_t n) {
          for (int64_t i = 0; i < n; ++i) {
            const bool c = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
            *reinterpret_cast<T*>(p[0] + i * s[0]) =
                *reinterpret_cast<const T*>(p[c ? 2 : 3] + i * s[c ? 2 : 3]);
          }
        });
  });
  return out;
}

}  // namespace tpx::ops
