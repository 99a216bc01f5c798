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

TPX_DEVICE_TEST_SUITE(SplitTest);

TEST(SplitSizesTest, FirstPiecesGetTheRemainder) {
  EXPECT_THAT(SplitSizes(10, 4), ElementsAre(3, 3, 2, 2));
  EXPECT_THAT(SplitSizes(8, 4), ElementsAre(2, 2, 2, 2));
  EXPECT_THAT(SplitSizes(2, 4), ElementsAre(1, 1, 0, 0));
  EXPECT_THAT(SplitSizes(0, 3), ElementsAre(0, 0, 0));
  EXPECT_THAT(SplitSizes(5, 1), ElementsAre(5));
}

// Uneven split then concat on every dim gives the input back, and the
// pieces are views of it.
TEST_P(SplitTest, UnevenSplitConcatRoundTripOnEveryDim) {
  Tensor x = TestRandom({5, 7, 6}, DType::kF32, 1);
  for (int64_t dim = 0; dim < 3; ++dim) {
    const int64_t n = x.size(dim);
    std::vector<int64_t> sizes = {1, 0, n - 3, 2};
    std::vector<Tensor> parts = *Split(x, sizes, dim);
    ASSERT_EQ(parts.size(), 4u);
    for (size_t i = 0; i < parts.size(); ++i) {
      EXPECT_EQ(parts[i].size(dim), sizes[i]);
      EXPECT_TRUE(parts[i].SharesStorageWith(x));
    }
    Tensor back = *Concat(parts, dim);
    EXPECT_TRUE(TensorsClose(back, x, 0, 0)) << "dim " << dim;
    // Negative dim names the same dim.
    Tensor back_neg = *Concat(*Split(x, sizes, dim - 3), dim - 3);
    EXPECT_TRUE(TensorsClose(back_neg, x, 0, 0));
  }
}

TEST_P(SplitTest, ChunkFollowsSplitSizes) {
  Tensor x = *TestArange(10, DType::kI64);
  std::vector<Tensor> chunks = *Chunk(x, 4, 0);
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_THAT(chunks[0].ToVector<int64_t>(), ElementsAre(0, 1, 2));
  EXPECT_THAT(chunks[1].ToVector<int64_t>(), ElementsAre(3, 4, 5));
  EXPECT_THAT(chunks[2].ToVector<int64_t>(), ElementsAre(6, 7));
  EXPECT_THAT(chunks[3].ToVector<int64_t>(), ElementsAre(8, 9));
  std::vector<Tensor> many = *Chunk(*TestArange(2), 3, 0);
  EXPECT_EQ(many[2].numel(), 0);
  EXPECT_TRUE(TensorsClose(*Concat(many, 0), *TestArange(2), 0, 0));
}

TEST_P(SplitTest, ChunksOfStridedTensorsConcatBack) {
  Tensor x = *TestRandom({6, 9}, DType::kBF16, 2).Transpose(0, 1);  // [9, 6] strided
  for (int64_t dim : {0, 1}) {
    std::vector<Tensor> chunks = *Chunk(x, 4, dim);
    EXPECT_TRUE(TensorsClose(*Concat(chunks, dim), x, 0, 0));
  }
}

TEST_P(SplitTest, Errors) {
  Tensor x = *TestZeros({4, 3});
  EXPECT_THAT(std::string(Split(x, {1, 2}, 0).status().message()),
              HasSubstr("sizes [1, 2] sum to 3 but dim 0 of shape [4, 3] has size 4"));
  EXPECT_FALSE(Split(x, {5, -1}, 0).ok());
  EXPECT_FALSE(Chunk(x, 0, 0).ok());
  EXPECT_FALSE(Chunk(x, 2, 2).ok());
  Tensor y = *TestZeros({4, 2});
  EXPECT_THAT(std::string(Concat({x, y}, 0).status().message()),
              HasSubstr("tensor 1 (f32[4, 2]) does not match tensor 0 (f32[4, 3]) outside dim 0"));
  EXPECT_TRUE(Concat({x, y}, 1).ok());
  EXPECT_FALSE(Concat({x, *x.To(DType::kBF16)}, 0).ok());
  EXPECT_FALSE(Concat({}, 0).ok());
}

}  // namespace
}  // namespace tpx::ops
