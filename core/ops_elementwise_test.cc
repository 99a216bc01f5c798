#include <cmath>
#include <string>
#include <vector>

#include "core/compare_testutil.h"
#include "core/device_testutil.h"
#include "core/ops.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpx::ops {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TPX_DEVICE_TEST_SUITE(ElementwiseTest);

// Reference: out[i...] = f(a[broadcast i], b[broadcast i]) computed in double.
template <typename F>
Tensor BroadcastReference(const Tensor& a, const Tensor& b, F f) {
  Shape shape = *BroadcastShapes(a.shape(), b.shape(), "ref");
  std::vector<double> av = a.ToVector<double>(), bv = b.ToVector<double>();
  std::vector<double> out(NumElements(shape));
  const size_t rank = shape.size();
  for (int64_t flat = 0; flat < static_cast<int64_t>(out.size()); ++flat) {
    int64_t rest = flat, ia = 0, ib = 0, ma = 1, mb = 1;
    for (size_t d = rank; d-- > 0;) {
      const int64_t i = rest % shape[d];
      rest /= shape[d];
      const int64_t da = d + a.dim() - rank, db = d + b.dim() - rank;
      if (da >= 0) {
        ia += (a.size(da) == 1 ? 0 : i) * ma;
        ma *= a.size(da);
      }
      if (db >= 0) {
        ib += (b.size(db) == 1 ? 0 : i) * mb;
        mb *= b.size(db);
      }
    }
    out[flat] = f(av[ia], bv[ib]);
  }
  return *TestFromVector<double>(out, shape);
}

TEST(BroadcastTest, Shapes) {
  EXPECT_EQ(*BroadcastShapes({4, 1, 3}, {5, 1}, "t"), (Shape{4, 5, 3}));
  EXPECT_EQ(*BroadcastShapes({}, {2, 3}, "t"), (Shape{2, 3}));
  EXPECT_EQ(*BroadcastShapes({2, 0}, {1}, "t"), (Shape{2, 0}));
  EXPECT_THAT(std::string(BroadcastShapes({2, 3}, {4}, "Add").status().message()),
              HasSubstr("Add: shapes [2, 3] and [4] are not broadcastable"));
}

// Large enough to be split over the kernel threads: by rows, within a single
// row, and with a broadcast and a strided operand.
TEST_P(ElementwiseTest, LargeOpsSplitOverThreadsMatchReference) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{300, 257}, {257}}, {{1, 70001}, {1, 70001}}, {{2, 40000}, {2, 1}}};
  for (const auto& [sa, sb] : cases) {
    Tensor a = TestRandom(sa, DType::kF32, 1);
    Tensor b = TestRandom(sb, DType::kF32, 2, 0.5f, 2.0f);
    EXPECT_TRUE(TensorsClose(*Mul(a, b), BroadcastReference(a, b, std::multiplies<>()), 1e-6,
                             1e-6))
        << ShapeString(sa);
  }
  Tensor a = TestRandom({257, 300}, DType::kF32, 3);
  Tensor at = *a.Transpose(0, 1);  // strided view
  Tensor b = TestRandom({300, 257}, DType::kF32, 4);
  EXPECT_TRUE(TensorsClose(*Sub(at, b), BroadcastReference(*at.Contiguous(), b, std::minus<>()),
                           1e-6, 1e-6));
  std::vector<double> xs = a.ToVector<double>(), gelu(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    gelu[i] = 0.5 * xs[i] * (1.0 + std::erf(xs[i] / std::sqrt(2.0)));
  }
  EXPECT_TRUE(TensorsClose(*Gelu(a), *TestFromVector<double>(gelu, a.shape()), 1e-5, 1e-6));
}

