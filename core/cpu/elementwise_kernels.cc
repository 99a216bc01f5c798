// CPU DeviceKernels: broadcasting binary ops, unary math, where.
#include <cmath>
#include <type_traits>

#include "core/cpu/cpu_kernels.h"
#include "core/cpu/loops.h"
#include "core/cpu/vec_math.h"

namespace tpx::cpu {
namespace {

char* Bytes(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

// The contiguous rows of BinaryLoop and UnaryLoop, compiled per ISA
// (TPX_VECTOR_CLONES): the math of Exp, GeLU and the like runs on AVX-512
// vectors where the CPU has them instead of the baseline's SSE.
template <typename TO, typename TA, typename TB, typename F>
TPX_VECTOR_CLONES TPX_INLINE_CALLS void BinaryRow(TO* o, const TA* x, const TB* y, int64_t n,
                                                  const F& f) {
  StoreRow(o, n, [&](int64_t i) TPX_ELEMENT_FN { return f(Load(x[i]), Load(y[i])); });
}
// b broadcast (one value for the row).
template <typename TO, typename TA, typename TB, typename F>
TPX_VECTOR_CLONES TPX_INLINE_CALLS void BinaryRowScalarB(TO* o, const TA* x, TB y, int64_t n,
                                                         const F& f) {
  const auto yv = Load(y);
  StoreRow(o, n, [&](int64_t i) TPX_ELEMENT_FN { return f(Load(x[i]), yv); });
}
// a broadcast.
template <typename TO, typename TA, typename TB, typename F>
TPX_VECTOR_CLONES TPX_INLINE_CALLS void BinaryRowScalarA(TO* o, TA x, const TB* y, int64_t n,
                                                         const F& f) {
  const auto xv = Load(x);
  StoreRow(o, n, [&](int64_t i) TPX_ELEMENT_FN { return f(xv, Load(y[i])); });
}
template <typename TO, typename TI, typename F>
TPX_VECTOR_CLONES TPX_INLINE_CALLS void UnaryRow(TO* o, const TI* x, int64_t n, const F& f) {
  StoreRow(o, n, [&](int64_t i) TPX_ELEMENT_FN { return f(Load(x[i])); });
}

// out = f(a, b) elementwise; a and b have out's shape (stride 0 where
// broadcast). f gets the loaded values (float for floating types) and
// returns a value converted to TO. Contiguous rows and scalar-broadcast rows
// run tight loops.
template <typename TO, typename TA, typename TB, typename F>
void BinaryLoop(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  ParallelForEachRow<3>(
      out.shape(), {Bytes(out), Bytes(a), Bytes(b)}, {out.strides(), a.strides(), b.strides()},
      {sizeof(TO), sizeof(TA), sizeof(TB)},
      [&f](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t n) TPX_INLINE_CALLS {
        TO* o = reinterpret_cast<TO*>(p[0]);
        const TA* x = reinterpret_cast<const TA*>(p[1]);
        const TB* y = reinterpret_cast<const TB*>(p[2]);
        if (s[0] == sizeof(TO) && s[1] == sizeof(TA) && s[2] == sizeof(TB)) {
          BinaryRow(o, x, y, n, f);
        } else if (s[0] == sizeof(TO) && s[1] == sizeof(TA) && s[2] == 0) {
          BinaryRowScalarB(o, x, *y, n, f);
        } else if (s[0] == sizeof(TO) && s[1] == 0 && s[2] == sizeof(TB)) {
          BinaryRowScalarA(o, *x, y, n, f);
        } else {
          for (int64_t i = 0; i < n; ++i) {
            *reinterpret_cast<TO*>(p[0] + i * s[0]) =
                StoreAs<TO>(f(Load(*reinterpret_cast<const TA*>(p[1] + i * s[1])),
                              Load(*reinterpret_cast<const TB*>(p[2] + i * s[2]))));
          }
        }
      });
}

// out = f(in) elementwise.
template <typename TO, typename TI, typename F>
void UnaryLoop(const Tensor& out, const Tensor& in, F f) {
  ParallelForEachRow<2>(out.shape(), {Bytes(out), Bytes(in)}, {out.strides(), in.strides()},
                {sizeof(TO), sizeof(TI)},
                [&f](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) TPX_INLINE_CALLS {
                  if (s[0] == sizeof(TO) && s[1] == sizeof(TI)) {
                    UnaryRow(reinterpret_cast<TO*>(p[0]), reinterpret_cast<const TI*>(p[1]), n,
                             f);
                  } else {
                    for (int64_t i = 0; i < n; ++i) {
                      *reinterpret_cast<TO*>(p[0] + i * s[0]) = StoreAs<TO>(
                          f(Load(*reinterpret_cast<const TI*>(p[1] + i * s[1]))));
                    }
                  }
                });
}

template <typename C>
bool Compare(BinaryOp op, C x, C y) {
  switch (op) {
    case BinaryOp::kEq: return x == y;
    case BinaryOp::kLt: return x < y;
    default: return x >= y;  // kGe
  }
}

// a + alpha * b where b's dtype may differ from a's (gradient accumulation).
void MixedAdd(const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  const float al = static_cast<float>(alpha);
  DispatchFloat(a.dtype(), [&](auto atag) {
    using A = decltype(atag);
    DispatchDType(b.dtype(), [&](auto btag) {
      using B = decltype(btag);
      if (alpha == 1.0) {
        BinaryLoop<A, A, B>(
            out, a, b, [](float x, auto y) TPX_ELEMENT_FN { return x + static_cast<float>(y); });
      } else {
        BinaryLoop<A, A, B>(out, a, b, [al](float x, auto y) TPX_ELEMENT_FN {
          return x + al * static_cast<float>(y);
        });
      }
    });
  });
}

void Arithmetic(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  DispatchDType(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      using C = ComputeType<T>;
      const C al = static_cast<C>(alpha);
      switch (op) {
        case BinaryOp::kAdd:
          if (alpha == 1.0) {
            BinaryLoop<T, T, T>(out, a, b, [](C x, C y) TPX_ELEMENT_FN { return x + y; });
          } else {
            BinaryLoop<T, T, T>(out, a, b, [al](C x, C y) TPX_ELEMENT_FN { return x + al * y; });
          }
          break;
        case BinaryOp::kSub:
          BinaryLoop<T, T, T>(out, a, b, [](C x, C y) TPX_ELEMENT_FN { return x - y; });
          break;
        case BinaryOp::kMul:
          BinaryLoop<T, T, T>(out, a, b, [](C x, C y) TPX_ELEMENT_FN { return x * y; });
          break;
        default:
          BinaryLoop<T, T, T>(out, a, b, [](C x, C y) TPX_ELEMENT_FN { return x / y; });
          break;
      }
    }
  });
}

template <typename F>
void FloatUnary(const Tensor& out, const Tensor& in, F f) {
  DispatchFloat(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    UnaryLoop<T, T>(out, in, f);
  });
}

