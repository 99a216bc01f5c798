// Every differentiable op against finite differences (testing/gradcheck.h),
// plus forward values where the op is more than a core op call.
#include "core/autograd/ops.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/autograd/engine.h"
#include "core/compare_testutil.h"
#include "core/device_testutil.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "testing/gradcheck.h"

namespace tpx {
namespace {

using Inputs = absl::Span<const Variable>;

TPX_DEVICE_TEST_SUITE(AgOpsTest);

Variable RandomLeaf(Shape shape, uint64_t seed, double low = -1.0, double high = 1.0) {
  return Variable(OnTestDevice(RandomUniform(std::move(shape), seed, low, high)).value(),
                  /*requires_grad=*/true);
}

Variable Const(Shape shape, uint64_t seed, double low = -1.0, double high = 1.0) {
  return Variable(OnTestDevice(RandomUniform(std::move(shape), seed, low, high)).value());
}

Tensor T(std::vector<float> values, Shape shape) {
  return TestFromVector<float>(values, std::move(shape)).value();
}

void ExpectGradientsMatch(const GradcheckFn& fn, std::vector<Variable> inputs,
                          GradcheckOptions options = {}) {
  absl::StatusOr<GradcheckResult> r = Gradcheck(fn, inputs, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok) << r->message;
  EXPECT_GT(r->checked, 0);
}

// ---- Fused transformer ops ----

TEST_P(AgOpsTest, ScaledSoftmaxGradients) {
  for (bool causal : {false, true}) {
    ExpectGradientsMatch(
        [causal](Inputs in) -> absl::StatusOr<Variable> {
          TPX_ASSIGN_OR_RETURN(Variable y, ag::ScaledSoftmax(in[0], 0.7, causal));
          return ag::Mul(y, in[1]);  // a non-uniform upstream gradient
        },
        {RandomLeaf({2, 4, 4}, 40, -2, 2), Const({2, 4, 4}, 41)});
  }
}

TEST_P(AgOpsTest, LayerNormGradientsWithNonUniformUpstream) {
  ExpectGradientsMatch(
      [](Inputs in) -> absl::StatusOr<Variable> {
        TPX_ASSIGN_OR_RETURN(Variable y, ag::LayerNorm(in[0], in[1], in[2], 1e-5));
        return ag::Mul(y, in[3]);
      },
      {RandomLeaf({3, 6}, 42, -2, 2), RandomLeaf({6}, 43, 0.5, 1.5), RandomLeaf({6}, 44),
       Const({3, 6}, 45)});
}

// ---- Elementwise ----

TEST_P(AgOpsTest, AddBroadcasting) {
  ExpectGradientsMatch([](Inputs in) { return ag::Add(in[0], in[1]); },
                       {RandomLeaf({2, 3}, 1), RandomLeaf({3}, 2)});
  ExpectGradientsMatch([](Inputs in) { return ag::Add(in[0], in[1]); },
                       {RandomLeaf({2, 1, 3}, 3), RandomLeaf({4, 1}, 4)});
}

TEST_P(AgOpsTest, SubBroadcasting) {
  ExpectGradientsMatch([](Inputs in) { return ag::Sub(in[0], in[1]); },
                       {RandomLeaf({3}, 5), RandomLeaf({2, 3}, 6)});
}

TEST_P(AgOpsTest, MulBroadcasting) {
  ExpectGradientsMatch([](Inputs in) { return ag::Mul(in[0], in[1]); },
                       {RandomLeaf({2, 3}, 7), RandomLeaf({2, 1}, 8)});
  ExpectGradientsMatch([](Inputs in) { return ag::Mul(in[0], in[1]); },
                       {RandomLeaf({2, 3}, 9), Const({2, 3}, 10)});
}

TEST_P(AgOpsTest, DivBroadcasting) {
  ExpectGradientsMatch([](Inputs in) { return ag::Div(in[0], in[1]); },
                       {RandomLeaf({2, 3}, 11), RandomLeaf({3}, 12, 0.5, 1.5)});
  ExpectGradientsMatch([](Inputs in) { return ag::Div(in[0], in[1]); },
                       {RandomLeaf({1, 3}, 13), RandomLeaf({2, 1}, 14, -1.5, -0.5)});
}

TEST_P(AgOpsTest, MultipleUsesOfOneVariable) {
  // x * x / (x + 3) + x
  ExpectGradientsMatch(
      [](Inputs in) -> absl::StatusOr<Variable> {
        const Variable& x = in[0];
        TPX_ASSIGN_OR_RETURN(Variable xx, ag::Mul(x, x));
        TPX_ASSIGN_OR_RETURN(Variable d, ag::AddScalar(x, 3.0));
        TPX_ASSIGN_OR_RETURN(Variable q, ag::Div(xx, d));
        return ag::Add(q, x);
      },
      {RandomLeaf({2, 3}, 15)});
}

TEST_P(AgOpsTest, ScalarOps) {
  ExpectGradientsMatch([](Inputs in) { return ag::Scale(in[0], -2.5); }, {RandomLeaf({4}, 16)});
  ExpectGradientsMatch([](Inputs in) { return ag::AddScalar(in[0], 4.0); }, {RandomLeaf({4}, 17)});
  ExpectGradientsMatch([](Inputs in) { return ag::Neg(in[0]); }, {RandomLeaf({4}, 18)});
}

TEST_P(AgOpsTest, UnaryMath) {
  ExpectGradientsMatch([](Inputs in) { return ag::Exp(in[0]); }, {RandomLeaf({2, 3}, 19)});
  ExpectGradientsMatch([](Inputs in) { return ag::Log(in[0]); }, {RandomLeaf({2, 3}, 20, 0.5, 2)});
  ExpectGradientsMatch([](Inputs in) { return ag::Sqrt(in[0]); }, {RandomLeaf({2, 3}, 21, 0.5, 2)});
  ExpectGradientsMatch([](Inputs in) { return ag::Tanh(in[0]); }, {RandomLeaf({2, 3}, 22, -2, 2)});
  ExpectGradientsMatch([](Inputs in) { return ag::Gelu(in[0]); }, {RandomLeaf({2, 3}, 23, -3, 3)});
  ExpectGradientsMatch([](Inputs in) { return ag::BiasGelu(in[0], in[1]); },
                       {RandomLeaf({4, 3}, 24, -3, 3), RandomLeaf({3}, 25)});
}

TEST_P(AgOpsTest, Relu) {
  // Values away from the kink at 0.
  Variable x(T({-1.5f, -0.3f, 0.2f, 0.7f, 1.1f, -0.9f}, {2, 3}), true);
  ExpectGradientsMatch([](Inputs in) { return ag::Relu(in[0]); }, {x});
}

TEST_P(AgOpsTest, MaskedFill) {
  Tensor mask = TestFromVector<bool>({true, false, true}, {3}).value();  // broadcast over rows
  ExpectGradientsMatch([mask](Inputs in) { return ag::MaskedFill(in[0], mask, -1e4); },
                       {RandomLeaf({2, 3}, 24)});
}

TEST_P(AgOpsTest, WhereBroadcasting) {
  Tensor cond = TestFromVector<bool>({true, false, false, true, true, false}, {2, 3}).value();
  ExpectGradientsMatch([cond](Inputs in) { return ag::Where(cond, in[0], in[1]); },
                       {RandomLeaf({2, 3}, 25), RandomLeaf({3}, 26)});
}

TEST_P(AgOpsTest, ToCastsGradientBack) {
  Variable x(T({1, 2, 3}, {3}), true);
  Variable y = ag::To(x, DType::kBF16).value();
  EXPECT_EQ(y.dtype(), DType::kBF16);
  Variable z = ag::Scale(ag::To(y, DType::kF32).value(), 3.0).value();
  ASSERT_TRUE(Backward(ag::Sum(z).value()).ok());
  EXPECT_EQ(x.grad().dtype(), DType::kF32);
  EXPECT_EQ(x.grad().ToVector<float>(), (std::vector<float>{3, 3, 3}));
  // Through gradcheck with an f32 -> f32 cast (a no-op copy).
  ExpectGradientsMatch([](Inputs in) { return ag::To(in[0], DType::kF32); }, {RandomLeaf({3}, 27)});
}

// ---- Reductions ----

TEST_P(AgOpsTest, SumAndMeanOverDim) {
  for (bool keepdim : {false, true}) {
    for (int64_t dim : {0, 1, -1}) {
      SCOPED_TRACE(testing::Message() << "dim " << dim << " keepdim " << keepdim);
      ExpectGradientsMatch([=](Inputs in) { return ag::Sum(in[0], dim, keepdim); },
                           {RandomLeaf({2, 3, 2}, 28)});
      ExpectGradientsMatch([=](Inputs in) { return ag::Mean(in[0], dim, keepdim); },
                           {RandomLeaf({2, 3, 2}, 29)});
    }
  }
}

TEST_P(AgOpsTest, SumAndMeanOverAll) {
  Variable s = ag::Sum(Variable(T({1, 2, 3, 4}, {2, 2}))).value();
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.value().Item(), 10.0);
  ExpectGradientsMatch([](Inputs in) { return ag::Sum(in[0]); }, {RandomLeaf({2, 3}, 30)});
  ExpectGradientsMatch([](Inputs in) { return ag::Mean(in[0]); }, {RandomLeaf({2, 3}, 31)});
}

TEST_P(AgOpsTest, Max) {
  // Distinct values so the maximum does not switch under perturbation.
  Variable x(T({0.1f, 0.9f, -0.4f, 0.5f, -1.0f, 0.8f, 0.3f, 0.0f}, {2, 4}), true);
  for (bool keepdim : {false, true}) {
    ExpectGradientsMatch([=](Inputs in) { return ag::Max(in[0], 1, keepdim); }, {x});
    ExpectGradientsMatch([=](Inputs in) { return ag::Max(in[0], 0, keepdim); }, {x});
  }
  // Ties: the whole gradient goes to the first maximum.
  Variable t(T({2, 2, 1}, {3}), true);
  ASSERT_TRUE(Backward(ag::Max(t, 0).value()).ok());
  EXPECT_EQ(t.grad().ToVector<float>(), (std::vector<float>{1, 0, 0}));
}

TEST_P(AgOpsTest, SoftmaxAndLogSoftmax) {
  for (int64_t dim : {0, 1}) {
    SCOPED_TRACE(testing::Message() << "dim " << dim);
    ExpectGradientsMatch([=](Inputs in) { return ag::Softmax(in[0], dim); },
                         {RandomLeaf({3, 4}, 32, -2, 2)});
    ExpectGradientsMatch([=](Inputs in) { return ag::LogSoftmax(in[0], dim); },
                         {RandomLeaf({3, 4}, 33, -2, 2)});
  }
}

TEST_P(AgOpsTest, CausalMaskedSoftmax) {
  // scores masked above the diagonal, as in causal attention.
  Tensor above = T({0, 1, 1, 0, 0, 1, 0, 0, 0}, {3, 3});
  Tensor mask = ops::GeScalar(above, 0.5).value();
  ExpectGradientsMatch(
      [mask](Inputs in) -> absl::StatusOr<Variable> {
        TPX_ASSIGN_OR_RETURN(Variable masked, ag::MaskedFill(in[0], mask, -1e9));
        return ag::Softmax(masked, -1);
      },
      {RandomLeaf({2, 3, 3}, 34, -2, 2)});
}

// ---- Matrix products ----

TEST_P(AgOpsTest, Matmul2d) {
  ExpectGradientsMatch([](Inputs in) { return ag::Matmul(in[0], in[1]); },
                       {RandomLeaf({3, 4}, 35), RandomLeaf({4, 2}, 36)});
}

TEST_P(AgOpsTest, MatmulWithTransposedView) {
  // a @ b^T with b [2, 4] viewed transposed.
  ExpectGradientsMatch(
      [](Inputs in) -> absl::StatusOr<Variable> {
        TPX_ASSIGN_OR_RETURN(Variable bt, ag::Transpose(in[1], 0, 1));
        return ag::Matmul(in[0], bt);
      },
      {RandomLeaf({3, 4}, 37), RandomLeaf({2, 4}, 38)});
}

TEST_P(AgOpsTest, MatmulBatched) {
  ExpectGradientsMatch([](Inputs in) { return ag::Matmul(in[0], in[1]); },
                       {RandomLeaf({2, 3, 4}, 39), RandomLeaf({2, 4, 2}, 40)});
  ExpectGradientsMatch([](Inputs in) { return ag::Matmul(in[0], in[1]); },
                       {RandomLeaf({2, 3, 4}, 41), RandomLeaf({4, 2}, 42)});
}

// Every transpose flag combination, 2-D, batched and with a shared 2-D b;
// op(a) is [3, 4] and op(b) is [4, 2] in each product.
TEST_P(AgOpsTest, MatmulTransposeFlags) {
  uint32_t seed = 140;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Shape a2 = ta ? Shape{4, 3} : Shape{3, 4}, b2 = tb ? Shape{2, 4} : Shape{4, 2};
      const Shape a3 = ta ? Shape{2, 4, 3} : Shape{2, 3, 4};
      const Shape b3 = tb ? Shape{2, 2, 4} : Shape{2, 4, 2};
      auto product = [ta, tb](Inputs in) { return ag::Matmul(in[0], in[1], ta, tb); };
      SCOPED_TRACE(testing::Message() << "trans_a=" << ta << " trans_b=" << tb);
      ExpectGradientsMatch(product, {RandomLeaf(a2, ++seed), RandomLeaf(b2, ++seed)});
      ExpectGradientsMatch(product, {RandomLeaf(a3, ++seed), RandomLeaf(b3, ++seed)});
      ExpectGradientsMatch(product, {RandomLeaf(a3, ++seed), RandomLeaf(b2, ++seed)});
    }
  }
}