TEST_P(ElementwiseTest, ArithmeticWithBroadcastingMatchesReference) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {3, 4}}, {{3, 4}, {4}}, {{3, 1}, {1, 4}}, {{2, 3, 4}, {3, 1}},
      {{4}, {2, 3, 4}}, {{}, {2, 2}},  {{5, 1, 3}, {1, 6, 1}}};
  for (const auto& [sa, sb] : cases) {
    Tensor a = TestRandom(sa, DType::kF32, 1);
    Tensor b = TestRandom(sb, DType::kF32, 2, 0.5f, 2.0f);
    EXPECT_TRUE(TensorsClose(*Add(a, b), BroadcastReference(a, b, std::plus<>()), 1e-6, 1e-6));
    EXPECT_TRUE(TensorsClose(*Sub(a, b), BroadcastReference(a, b, std::minus<>()), 1e-6, 1e-6));
    EXPECT_TRUE(
        TensorsClose(*Mul(a, b), BroadcastReference(a, b, std::multiplies<>()), 1e-6, 1e-6));
    EXPECT_TRUE(TensorsClose(*Div(a, b), BroadcastReference(a, b, std::divides<>()), 1e-6, 1e-6));
    EXPECT_TRUE(TensorsClose(
        *AddScaled(a, b, -0.5),
        BroadcastReference(a, b, [](double x, double y) { return x - 0.5 * y; }), 1e-6, 1e-6));
  }
}

TEST_P(ElementwiseTest, StridedInputs) {
  Tensor base = TestRandom({4, 6}, DType::kF32, 3);
  Tensor a = *base.Transpose(0, 1);             // [6, 4]
  Tensor b = *TestRandom({6, 8}, DType::kF32, 4).Slice(1, 0, 8, 2);  // [6, 4] stride 2
  Tensor ref = BroadcastReference(a, b, std::multiplies<>());
  EXPECT_TRUE(TensorsClose(*Mul(a, b), ref, 1e-6, 1e-7));
}

TEST_P(ElementwiseTest, ReducedPrecisionComputesInF32) {
  Tensor a = TestRandom({3, 5}, DType::kBF16, 5);
  Tensor b = TestRandom({5}, DType::kBF16, 6);
  Tensor out = *Add(a, b);
  EXPECT_EQ(out.dtype(), DType::kBF16);
  // One rounding of the exact sum of the bf16 inputs.
  Tensor ref = *BroadcastReference(a, b, std::plus<>()).To(DType::kBF16);
  EXPECT_TRUE(TensorsClose(out, ref, 0, 0));
  Tensor h = TestRandom({7}, DType::kF16, 7);
  EXPECT_TRUE(TensorsClose(*Mul(h, h),
                           *BroadcastReference(h, h, std::multiplies<>()).To(DType::kF16), 0, 0));
}

TEST_P(ElementwiseTest, IntegerArithmeticAndComparisons) {
  Tensor ids = *TestFromVector<int64_t>({3, 7, 10, 12}, {4});
  Tensor start = *TestFromVector<int64_t>({5}, {1});
  EXPECT_THAT(Sub(ids, start)->ToVector<int64_t>(), ElementsAre(-2, 2, 5, 7));
  Tensor below = *LtScalar(ids, 5);
  Tensor above = *GeScalar(ids, 10);
  Tensor outside = *LogicalOr(below, above);
  EXPECT_THAT(outside.ToVector<bool>(), ElementsAre(true, false, true, true));
  EXPECT_THAT(LogicalNot(outside)->ToVector<bool>(), ElementsAre(false, true, false, false));
  EXPECT_THAT(LogicalAnd(below, outside)->ToVector<bool>(),
              ElementsAre(true, false, false, false));
  EXPECT_THAT(MaskedFill(*Sub(ids, start), outside, 0)->ToVector<int64_t>(),
              ElementsAre(0, 2, 0, 0));
  EXPECT_THAT(EqScalar(ids, 7)->ToVector<bool>(), ElementsAre(false, true, false, false));
  EXPECT_THAT(Lt(ids, start)->ToVector<bool>(), ElementsAre(true, false, false, false));
  EXPECT_THAT(Ge(ids, start)->ToVector<bool>(), ElementsAre(false, true, true, true));
  EXPECT_THAT(Eq(ids, ids)->ToVector<bool>(), ElementsAre(true, true, true, true));
  EXPECT_THAT(AddScalar(ids, 1)->ToVector<int64_t>(), ElementsAre(4, 8, 11, 13));
  EXPECT_FALSE(Div(ids, ids).ok());
  EXPECT_FALSE(AddScalar(ids, 0.5).ok());
}

