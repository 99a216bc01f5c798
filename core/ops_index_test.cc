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

TPX_DEVICE_TEST_SUITE(IndexSelectTest);
TPX_DEVICE_TEST_SUITE(IndexAddTest);

TEST_P(IndexSelectTest, GathersRowsOnAnyDimWithRepeats) {
  Tensor table = *TestArange(12, DType::kF32)->View({4, 3});
  Tensor ids = *TestFromVector<int64_t>({2, 0, 2}, {3});
  Tensor rows = *IndexSelect(table, 0, ids);
  EXPECT_EQ(rows.shape(), (Shape{3, 3}));
  EXPECT_THAT(rows.ToVector<float>(), ElementsAre(6, 7, 8, 0, 1, 2, 6, 7, 8));
  Tensor cols = *IndexSelect(table, -1, *TestFromVector<int32_t>({1, 1}, {2}));
  EXPECT_THAT(cols.ToVector<float>(), ElementsAre(1, 1, 4, 4, 7, 7, 10, 10));
  // Strided source and bf16.
  Tensor t = *table.To(DType::kBF16)->Transpose(0, 1);  // [3, 4]
  EXPECT_THAT(IndexSelect(t, 1, *TestFromVector<int64_t>({3}, {1}))->ToVector<float>(),
              ElementsAre(9, 10, 11));
  EXPECT_EQ(IndexSelect(table, 0, *TestZeros({0}, DType::kI64))->shape(), (Shape{0, 3}));
}

TEST_P(IndexSelectTest, BadIndicesNamePosition) {
  Tensor table = *TestZeros({4, 3});
  absl::Status s = IndexSelect(table, 0, *TestFromVector<int64_t>({1, 4}, {2})).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("IndexSelect: index[1] = 4 is out of range [0, 4)"));
  EXPECT_THAT(std::string(IndexSelect(table, 0, *TestFromVector<int32_t>({-1}, {1}))
                              .status()
                              .message()),
              HasSubstr("index[0] = -1"));
  EXPECT_FALSE(IndexSelect(table, 0, *TestZeros({2})).ok());        // f32 index
  EXPECT_FALSE(IndexSelect(table, 0, *TestZeros({1, 1}, DType::kI64)).ok());  // 2-D
  EXPECT_FALSE(IndexSelect(table, 2, *TestZeros({1}, DType::kI64)).ok());
}

// IndexAdd is the adjoint of IndexSelect: <IndexSelect(t, ids), g> == <t, IndexAdd(0, ids, g)>.
TEST_P(IndexAddTest, RepeatedIndicesAccumulate) {
  Tensor grad_table = *TestZeros({4, 2}, DType::kF32);
  Tensor ids = *TestFromVector<int64_t>({1, 3, 1, 1}, {4});
  Tensor grads = *TestFromVector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2}, DType::kBF16);
  ASSERT_TRUE(IndexAdd(grad_table, 0, ids, grads).ok());  // bf16 src into f32 dst
  EXPECT_THAT(grad_table.ToVector<float>(), ElementsAre(0, 0, 13, 16, 0, 0, 3, 4));
  ASSERT_TRUE(IndexAdd(grad_table, 0, *TestFromVector<int32_t>({0}, {1}),
                       *TestOnes({1, 2}))
                  .ok());
  EXPECT_THAT(grad_table.ToVector<float>(), ElementsAre(1, 1, 13, 16, 0, 0, 3, 4));
}

TEST_P(IndexAddTest, AdjointOfIndexSelectOnInnerDimAndStridedDst) {
  Tensor t = TestRandom({3, 5, 2}, DType::kF32, 1);
  Tensor ids = *TestFromVector<int64_t>({4, 0, 4, 2, 1, 4}, {6});
  Tensor g = TestRandom({3, 6, 2}, DType::kF32, 2);
  double lhs = SumAll(*Mul(*IndexSelect(t, 1, ids), g))->Item();
  // Strided destination: a transposed zero buffer.
  Tensor buf = *TestZeros({5, 3, 2});
  Tensor acc = *buf.Transpose(0, 1);  // [3, 5, 2] view
  ASSERT_TRUE(IndexAdd(acc, 1, ids, g).ok());
  double rhs = SumAll(*Mul(t, acc))->Item();
  EXPECT_NEAR(lhs, rhs, 1e-5);
  EXPECT_NE(SumAll(buf)->Item(), 0.0);  // written through the view
}

TEST_P(IndexAddTest, Errors) {
  Tensor dst = *TestZeros({4, 2});
  absl::Status bad = IndexAdd(dst, 0, *TestFromVector<int64_t>({0, 9}, {2}),
                              *TestZeros({2, 2}));
  EXPECT_THAT(std::string(bad.message()),
              HasSubstr("IndexAdd: index[1] = 9 is out of range [0, 4)"));
  absl::Status shape = IndexAdd(dst, 0, *TestFromVector<int64_t>({0, 1}, {2}),
                                *TestZeros({3, 2}));
  EXPECT_THAT(std::string(shape.message()), HasSubstr("source shape [3, 2] should be [2, 2]"));
  EXPECT_FALSE(IndexAdd(*TestZeros({2}, DType::kBool), 0,
                        *TestFromVector<int64_t>({0}, {1}), *TestZeros({1}, DType::kBool))
                   .ok());
}

}  // namespace
}  // namespace tpx::ops