TEST_P(AgOpsTest, Linear) {
  ExpectGradientsMatch([](Inputs in) { return ag::Linear(in[0], in[1], in[2]); },
                       {RandomLeaf({2, 3, 4}, 43), RandomLeaf({5, 4}, 44), RandomLeaf({5}, 45)});
  ExpectGradientsMatch([](Inputs in) { return ag::Linear(in[0], in[1]); },
                       {RandomLeaf({3, 4}, 46), RandomLeaf({2, 4}, 47)});
  // Frozen weight: only x and bias get gradients.
  ExpectGradientsMatch([](Inputs in) { return ag::Linear(in[0], in[1], in[2]); },
                       {RandomLeaf({3, 4}, 48), Const({2, 4}, 49), RandomLeaf({2}, 50)});
}

TEST_P(AgOpsTest, LayerNormValues) {
  Variable x(T({1, 2, 3, 4, -1, 0, 1, 6}, {2, 4}));
  Variable w(T({1, 2, 1, 0.5f}, {4}));
  Variable b(T({0, 0, 1, 0}, {4}));
  Variable y = ag::LayerNorm(x, w, b, 1e-5).value();
  std::vector<float> xv = x.value().ToVector<float>();
  std::vector<float> wv = w.value().ToVector<float>();
  std::vector<float> bv = b.value().ToVector<float>();
  std::vector<float> expected;
  for (int r = 0; r < 2; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < 4; ++c) mean += xv[r * 4 + c] / 4.0;
    for (int c = 0; c < 4; ++c) var += std::pow(xv[r * 4 + c] - mean, 2) / 4.0;
    for (int c = 0; c < 4; ++c) {
      expected.push_back(
          static_cast<float>((xv[r * 4 + c] - mean) / std::sqrt(var + 1e-5) * wv[c] + bv[c]));
    }
  }
  EXPECT_TRUE(TensorsClose(y.value(), T(expected, {2, 4}), 1e-5, 1e-5));
}