TEST_P(ElementwiseTest, ErrorsNameOpAndShapes) {
  Tensor a = *TestZeros({2, 3});
  Tensor b = *TestZeros({3, 2});
  absl::Status s = Add(a, b).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("Add: shapes [2, 3] and [3, 2] are not broadcastable"));
  EXPECT_THAT(std::string(Mul(a, *a.To(DType::kBF16)).status().message()),
              HasSubstr("Mul: dtypes differ: f32[2, 3] and bf16[2, 3]"));
  EXPECT_THAT(std::string(Sub(a, Tensor()).status().message()), HasSubstr("undefined"));
  EXPECT_THAT(std::string(Exp(*TestZeros({2}, DType::kI32)).status().message()),
              HasSubstr("Exp: input must be f32, bf16 or f16, got i32[2]"));
}

TEST_P(ElementwiseTest, ScaleAndUnaryMath) {
  Tensor x = *TestFromVector<float>({-2.0f, -0.5f, 0.0f, 0.5f, 3.0f}, {5});
  EXPECT_THAT(Scale(x, 2.0)->ToVector<float>(), ElementsAre(-4, -1, 0, 1, 6));
  EXPECT_THAT(AddScalar(x, 1.0)->ToVector<float>(), ElementsAre(-1, 0.5, 1, 1.5, 4));
  EXPECT_THAT(Neg(x)->ToVector<float>(), ElementsAre(2, 0.5, -0.0f, -0.5, -3));
  EXPECT_THAT(Relu(x)->ToVector<float>(), ElementsAre(0, 0, 0, 0.5, 3));
  std::vector<float> xv = x.ToVector<float>();
  std::vector<double> exp_ref, tanh_ref, gelu_ref;
  for (float v : xv) {
    exp_ref.push_back(std::exp(double{v}));
    tanh_ref.push_back(std::tanh(double{v}));
    gelu_ref.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
  }
  EXPECT_TRUE(TensorsClose(*Exp(x), *TestFromVector<double>(exp_ref, {5}), 1e-6, 1e-7));
  EXPECT_TRUE(TensorsClose(*Tanh(x), *TestFromVector<double>(tanh_ref, {5}), 1e-6, 1e-7));
  EXPECT_TRUE(TensorsClose(*Gelu(x), *TestFromVector<double>(gelu_ref, {5}), 1e-6, 1e-7));
  Tensor pos = *TestFromVector<float>({1.0f, 4.0f, 0.25f}, {3});
  // Device libm may differ from the host's in the last ulp.
  EXPECT_TRUE(TensorsClose(
      *Log(pos), *Tensor::FromVector<double>({0.0, std::log(4.0), std::log(0.25)}, {3}), 1e-6,
      1e-7));
  EXPECT_THAT(Sqrt(pos)->ToVector<float>(), ElementsAre(1.0f, 2.0f, 0.5f));
}

