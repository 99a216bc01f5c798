#include "core/compare.h"

#include <cmath>

#include "core/compare_testutil.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpx {
namespace {

using ::testing::HasSubstr;

TEST(CompareTest, CloseWithinTolerance) {
  Tensor a = *Tensor::FromVector<float>({1.0f, 2.0f, 3.0f}, {3});
  Tensor b = *Tensor::FromVector<float>({1.0f, 2.00001f, 3.0f}, {3}, DType::kF32);
  EXPECT_TRUE(TensorsClose(a, b, 1e-4, 0));
  EXPECT_TRUE(AllClose(a, b, 1e-4, 0).ok());
  // Different dtypes compare by value.
  EXPECT_TRUE(TensorsClose(*a.To(DType::kBF16), a, 0, 0));
}

TEST(CompareTest, ReportsWorstElement) {
  Tensor a = *Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = *Tensor::FromVector<float>({1, 2, 3, 4, 5.5f, 6.1f}, {2, 3});
  TensorComparison c = CompareTensors(a, b, 0, 0.01);
  EXPECT_FALSE(c.close);
  EXPECT_EQ(c.mismatches, 2);
  EXPECT_EQ(c.worst_index, (std::vector<int64_t>{1, 1}));
  EXPECT_DOUBLE_EQ(c.worst_actual, 5.0);
  EXPECT_DOUBLE_EQ(c.worst_expected, 5.5);
  EXPECT_NEAR(c.max_abs_diff, 0.5, 1e-6);
  EXPECT_NEAR(c.max_rel_diff, 0.5 / 5.5, 1e-6);
  EXPECT_THAT(c.message, HasSubstr("worst at [1, 1]"));
  EXPECT_THAT(std::string(AllClose(a, b).message()), HasSubstr("2 of 6 elements"));
  EXPECT_FALSE(TensorsClose(a, b));
}

TEST(CompareTest, ShapeMismatchNaNAndInf) {
  Tensor a = *Tensor::Zeros({2, 3});
  Tensor b = *Tensor::Zeros({3, 2});
  TensorComparison c = CompareTensors(a, b, 1, 1);
  EXPECT_FALSE(c.close);
  EXPECT_THAT(c.message, HasSubstr("[2, 3]"));
  Tensor n1 = *Tensor::FromVector<float>({NAN, INFINITY}, {2});
  Tensor n2 = *Tensor::FromVector<float>({NAN, INFINITY}, {2});
  EXPECT_TRUE(TensorsClose(n1, n2));
  Tensor n3 = *Tensor::FromVector<float>({0.0f, INFINITY}, {2});
  EXPECT_FALSE(TensorsClose(n1, n3, 1, 1));
  Tensor n4 = *Tensor::FromVector<float>({NAN, -INFINITY}, {2});
  EXPECT_FALSE(TensorsClose(n1, n4, 1, 1));
}

}  // namespace
}  // namespace tpx