TEST_P(AgOpsTest, LayerNormGradients) {
  ExpectGradientsMatch(
      [](Inputs in) { return ag::LayerNorm(in[0], in[1], in[2]); },
      {RandomLeaf({2, 3, 5}, 51, -2, 2), RandomLeaf({5}, 52, 0.5, 1.5), RandomLeaf({5}, 53)});
  ExpectGradientsMatch([](Inputs in) { return ag::LayerNorm(in[0], Variable(), Variable()); },
                       {RandomLeaf({3, 4}, 54, -2, 2)});
}

TEST_P(AgOpsTest, LayerNormBf16KeepsDtype) {
  Variable x(OnTestDevice(RandomUniform({2, 8}, 55)).value().To(DType::kBF16).value(), true);
  Variable w(TestOnes({8}, DType::kBF16).value(), true);
  Variable y = ag::LayerNorm(x, w, Variable()).value();
  EXPECT_EQ(y.dtype(), DType::kBF16);
  ASSERT_TRUE(Backward(ag::Sum(ag::To(y, DType::kF32).value()).value()).ok());
  EXPECT_EQ(x.grad().dtype(), DType::kBF16);
  EXPECT_EQ(w.grad().dtype(), DType::kBF16);
}

TEST_P(AgOpsTest, LayerNormBadWeight) {
  EXPECT_FALSE(ag::LayerNorm(RandomLeaf({2, 4}, 56), RandomLeaf({3}, 57), Variable()).ok());
}

