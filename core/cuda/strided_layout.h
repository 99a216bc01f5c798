// The iteration space of a CUDA elementwise kernel: up to kMaxOperands
// operands walked together over one shape, after collapsing (collapse_dims.h).
// A plain struct passed to kernels by value, so it has no dependencies and is
// shared by host code and device code.
//
//   StridedLayout l = ...;           // from CollapseDims
//   // element i (row-major over l.sizes) of operand k is at
//   // base_k + sum_d coord_d(i) * l.strides[k][d]; with l.contiguous it is
//   // at base_k + i for every operand.
#ifndef TPX_CORE_CUDA_STRIDED_LAYOUT_H_
#define TPX_CORE_CUDA_STRIDED_LAYOUT_H_

#include <cstdint>

namespace tpx::cuda {

struct StridedLayout {
  // Six dims cover every layout tpx makes after merging (attention views are
  // at most 5-D); the struct stays small enough to pass by value.
  static constexpr int kMaxDims = 6;
  static constexpr int kMaxOperands = 4;  // Where: out, cond, a, b

  int32_t rank = 0;                          // dims left after collapsing
  int64_t numel = 0;                         // elements to visit
  bool contiguous = false;                   // every operand at base + i
  int64_t sizes[kMaxDims] = {};              // outermost first
  int64_t strides[kMaxOperands][kMaxDims] = {};  // in elements of each operand
};

}  // namespace tpx::cuda

#endif  // TPX_CORE_CUDA_STRIDED_LAYOUT_H_
