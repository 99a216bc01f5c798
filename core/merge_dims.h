// The loop nest of an elementwise iteration over `shape` with several strided
// operands, as short as possible: size-1 dims are dropped and a dim is merged
// into the one outside it when every operand steps through the pair as one
// dim (outer stride == inner stride * inner size). Contiguous operands become
// one dim; broadcast (stride-0) dims merge with each other. Shared by the CPU
// loops (core/cpu/loops.h) and the CUDA launch layouts (core/cuda/collapse_dims.h).
//
//   // out [4, 5] contiguous, a transposed [4, 5] view:
//   MergedDims m = MergeDims({4, 5}, {Span({5, 1}), Span({1, 4})});
//   // m.sizes == {4, 5}; both contiguous would give m.sizes == {20}.
#ifndef TPX_CORE_MERGE_DIMS_H_
#define TPX_CORE_MERGE_DIMS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace tpx {

inline constexpr size_t kMaxMergeOperands = 4;

struct MergedDims {
  // Outermost first; empty when every dim has size 1 (one element).
  std::vector<int64_t> sizes;
  // strides[d][k]: operand k's element stride along merged dim d (0 past the
  // operands given).
  std::vector<std::array<int64_t, kMaxMergeOperands>> strides;
  // Some dim has size 0: there is nothing to visit.
  bool empty = false;
};

// `strides` holds one span per operand (at most kMaxMergeOperands), each of
// shape.size() element strides; the caller guarantees both.
inline MergedDims MergeDims(absl::Span<const int64_t> shape,
                            absl::Span<const absl::Span<const int64_t>> strides) {
  MergedDims m;
  const size_t operands = strides.size();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) {
      m.empty = true;
      m.sizes.clear();
      m.strides.clear();
      return m;
    }
    if (shape[d] == 1) continue;
    std::array<int64_t, kMaxMergeOperands> s{};
    for (size_t k = 0; k < operands; ++k) s[k] = strides[k][d];
    if (!m.sizes.empty()) {
      bool mergeable = true;
      for (size_t k = 0; k < operands; ++k) mergeable &= m.strides.back()[k] == s[k] * shape[d];
      if (mergeable) {
        m.sizes.back() *= shape[d];
        m.strides.back() = s;
        continue;
      }
    }
    m.sizes.push_back(shape[d]);
    m.strides.push_back(s);
  }
  return m;
}

}  // namespace tpx

#endif  // TPX_CORE_MERGE_DIMS_H_