// ---- Shapes and views ----

TEST_P(AgOpsTest, ReshapeTransposePermute) {
  ExpectGradientsMatch(
      [](Inputs in) {
        return ag::Reshape(in[0], {3, -1});
      },
      {RandomLeaf({2, 3, 2}, 58)});
  ExpectGradientsMatch(
      [](Inputs in) -> absl::StatusOr<Variable> {
        TPX_ASSIGN_OR_RETURN(Variable t, ag::Transpose(in[0], 0, 2));
        return ag::Reshape(t, {-1});  // reshape of a non-contiguous view copies
      },
      {RandomLeaf({2, 3, 2}, 59)});
  ExpectGradientsMatch(
      [](Inputs in) {
        return ag::Permute(in[0], {2, 0, 1});
      },
      {RandomLeaf({2, 3, 4}, 60)});
  ExpectGradientsMatch(
      [](Inputs in) {
        return ag::Permute(in[0], {-1, 0, 1});
      },
      {RandomLeaf({2, 3, 4}, 61)});
}

TEST_P(AgOpsTest, ViewsShareMemory) {
  Variable x = RandomLeaf({2, 3}, 62);
  EXPECT_TRUE(ag::Transpose(x, 0, 1).value().value().SharesStorageWith(x.value()));
  EXPECT_TRUE(ag::Narrow(x, 1, 1, 2).value().value().SharesStorageWith(x.value()));
  EXPECT_TRUE(ag::Reshape(x, {6}).value().value().SharesStorageWith(x.value()));
}