void CompareScalar(UnaryOp op, const Tensor& out, const Tensor& in, double s) {
  const BinaryOp cmp = op == UnaryOp::kLtScalar   ? BinaryOp::kLt
                       : op == UnaryOp::kGeScalar ? BinaryOp::kGe
                                                  : BinaryOp::kEq;
  DispatchDType(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    UnaryLoop<bool, T>(out, in, [s, cmp](auto x) TPX_ELEMENT_FN {
      return Compare<double>(cmp, static_cast<double>(x), s);
    });
  });
}

}  // namespace

absl::Status CpuDeviceKernels::Binary(BinaryOp op, const Tensor& out, const Tensor& a,
                                      const Tensor& b, double alpha) {
  switch (op) {
    case BinaryOp::kAdd:
    case BinaryOp::kSub:
    case BinaryOp::kMul:
    case BinaryOp::kDiv:
      if (a.dtype() != b.dtype()) {
        MixedAdd(out, a, b, alpha);
      } else {
        Arithmetic(op, out, a, b, alpha);
      }
      break;
    case BinaryOp::kEq:
    case BinaryOp::kLt:
    case BinaryOp::kGe:
      DispatchDType(a.dtype(), [&](auto tag) {
        using T = decltype(tag);
        using C = ComputeType<T>;
        BinaryLoop<bool, T, T>(out, a, b,
                               [op](C x, C y) TPX_ELEMENT_FN { return Compare(op, x, y); });
      });
      break;
    case BinaryOp::kAnd:
      BinaryLoop<bool, bool, bool>(out, a, b, [](bool x, bool y) TPX_ELEMENT_FN { return x && y; });
      break;
    case BinaryOp::kOr:
      BinaryLoop<bool, bool, bool>(out, a, b, [](bool x, bool y) TPX_ELEMENT_FN { return x || y; });
      break;
    case BinaryOp::kGeluBackward:
      DispatchFloat(b.dtype(), [&](auto tag) {
        using T = decltype(tag);
        BinaryLoop<T, T, T>(out, a, b,
                            [](float g, float v) TPX_ELEMENT_FN { return g * GeluGrad(v); });
      });
      break;
  }
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::Unary(UnaryOp op, const Tensor& out, const Tensor& in,
                                     double scalar) {
  switch (op) {
    case UnaryOp::kNeg: FloatUnary(out, in, [](float x) TPX_ELEMENT_FN { return -x; }); break;
    case UnaryOp::kExp: FloatUnary(out, in, [](float x) TPX_ELEMENT_FN { return Exp(x); }); break;
    case UnaryOp::kLog: FloatUnary(out, in, [](float x) TPX_ELEMENT_FN { return Log(x); }); break;
    case UnaryOp::kSqrt:
      FloatUnary(out, in, [](float x) TPX_ELEMENT_FN { return std::sqrt(x); });
      break;
    case UnaryOp::kTanh: FloatUnary(out, in, [](float x) TPX_ELEMENT_FN { return Tanh(x); }); break;
    case UnaryOp::kRelu:
      FloatUnary(out, in,
                 [](float x) TPX_ELEMENT_FN { return x > 0.0f ? x : (x == x ? 0.0f : x); });
      break;
    case UnaryOp::kGelu:
      FloatUnary(out, in, [](float v) TPX_ELEMENT_FN { return Gelu(v); });
      break;
    case UnaryOp::kNot:
      UnaryLoop<bool, bool>(out, in, [](bool x) TPX_ELEMENT_FN { return !x; });
      break;
    case UnaryOp::kScale: {
      const float s = static_cast<float>(scalar);
      FloatUnary(out, in, [s](float x) TPX_ELEMENT_FN { return x * s; });
      break;
    }
    case UnaryOp::kLtScalar:
    case UnaryOp::kGeScalar:
    case UnaryOp::kEqScalar: CompareScalar(op, out, in, scalar); break;
  }
  return absl::OkStatus();
}

absl::Status CpuDeviceKernels::Where(const Tensor& out, const Tensor& cond, const Tensor& a,
                                     const Tensor& b) {
  DispatchDType(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    ParallelForEachRow<4>(out.shape(), {Bytes(out), Bytes(cond), Bytes(a), Bytes(b)},
                  {out.strides(), cond.strides(), a.strides(), b.strides()},
                  {sizeof(T), 1, sizeof(T), sizeof(T)},
                  [](std::array<char*, 4> p, std::array<int64_t, 4> s, int64_t n) {
                    for (int64_t i = 0; i < n; ++i) {
                      const bool c = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
                      *reinterpret_cast<T*>(p[0] + i * s[0]) =
                          *reinterpret_cast<const T*>(p[c ? 2 : 3] + i * s[c ? 2 : 3]);
                    }
                  });
  });
  return absl::OkStatus();
}

}  // namespace tpx::cpu