// Rows long enough for the vector loops (and their tails), contiguous and
// through a transposed view (the strided loop), f32 and bf16, against
// double references; GeluBackward's pass too.
TEST_P(ElementwiseTest, UnaryMathOnLongRowsMatchesDouble) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Tensor x = TestRandom({37, 29}, dtype, 21, -6.0f, 6.0f);
    Tensor pos = TestRandom({37, 29}, dtype, 22, 1e-3f, 50.0f);
    Tensor g = TestRandom({37, 29}, dtype, 23);
    std::vector<double> xv = x.ToVector<double>(), pv = pos.ToVector<double>();
    std::vector<double> gv = g.ToVector<double>();
    std::vector<double> exp_ref, log_ref, tanh_ref, gelu_ref, gelu_grad_ref;
    for (size_t i = 0; i < xv.size(); ++i) {
      const double v = xv[i];
      exp_ref.push_back(std::exp(v));
      log_ref.push_back(std::log(pv[i]));
      tanh_ref.push_back(std::tanh(v));
      gelu_ref.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
      gelu_grad_ref.push_back(gv[i] * (0.5 * (1 + std::erf(v / std::sqrt(2.0))) +
                                       v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI)));
    }
    // bf16 results are rounded once: half an ulp of 8 bits.
    const double rtol = dtype == DType::kBF16 ? 4e-3 : 2e-6;
    const double atol = dtype == DType::kBF16 ? 1e-6 : 1e-7;
    auto ref = [](const std::vector<double>& v) { return *TestFromVector<double>(v, {37, 29}); };
    for (bool transposed : {false, true}) {
      // The transposed views' rows are strided; their results come back
      // transposed and are compared as such.
      auto view = [&](const Tensor& t) { return transposed ? *t.Transpose(0, 1) : t; };
      auto back = [&](absl::StatusOr<Tensor> t) { return transposed ? *t->Transpose(0, 1) : *t; };
      SCOPED_TRACE(std::string(DTypeName(dtype)) + (transposed ? " transposed" : " contiguous"));
      EXPECT_TRUE(TensorsClose(back(Exp(view(x))), ref(exp_ref), rtol, atol));
      EXPECT_TRUE(TensorsClose(back(Log(view(pos))), ref(log_ref), rtol, atol));
      EXPECT_TRUE(TensorsClose(back(Tanh(view(x))), ref(tanh_ref), rtol, atol));
      // GeLU's erf has an absolute error below 4e-7 (core/cpu/vec_math.h),
      // times |x| / 2 in GeLU.
      EXPECT_TRUE(TensorsClose(back(Gelu(view(x))), ref(gelu_ref), rtol, 2e-6));
      EXPECT_TRUE(TensorsClose(back(GeluBackward(view(g), view(x))), ref(gelu_grad_ref),
                               dtype == DType::kBF16 ? 8e-3 : 1e-5, 2e-6));
    }
  }
}

// GeluBackward against central finite differences of Gelu in double.
TEST_P(ElementwiseTest, GeluBackwardMatchesFiniteDifferences) {
  Tensor x = TestRandom({64}, DType::kF32, 8, -4.0f, 4.0f);
  Tensor g = TestRandom({64}, DType::kF32, 9);
  std::vector<float> xv = x.ToVector<float>(), gv = g.ToVector<float>();
  auto gelu = [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); };
  std::vector<double> ref;
  for (size_t i = 0; i < xv.size(); ++i) {
    const double h = 1e-5;
    ref.push_back(gv[i] * (gelu(xv[i] + h) - gelu(xv[i] - h)) / (2 * h));
  }
  EXPECT_TRUE(TensorsClose(*GeluBackward(g, x), *TestFromVector<double>(ref, {64}), 1e-4,
                           1e-5));
  EXPECT_FALSE(GeluBackward(g, *x.Narrow(0, 0, 3)).ok());
}

TEST_P(ElementwiseTest, AddInPlaceAccumulatesAcrossDTypesAndLayouts) {
  // f32 main_grad += bf16 grad.
  Tensor main_grad = *TestFull({2, 3}, 1.0, DType::kF32);
  Tensor grad = *TestFromVector<float>({0.5f, 1, 2, 3, 4, 5}, {2, 3}, DType::kBF16);
  ASSERT_TRUE(AddInPlace(main_grad, grad).ok());
  ASSERT_TRUE(AddInPlace(main_grad, grad, -2.0).ok());
  EXPECT_THAT(main_grad.ToVector<float>(), ElementsAre(0.5f, 0, -1, -2, -3, -4));
  // Into a strided window, with a broadcast row.
  Tensor big = *TestZeros({3, 4}, DType::kBF16);
  Tensor window = *big.Narrow(1, 1, 2);
  ASSERT_TRUE(AddInPlace(window, *TestFromVector<float>({1, 2}, {2})).ok());
  EXPECT_THAT(big.ToVector<float>(), ElementsAre(0, 1, 2, 0, 0, 1, 2, 0, 0, 1, 2, 0));
  // src must broadcast to dst, not the reverse.
  absl::Status s = AddInPlace(*TestZeros({3}), *TestZeros({2, 3}));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("source shape [2, 3] does not broadcast to destination shape [3]"));
  EXPECT_FALSE(AddInPlace(*TestZeros({3}, DType::kI32), *TestZeros({3})).ok());
  ASSERT_TRUE(ScaleInPlace(main_grad, 2.0).ok());
  EXPECT_THAT(main_grad.ToVector<float>(), ElementsAre(1, 0, -2, -4, -6, -8));
  ASSERT_TRUE(Fill(window, 7).ok());
  EXPECT_THAT(big.ToVector<float>(), ElementsAre(0, 7, 7, 0, 0, 7, 7, 0, 0, 7, 7, 0));
}