TEST_P(AgOpsTest, UnsqueezeSqueezeExpand) {
  ExpectGradientsMatch([](Inputs in) { return ag::Unsqueeze(in[0], 1); }, {RandomLeaf({2, 3}, 63)});
  ExpectGradientsMatch([](Inputs in) { return ag::Squeeze(in[0], -2); },
                       {RandomLeaf({2, 1, 3}, 64)});
  ExpectGradientsMatch(
      [](Inputs in) {
        return ag::Expand(in[0], {4, 2, 3});
      },
      {RandomLeaf({2, 1}, 65)});
}

TEST_P(AgOpsTest, Narrow) {
  ExpectGradientsMatch([](Inputs in) { return ag::Narrow(in[0], 1, 1, 2); },
                       {RandomLeaf({2, 4}, 66)});
  ExpectGradientsMatch([](Inputs in) { return ag::Narrow(in[0], -1, 0, 3); },
                       {RandomLeaf({2, 4}, 67)});
}

TEST_P(AgOpsTest, Concat) {
  ExpectGradientsMatch([](Inputs in) { return ag::Concat(in, 1); },
                       {RandomLeaf({2, 1}, 68), Const({2, 3}, 69), RandomLeaf({2, 2}, 70)});
  ExpectGradientsMatch([](Inputs in) { return ag::Concat(in, -2); },
                       {RandomLeaf({1, 3}, 71), RandomLeaf({2, 3}, 72)});
}

TEST_P(AgOpsTest, SplitAndChunk) {
  // Pieces used differently; the middle one unused (its gradient is zero).
  ExpectGradientsMatch(
      [](Inputs in) -> absl::StatusOr<Variable> {
        std::vector<int64_t> sizes = {1, 2, 2};
        TPX_ASSIGN_OR_RETURN(std::vector<Variable> p, ag::Split(in[0], sizes, 1));
        TPX_ASSIGN_OR_RETURN(Variable a, ag::Scale(p[0], 3.0));
        TPX_ASSIGN_OR_RETURN(Variable c, ag::Mul(p[2], p[2]));
        return ag::Add(a, c);  // [2, 1] + [2, 2]
      },
      {RandomLeaf({2, 5}, 73)});
  ExpectGradientsMatch(
      [](Inputs in) -> absl::StatusOr<Variable> {
        TPX_ASSIGN_OR_RETURN(std::vector<Variable> p, ag::Chunk(in[0], 3, 0));  // 3, 2, 2
        TPX_ASSIGN_OR_RETURN(Variable s, ag::Add(p[1], p[2]));
        TPX_ASSIGN_OR_RETURN(Variable n, ag::Narrow(p[0], 0, 0, 2));
        return ag::Mul(s, n);
      },
      {RandomLeaf({7, 2}, 74)});
  EXPECT_FALSE(ag::Chunk(RandomLeaf({4}, 75), 0, 0).ok());
}

