#include "core/cuda/collapse_dims.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace tpx::cuda {
namespace {

using Strides = std::vector<int64_t>;

// Offset of element i (row-major over the layout) in operand k, the way the
// kernels compute it.
int64_t Offset(const StridedLayout& l, int k, int64_t i) {
  if (l.contiguous) return i;
  int64_t offset = 0;
  for (int d = l.rank - 1; d >= 0; --d) {
    offset += (i % l.sizes[d]) * l.strides[k][d];
    i /= l.sizes[d];
  }
  return offset;
}

// Offset of element i (row-major over shape) in an operand with `strides`,
// straight from the definition.
int64_t Reference(const std::vector<int64_t>& shape, const Strides& strides, int64_t i) {
  int64_t offset = 0;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    offset += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return offset;
}

// Collapses and checks that every operand visits the same elements in the
// same order as the uncollapsed shape.
StridedLayout CollapseAndVerify(const std::vector<int64_t>& shape,
                                const std::vector<Strides>& strides) {
  std::vector<absl::Span<const int64_t>> spans(strides.begin(), strides.end());
  absl::StatusOr<StridedLayout> l = CollapseDims(shape, spans, "Test");
  EXPECT_TRUE(l.ok()) << l.status();
  if (!l.ok()) return {};
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  EXPECT_EQ(l->numel, numel);
  for (size_t k = 0; k < strides.size(); ++k) {
    for (int64_t i = 0; i < numel; ++i) {
      EXPECT_EQ(Offset(*l, static_cast<int>(k), i), Reference(shape, strides[k], i))
          << "operand " << k << ", element " << i;
    }
  }
  return *l;
}

TEST(CollapseDimsTest, ContiguousOperandsBecomeOneFlatDim) {
  StridedLayout l = CollapseAndVerify({2, 3, 4}, {{12, 4, 1}, {12, 4, 1}});
  EXPECT_EQ(l.rank, 1);
  EXPECT_EQ(l.sizes[0], 24);
  EXPECT_TRUE(l.contiguous);
}

TEST(CollapseDimsTest, ScalarAndSizeOneDims) {
  StridedLayout scalar = CollapseAndVerify({}, {{}, {}});
  EXPECT_EQ(scalar.rank, 0);
  EXPECT_EQ(scalar.numel, 1);
  EXPECT_TRUE(scalar.contiguous);
  // Size-1 dims carry arbitrary strides (views) and are dropped.
  StridedLayout l = CollapseAndVerify({1, 5, 1}, {{99, 1, 7}, {0, 1, 3}});
  EXPECT_EQ(l.rank, 1);
  EXPECT_TRUE(l.contiguous);
}

TEST(CollapseDimsTest, EmptyShapeVisitsNothing) {
  std::vector<Strides> strides = {{3, 1}, {3, 1}};
  std::vector<absl::Span<const int64_t>> spans(strides.begin(), strides.end());
  absl::StatusOr<StridedLayout> l = CollapseDims({0, 3}, spans, "Test");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->numel, 0);
}

TEST(CollapseDimsTest, BroadcastOperandKeepsStrideZero) {
  // out [4, 6] contiguous, a row vector [6] broadcast over dim 0.
  StridedLayout l = CollapseAndVerify({4, 6}, {{6, 1}, {0, 1}});
  EXPECT_EQ(l.rank, 2);
  EXPECT_FALSE(l.contiguous);
  EXPECT_EQ(l.strides[1][0], 0);
  // A scalar broadcast to everything: out still merges, and so does stride 0.
  StridedLayout s = CollapseAndVerify({3, 4, 5}, {{20, 5, 1}, {0, 0, 0}});
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(s.sizes[0], 60);
  EXPECT_EQ(s.strides[1][0], 0);
  EXPECT_FALSE(s.contiguous);
}

TEST(CollapseDimsTest, TransposedViewIsNotMerged) {
  // dst contiguous [3, 4], src the transpose of a contiguous [4, 3].
  StridedLayout l = CollapseAndVerify({3, 4}, {{4, 1}, {1, 3}});
  EXPECT_EQ(l.rank, 2);
  EXPECT_FALSE(l.contiguous);
  // The contiguous leading dims of a [2, 3, 4] -> [2, 4, 3] permute merge
  // only where both operands allow it: dim 0 stays separate from the swap.
  StridedLayout p = CollapseAndVerify({2, 4, 3}, {{12, 3, 1}, {12, 1, 4}});
  EXPECT_EQ(p.rank, 3);
}

TEST(CollapseDimsTest, NarrowedRowsMergeOnlyInside) {
  // Columns [1, 4) of a [5, 8] matrix (row stride 8) into a contiguous [5, 3]:
  // rows cannot merge (8 != 3), but a [5, 2, 3] view of rows of 6 can merge
  // its inner dims.
  StridedLayout l = CollapseAndVerify({5, 3}, {{3, 1}, {8, 1}});
  EXPECT_EQ(l.rank, 2);
  StridedLayout m = CollapseAndVerify({5, 2, 3}, {{6, 3, 1}, {8, 3, 1}});
  EXPECT_EQ(m.rank, 2);
  EXPECT_EQ(m.sizes[0], 5);
  EXPECT_EQ(m.sizes[1], 6);
}

TEST(CollapseDimsTest, FourOperands) {
  // Where: out, cond broadcast along dim 1, a transposed, b contiguous.
  StridedLayout l =
      CollapseAndVerify({3, 4, 2}, {{8, 2, 1}, {2, 0, 1}, {1, 6, 3}, {8, 2, 1}});
  EXPECT_EQ(l.rank, 3);
}

TEST(CollapseDimsTest, TooManyDimsIsUnimplementedAndNamesTheOp) {
  // Seven dims of size 2 with strides 6^k (every other row and more
  // skipped): nothing merges.
  std::vector<int64_t> shape(7, 2);
  Strides gapped = {46656, 7776, 1296, 216, 36, 6, 1};
  Strides dense = {64, 32, 16, 8, 4, 2, 1};
  std::vector<absl::Span<const int64_t>> spans = {dense, gapped};
  absl::StatusOr<StridedLayout> l = CollapseDims(shape, spans, "Exp");
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(l.status().message().find("Exp"), std::string::npos) << l.status();
  // The same shape with both operands contiguous is fine.
  spans = {dense, dense};
  EXPECT_TRUE(CollapseDims(shape, spans, "Exp").ok());
  // Six unmergeable dims are the limit and still work.
  StridedLayout six =
      CollapseAndVerify({2, 2, 2, 2, 2, 2}, {{32, 16, 8, 4, 2, 1}, {243, 81, 27, 9, 3, 1}});
  EXPECT_EQ(six.rank, 6);
}

TEST(CollapseDimsTest, RejectsMismatchedArguments) {
  Strides two = {3, 1}, one = {1};
  std::vector<absl::Span<const int64_t>> spans = {two, one};
  EXPECT_EQ(CollapseDims({2, 3}, spans, "Add").status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<absl::Span<const int64_t>> five(5, absl::Span<const int64_t>(two));
  EXPECT_EQ(CollapseDims({2, 3}, five, "Add").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpx::cuda