// Comparisons and Where over rows long enough for the vector loops, with a
// random mask, in f32, bf16 and i64, against element-wise references.
TEST_P(ElementwiseTest, CompareAndWhereOnLongRows) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    Tensor a = *TestRandom({33, 45}, DType::kF32, 31, -4.0f, 4.0f).To(dtype);
    Tensor b = *TestRandom({33, 45}, DType::kF32, 32, -4.0f, 4.0f).To(dtype);
    const std::vector<double> av = a.ToVector<double>(), bv = b.ToVector<double>();
    std::vector<bool> lt, ge, eq_self, lt_scalar;
    std::vector<double> where, filled, where_scalar_b;
    for (size_t i = 0; i < av.size(); ++i) {
      lt.push_back(av[i] < bv[i]);
      ge.push_back(av[i] >= bv[i]);
      eq_self.push_back(true);
      lt_scalar.push_back(av[i] < 0.5);
      where.push_back(av[i] < bv[i] ? av[i] : bv[i]);
      filled.push_back(av[i] < bv[i] ? -7.0 : av[i]);
      where_scalar_b.push_back(av[i] < bv[i] ? av[i] : 3.0);
    }
    Tensor mask = *Lt(a, b);
    EXPECT_EQ(mask.ToVector<bool>(), lt);
    EXPECT_EQ(Ge(a, b)->ToVector<bool>(), ge);
    EXPECT_EQ(Eq(a, a)->ToVector<bool>(), eq_self);
    EXPECT_EQ(LtScalar(a, 0.5)->ToVector<bool>(), lt_scalar);
    EXPECT_EQ(Where(mask, a, b)->ToVector<double>(), where);
    // One value for a whole operand (stride 0): MaskedFill's fill, and b.
    EXPECT_EQ(MaskedFill(a, mask, -7.0)->ToVector<double>(), filled);
    Tensor three = *TestFull({1}, 3.0, dtype);
    EXPECT_EQ(Where(mask, a, three)->ToVector<double>(), where_scalar_b);
    // One condition per row ([33, 1], as a row mask broadcasts): whole rows
    // of a or b, or of the fill.
    Tensor row_mask = *LtScalar(*a.Narrow(1, 0, 1), 0.0);
    std::vector<double> row_where, row_filled;
    for (size_t i = 0; i < av.size(); ++i) {
      const bool take_a = av[i / 45 * 45] < 0.0;
      row_where.push_back(take_a ? av[i] : bv[i]);
      row_filled.push_back(take_a ? -7.0 : av[i]);
    }
    EXPECT_EQ(Where(row_mask, a, b)->ToVector<double>(), row_where);
    EXPECT_EQ(MaskedFill(a, row_mask, -7.0)->ToVector<double>(), row_filled);
  }
}

TEST_P(ElementwiseTest, MaskedFillAndWhere) {
  Tensor x = *TestFromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor col_mask = *TestFromVector<bool>({true, false, true}, {3});
  EXPECT_THAT(MaskedFill(x, col_mask, -1)->ToVector<float>(), ElementsAre(-1, 2, -1, -1, 5, -1));
  EXPECT_THAT(std::string(MaskedFill(x, *TestZeros({2, 2}, DType::kBool), 0).status().message()),
              HasSubstr("MaskedFill"));
  EXPECT_FALSE(MaskedFill(x, x, 0).ok());  // mask must be bool
  EXPECT_FALSE(MaskedFill(x, *TestZeros({4, 2, 3}, DType::kBool), 0).ok());
  Tensor row_cond = *TestFromVector<bool>({true, false}, {2, 1});
  Tensor zero = *TestZeros({1});
  EXPECT_THAT(Where(row_cond, x, zero)->ToVector<float>(), ElementsAre(1, 2, 3, 0, 0, 0));
  EXPECT_FALSE(Where(x, x, x).ok());
}

}  // namespace
}  // namespace tpx::ops