TEST_P(AgOpsTest, IndexSelectEmbeddingLookup) {
  Tensor ids = TestFromVector<int64_t>({2, 0, 2, 3, 2}, {5}).value();  // repeats
  ExpectGradientsMatch([ids](Inputs in) { return ag::IndexSelect(in[0], 0, ids); },
                       {RandomLeaf({4, 3}, 76)});
  Tensor cols = TestFromVector<int32_t>({1, 1, 0}, {3}).value();
  ExpectGradientsMatch([cols](Inputs in) { return ag::IndexSelect(in[0], 1, cols); },
                       {RandomLeaf({2, 2}, 77)});
  // Rows that were never looked up get zero gradient.
  Variable table = RandomLeaf({4, 3}, 78);
  ASSERT_TRUE(Backward(ag::Sum(ag::IndexSelect(table, 0, ids).value()).value()).ok());
  std::vector<float> g = table.grad().ToVector<float>();
  EXPECT_EQ(g[1 * 3], 0.0f);
  EXPECT_EQ(g[2 * 3], 3.0f);
}

// ---- A small model: all the pieces together ----

TEST_P(AgOpsTest, TwoLayerMlpWithCrossEntropyShape) {
  Tensor labels = TestFromVector<int64_t>({0, 2, 1}, {3}).value();
  ExpectGradientsMatch(
      [labels](Inputs in) -> absl::StatusOr<Variable> {
        TPX_ASSIGN_OR_RETURN(Variable h, ag::Linear(in[0], in[1], in[2]));
        TPX_ASSIGN_OR_RETURN(Variable a, ag::Gelu(h));
        TPX_ASSIGN_OR_RETURN(Variable n, ag::LayerNorm(a, Variable(), Variable()));
        TPX_ASSIGN_OR_RETURN(Variable logits, ag::Linear(n, in[3]));
        TPX_ASSIGN_OR_RETURN(Variable logp, ag::LogSoftmax(logits, -1));
        // Pick each row's label: one-hot mask times logp, summed.
        TPX_ASSIGN_OR_RETURN(Tensor classes, TestArange(3));
        TPX_ASSIGN_OR_RETURN(Tensor cls_row, classes.Reshape({1, 3}));
        TPX_ASSIGN_OR_RETURN(Tensor lab_col, labels.Reshape({3, 1}));
        TPX_ASSIGN_OR_RETURN(Tensor not_label, ops::Eq(cls_row, lab_col));
        TPX_ASSIGN_OR_RETURN(not_label, ops::LogicalNot(not_label));
        TPX_ASSIGN_OR_RETURN(Variable picked, ag::MaskedFill(logp, not_label, 0.0));
        TPX_ASSIGN_OR_RETURN(Variable total, ag::Mean(picked));
        return ag::Neg(total);
      },
      {Const({3, 4}, 79), RandomLeaf({5, 4}, 80), RandomLeaf({5}, 81), RandomLeaf({3, 5}, 82)});
}

TEST_P(AgOpsTest, ErrorsAreStatuses) {
  EXPECT_FALSE(ag::Add(RandomLeaf({2, 3}, 83), RandomLeaf({4}, 84)).ok());
  EXPECT_FALSE(ag::Matmul(RandomLeaf({2, 3}, 85), RandomLeaf({2, 3}, 86)).ok());
  EXPECT_FALSE(ag::Sum(RandomLeaf({2}, 87), 3).ok());
  EXPECT_FALSE(ag::Narrow(RandomLeaf({2}, 88), 0, 1, 5).ok());
  EXPECT_FALSE(ag::Sum(Variable(), 0).ok());
}

}  // namespace
}  // namespace tpx
