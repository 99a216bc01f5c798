// CPU DeviceKernels: broadcasting binary ops, unary math, where.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
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

// out[i] = cond[i] ? a[i] : b[i] over contiguous rows (Where), per ISA: a
// bitwise blend of both values' bits under a mask made from cond, which
// vectorises (a select stayed a branch per element, and a random mask
// mispredicts half of them). A or B may be one value for the whole row
// (kScalarA / kScalarB: stride 0, as MaskedFill's fill value is). `o` is
// Where's fresh output: it overlaps no input.
template <typename T, bool kScalarA, bool kScalarB>
TPX_VECTOR_CLONES void WhereRow(T* __restrict o, const uint8_t* __restrict c,
                                const T* __restrict a, const T* __restrict b, int64_t n) {
  using Bits = std::conditional_t<
      sizeof(T) == 8, uint64_t,
      std::conditional_t<sizeof(T) == 4, uint32_t,
                         std::conditional_t<sizeof(T) == 2, uint16_t, uint8_t>>>;
  static_assert(sizeof(Bits) == sizeof(T));
  Bits a0 = 0, b0 = 0;
  if constexpr (kScalarA) std::memcpy(&a0, a, sizeof(T));
  if constexpr (kScalarB) std::memcpy(&b0, b, sizeof(T));
  for (int64_t i = 0; i < n; ++i) {
    Bits x = a0, y = b0;
    if constexpr (!kScalarA) std::memcpy(&x, a + i, sizeof(T));
    if constexpr (!kScalarB) std::memcpy(&y, b + i, sizeof(T));
    const Bits mask = static_cast<Bits>(Bits{0} - static_cast<Bits>(c[i]));
    const Bits r = static_cast<Bits>((x & mask) | (y & static_cast<Bits>(~mask)));
    std::memcpy(o + i, &r, sizeof(T));
  }
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

// Calls fn(cmp) with the comparison `op` as a functor, so that each loop
// is instantiated per comparison (a switch per element kept it scalar).
template <typename Fn>
void WithComparison(BinaryOp op, Fn&& fn) {
  switch (op) {
    case BinaryOp::kEq: return fn(std::equal_to<>());
    case BinaryOp::kLt: return fn(std::less<>());
    default: return fn(std::greater_equal<>());  // kGe
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
  WithComparison(cmp, [&](auto compare) {
    DispatchDType(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      UnaryLoop<bool, T>(out, in, [s, compare](auto x) TPX_ELEMENT_FN {
        return compare(static_cast<double>(x), s);
      });
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
      WithComparison(op, [&](auto compare) {
        DispatchDType(a.dtype(), [&](auto tag) {
          using T = decltype(tag);
          using C = ComputeType<T>;
          BinaryLoop<bool, T, T>(out, a, b,
                                 [compare](C x, C y) TPX_ELEMENT_FN { return compare(x, y); });
        });
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
                    T* o = reinterpret_cast<T*>(p[0]);
                    // The bools' bytes (0 or 1): GCC vectorises no loop over bool.
                    const uint8_t* c = reinterpret_cast<const uint8_t*>(p[1]);
                    const T* x = reinterpret_cast<const T*>(p[2]);
                    const T* y = reinterpret_cast<const T*>(p[3]);
                    if (s[0] == sizeof(T) && s[1] == 1) {
                      const bool whole_a = s[2] == sizeof(T), whole_b = s[3] == sizeof(T);
                      if (whole_a && whole_b) return WhereRow<T, false, false>(o, c, x, y, n);
                      if (s[2] == 0 && whole_b) return WhereRow<T, true, false>(o, c, x, y, n);
                      if (whole_a && s[3] == 0) return WhereRow<T, false, true>(o, c, x, y, n);
                    }
                    // One condition for the whole row (a [rows, 1] mask, as the
                    // vocab-parallel embedding's): a copy or a fill of the row.
                    if (s[0] == sizeof(T) && s[1] == 0) {
                      const int from = c[0] != 0 ? 2 : 3;
                      const T* src = reinterpret_cast<const T*>(p[from]);
                      if (s[from] == sizeof(T)) {
                        std::memcpy(o, src, n * sizeof(T));
                        return;
                      }
                      if (s[from] == 0) {
                        std::fill(o, o + n, *src);
                        return;
                      }
                    }
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
