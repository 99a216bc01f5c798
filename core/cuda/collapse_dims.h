// Host-side preparation of elementwise CUDA launches: turns a shape and the
// strides of each operand over it into a StridedLayout with as few dims as
// possible, by the rule the CPU loops use (core/merge_dims.h).
//
//   // out and a transposed input, both [4, 5]:
//   TPX_ASSIGN_OR_RETURN(StridedLayout l,
//                        CollapseDims({4, 5}, {{5, 1}, {1, 4}}, "Copy"));
//   // l.rank == 2; with two contiguous operands it would be 1 (contiguous).
//
// Size-1 dims are dropped and a dim is merged into the one outside it when
// that is contiguous with it for every operand (outer stride == inner stride
// * inner size), so contiguous operands become one flat dim and broadcast
// (stride 0) dims merge with each other.
#ifndef TPX_CORE_CUDA_COLLAPSE_DIMS_H_
#define TPX_CORE_CUDA_COLLAPSE_DIMS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/cuda/strided_layout.h"

namespace tpx::cuda {

// `strides` holds one span per operand (at most StridedLayout::kMaxOperands),
// each with shape.size() element strides (0 for broadcast). Errors name `op`:
// InvalidArgument for mismatched arguments, Unimplemented when more than
// StridedLayout::kMaxDims dims remain after collapsing.
absl::StatusOr<StridedLayout> CollapseDims(absl::Span<const int64_t> shape,
                                           absl::Span<const absl::Span<const int64_t>> strides,
                                           const char* op);

}  // namespace tpx::cuda

#endif  // TPX_CORE_CUDA_COLLAPSE_DIMS_H_
