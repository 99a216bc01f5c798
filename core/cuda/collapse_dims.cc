#include "core/cuda/collapse_dims.h"

#include <array>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/merge_dims.h"

namespace tpx::cuda {
namespace {

std::string Describe(absl::Span<const int64_t> shape,
                     absl::Span<const absl::Span<const int64_t>> strides) {
  std::string s = absl::StrCat("shape [", absl::StrJoin(shape, ", "), "], strides");
  for (absl::Span<const int64_t> st : strides)
    absl::StrAppend(&s, " [", absl::StrJoin(st, ", "), "]");
  return s;
}

}  // namespace

static_assert(StridedLayout::kMaxOperands <= kMaxMergeOperands);

absl::StatusOr<StridedLayout> CollapseDims(absl::Span<const int64_t> shape,
                                           absl::Span<const absl::Span<const int64_t>> strides,
                                           const char* op) {
  const size_t operands = strides.size();
  if (operands == 0 || operands > StridedLayout::kMaxOperands) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", operands, " operands; CUDA kernels take 1 to ", StridedLayout::kMaxOperands));
  }
  for (absl::Span<const int64_t> st : strides) {
    if (st.size() != shape.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": strides do not match the rank of ", Describe(shape, strides)));
    }
  }
  StridedLayout layout;
  layout.numel = 1;
  for (int64_t size : shape) {
    if (size < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": negative size in ", Describe(shape, strides)));
    }
    layout.numel *= size;
  }
  if (layout.numel == 0) return layout;  // nothing to visit; rank 0

  const MergedDims merged = MergeDims(shape, strides);
  const std::vector<int64_t>& sizes = merged.sizes;
  if (sizes.size() > static_cast<size_t>(StridedLayout::kMaxDims)) {
    return absl::UnimplementedError(absl::StrCat(
        op, ": CUDA kernels handle at most ", StridedLayout::kMaxDims,
        " dims that cannot be merged; ", Describe(shape, strides), " leaves ", sizes.size(),
        " (make an operand contiguous first)"));
  }
  layout.rank = static_cast<int32_t>(sizes.size());
  for (size_t d = 0; d < sizes.size(); ++d) {
    layout.sizes[d] = sizes[d];
    for (size_t k = 0; k < operands; ++k) layout.strides[k][d] = merged.strides[d][k];
  }
  layout.contiguous = true;
  if (layout.rank == 1) {
    for (size_t k = 0; k < operands; ++k) layout.contiguous &= layout.strides[k][0] == 1;
  } else if (layout.rank > 1) {
    layout.contiguous = false;
  }
  return layout;
}

}  // namespace tpx::cuda
