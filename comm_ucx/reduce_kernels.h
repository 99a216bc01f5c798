// Element-wise reductions of the UCX plugin, per dtype.
//
// Reductions run in an accumulation type: f32 for f32/bf16/f16, i32 and i64
// for themselves. Half-precision inputs are widened once (ToAcc), reduced in
// f32 and rounded once at the end (FromAcc), so the result does not depend on
// how many partial sums travelled between ranks.
//
//   std::vector<float> acc(n);
//   ToAcc(TPX_DTYPE_BF16, input, acc.data(), n);
//   ReduceAcc(TPX_DTYPE_BF16, TPX_REDUCE_SUM, acc.data(), partial, n);
//   FromAcc(TPX_DTYPE_BF16, TPX_REDUCE_AVG, world, acc.data(), output, n);
#ifndef TPX_COMM_UCX_REDUCE_KERNELS_H_
#define TPX_COMM_UCX_REDUCE_KERNELS_H_

#include <cstddef>

#include "comm/plugin_abi.h"
#include "comm/plugin_support.h"

namespace tpx::ucx {

// Bytes per element of `dtype` itself and of its accumulation type.
using ::tpx::plugin::ElementSize;
size_t AccElementSize(tpx_dtype_t dtype);
// Whether reductions are defined for `dtype` (not for bool).
bool Reducible(tpx_dtype_t dtype);

// acc[i] = widen(src[i]). `acc` may equal `src` when the types match.
void ToAcc(tpx_dtype_t dtype, const void* src, void* acc, size_t n);
// acc[i] = acc[i] (op) in[i], both in the accumulation type. AVG sums.
void ReduceAcc(tpx_dtype_t dtype, tpx_reduce_op_t op, void* acc, const void* in, size_t n);
// out[i] = widen(in[i]) (op) partial[i]; `out` and `partial` are in the
// accumulation type, `in` in `dtype`. `out` may alias `in` or `partial`.
void ReduceInto(tpx_dtype_t dtype, tpx_reduce_op_t op, void* out, const void* in,
                const void* partial, size_t n);
// dst[i] = narrow(acc[i]), dividing by `world` first for AVG (integer
// division for integer types). `dst` may equal `acc` when the types match.
void FromAcc(tpx_dtype_t dtype, tpx_reduce_op_t op, int world, const void* acc, void* dst,
             size_t n);
// out[i] = narrow(widen(in[i]) (op) widen(partial[i])), all three in
// `dtype`: ReduceInto then FromAcc, with the same bits, but for bf16 in one
// pass and for f16 in cache-sized pieces through a buffer on the stack,
// instead of three passes over an accumulation array. `out` may be `in` or
// `partial` (each element or piece is read before it is written), not
// overlap them otherwise.
void ReduceTwo(tpx_dtype_t dtype, tpx_reduce_op_t op, int world, void* out, const void* in,
               const void* partial, size_t n);

}  // namespace tpx::ucx

#endif  // TPX_COMM_UCX_REDUCE_KERNELS_H_
