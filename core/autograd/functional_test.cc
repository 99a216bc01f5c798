// The tensor-level backward formulas used directly (their gradients are
// checked against finite differences through the ag ops in ops_test.cc).
#include "core/autograd/functional.h"

#include <vector>

#include "core/compare_testutil.h"
#include "core/ops.h"
#include "gtest/gtest.h"

namespace tpx::ag {
namespace {

Tensor T(std::vector<float> values, Shape shape) {
  return Tensor::FromVector<float>(values, std::move(shape)).value();
}

TEST(FunctionalTest, LinearBackwardMatchesHandComputation) {
  Tensor x = T({1, 2, 3, 4, 5, 6}, {1, 2, 3});  // [..., in=3]
  Tensor w = T({1, 0, -1, 2, 1, 0}, {2, 3});    // [out=2, in=3]
  Tensor g = T({1, -1, 2, 0.5f}, {1, 2, 2});
  absl::StatusOr<LinearGrads> d = LinearBackward(g, x, w, {});
  ASSERT_TRUE(d.ok()) << d.status();
  // dx = g W: row0 = 1*[1,0,-1] - 1*[2,1,0] = [-1,-1,-1]; row1 = 2*[1,0,-1] + 0.5*[2,1,0].
  EXPECT_TRUE(TensorsClose(d->input, T({-1, -1, -1, 3, 0.5f, -2}, {1, 2, 3})));
  // dW = g^T x: [1*x0 + 2*x1, -1*x0 + 0.5*x1].
  EXPECT_TRUE(TensorsClose(d->weight, T({9, 12, 15, 1, 0.5f, 0}, {2, 3})));
  EXPECT_TRUE(TensorsClose(d->bias, T({3, -0.5f}, {2})));
  // Only what is asked for.
  absl::StatusOr<LinearGrads> only_dx = LinearBackward(g, Tensor(), w, {true, false, false});
  ASSERT_TRUE(only_dx.ok());
  EXPECT_FALSE(only_dx->weight.defined());
  EXPECT_FALSE(LinearBackward(g, Tensor(), w, {true, true, false}).ok());
}

TEST(FunctionalTest, LayerNormBackwardRowsSumToZero) {
  // Without weight, dx of each row sums to 0 (LayerNorm is shift invariant).
  Tensor x = T({1, 2, 4, 8, -1, 0, 3, 1}, {2, 4});
  LayerNormSaved saved;
  absl::StatusOr<Tensor> y = LayerNormForward(x, Tensor(), Tensor(), 1e-5, &saved);
  ASSERT_TRUE(y.ok()) << y.status();
  Tensor g = T({0.3f, -1, 2, 0.1f, 1, 1, -0.5f, 2}, {2, 4});
  absl::StatusOr<LayerNormGrads> d = LayerNormBackward(g, saved, Tensor(), {});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->weight.defined());
  Tensor row_sums = ops::Sum(d->input, 1).value();
  EXPECT_TRUE(TensorsClose(row_sums, T({0, 0}, {2}), 0, 1e-5));
  EXPECT_TRUE(TensorsClose(d->bias, T({1.3f, 0, 1.5f, 2.1f}, {4}), 1e-6, 1e-6));
  EXPECT_FALSE(LayerNormBackward(T({1}, {1}), saved, Tensor(), {}).ok());
}

TEST(FunctionalTest, SoftmaxBackwardIsOrthogonalToConstants) {
  // A gradient that is constant along dim does not change softmax outputs.
  Tensor y = ops::Softmax(T({1, 2, 3, 0, 0, 1}, {2, 3}), 1).value();
  Tensor g = T({5, 5, 5, -2, -2, -2}, {2, 3});
  Tensor dx = SoftmaxBackward(g, y, 1).value();
  EXPECT_TRUE(TensorsClose(dx, Tensor::Zeros({2, 3}).value(), 0, 1e-6));
  Tensor logy = ops::LogSoftmax(T({1, 2, 3, 0, 0, 1}, {2, 3}), 1).value();
  // d/dx of sum(log_softmax) = 1 - n * softmax.
  Tensor ones = Tensor::Ones({2, 3}).value();
  Tensor expected = ops::AddScalar(ops::Scale(y, -3.0).value(), 1.0).value();
  EXPECT_TRUE(TensorsClose(LogSoftmaxBackward(ones, logy, 1).value(), expected, 1e-5, 1e-6));
}

}  // namespace
}  // namespace tpx::ag
