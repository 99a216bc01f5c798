// bf16 products C = alpha * op(A) op(B) + beta * C with at most one operand
// stored transposed: a linear layer's weight gradient dW = X^T dY and
// attention's dV = P^T dO (A transposed), its input gradient dX = dY W
// (neither) and its forward product Y = X W^T (B transposed), on CPUs with
// AVX-512 BF16 (chosen at run time). B is packed, one slice of the
// reduction at a time, into k-pairs (the layout vdpbf16ps reads) in
// cache-sized buffers (a transposed B by 16 x 16 transposes of 32-bit
// words); a transposed A is packed likewise (oneDNN's matmul copies one
// into its own layout at a fraction of its kernel's speed), a plain A's
// rows already hold the k-pairs and are read in place. 6 x 64
// blocks of C accumulate in registers. Products of bf16 values are exact in
// f32 and are accumulated in f32 (across slices too, for a bf16 C).
//
//   if (Bf16GemmApplies()) {
//     TPX_RETURN_IF_ERROR(Bf16Gemm(trans_a, trans_b, batch, m, n, k, alpha, a, lda, stride_a,
//                                  b, ldb, stride_b, beta, c_dtype, c, ldc, stride_c));
//   }
#ifndef TPX_CORE_BF16_GEMM_H_
#define TPX_CORE_BF16_GEMM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/dtype.h"

namespace tpx {

// True when this CPU has AVX-512 BF16 (and the AVX-512 F/BW it builds on).
bool Bf16GemmApplies();

// For i in [0, batch): C_i[m, n] = alpha * op(A_i) op(B_i) + beta * C_i,
// where A_i (bf16; stored [k, m] when trans_a, else [m, k]; row stride lda)
// = a + i * stride_a elements, B_i (bf16; stored [n, k] when trans_b, else
// [k, n]; row stride ldb) = b + i * stride_b, C_i (c_dtype f32 or bf16, row
// stride ldc) = c + i * stride_c elements. With beta == 0, C is not read.
// Arguments are as checked by tpx::GemmBatched, not both trans_a and
// trans_b; only where Bf16GemmApplies.
// Runs on the calling thread's OpenMP team size (omp_get_max_threads(),
// which tpx::Gemm sets: GemmThreads(), or one for a small product); the
// bits of C do not depend on the number of threads. Errors: no memory for
// the packed operands.
absl::Status Bf16Gemm(bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
                      float alpha, const uint16_t* a, int64_t lda, int64_t stride_a,
                      const uint16_t* b, int64_t ldb, int64_t stride_b, float beta, DType c_dtype,
                      void* c, int64_t ldc, int64_t stride_c);

}  // namespace tpx

#endif  // TPX_CORE_BF16_GEMM_H_
