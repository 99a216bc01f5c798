#include "core/merge_dims.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpx {
namespace {

using ::testing::ElementsAre;
using Strides = std::vector<int64_t>;

MergedDims Merge(const std::vector<int64_t>& shape, const std::vector<Strides>& strides) {
  std::vector<absl::Span<const int64_t>> spans(strides.begin(), strides.end());
  return MergeDims(shape, spans);
}

TEST(MergeDims, ContiguousOperandsBecomeOneDim) {
  MergedDims m = Merge({2, 3, 4}, {{12, 4, 1}, {12, 4, 1}});
  EXPECT_THAT(m.sizes, ElementsAre(24));
  EXPECT_EQ(m.strides[0][0], 1);
  EXPECT_EQ(m.strides[0][1], 1);
  EXPECT_FALSE(m.empty);
}

TEST(MergeDims, TransposedOperandKeepsDimsApart) {
  MergedDims m = Merge({4, 5}, {{5, 1}, {1, 4}});
  EXPECT_THAT(m.sizes, ElementsAre(4, 5));
  EXPECT_EQ(m.strides[0][1], 1);
  EXPECT_EQ(m.strides[1][1], 4);
}

TEST(MergeDims, BroadcastDimsMergeWithEachOtherAndSizeOneDimsDrop) {
  // out [2, 1, 3, 4] contiguous; b broadcast over the first dim ([3, 4] row-major).
  MergedDims m = Merge({2, 1, 3, 4}, {{12, 12, 4, 1}, {0, 0, 4, 1}});
  EXPECT_THAT(m.sizes, ElementsAre(2, 12));
  EXPECT_EQ(m.strides[0][1], 0);
  EXPECT_EQ(m.strides[1][1], 1);
  // A scalar broadcast everywhere: one dim, stride 0.
  MergedDims s = Merge({3, 4}, {{4, 1}, {0, 0}});
  EXPECT_THAT(s.sizes, ElementsAre(12));
  EXPECT_EQ(s.strides[0][1], 0);
}

TEST(MergeDims, SingleElementAndEmptyShapes) {
  EXPECT_TRUE(Merge({1, 1}, {{1, 1}}).sizes.empty());
  EXPECT_TRUE(Merge({}, {{}}).sizes.empty());
  MergedDims e = Merge({3, 0, 2}, {{0, 2, 1}});
  EXPECT_TRUE(e.empty);
  EXPECT_TRUE(e.sizes.empty());
}

}  // namespace
}  // namespace tpx
