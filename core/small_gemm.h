// f32 products with a narrow output (n = 16, 32, 48 or 64 columns) and a
// short reduction, on AVX-512 CPUs (chosen at run time): attention's
// per-head products C[T, hd] = P[T, T] V[T, hd] and their gradients, where
// oneDNN's f32 kernels reach about half the core's FMA peak. B stays in L1
// and every C row block lives in registers for the whole reduction. Also
// products of a few rows with any reduction (a decoding step's attention
// output, one query's probabilities times each head's cached values), which
// read B once.
//
//   if (SmallGemmF32Applies(trans_b, m, n, k)) {
//     TPX_RETURN_IF_ERROR(SmallGemmF32(batch, trans_a, m, n, k, a, lda, stride_a,
//                                      b, ldb, stride_b, c, ldc, stride_c));
//   }
#ifndef TPX_CORE_SMALL_GEMM_H_
#define TPX_CORE_SMALL_GEMM_H_

#include <cstdint>

namespace tpx {

// True when this CPU has AVX-512 and the product fits the kernel: B not
// transposed, n in {16, 32, 48, 64}, and B (k x n floats) at most 32 KiB
// or m no more than one register block's rows (6 to 14, by n).
bool SmallGemmF32Applies(bool trans_b, int64_t m, int64_t n, int64_t k);

// For i in [0, batch): C_i = op(A_i) B_i (alpha 1, beta 0), row-major f32,
// as tpx::GemmBatched; only where SmallGemmF32Applies. Runs on the GEMM
// threads (GemmThreads()).
void SmallGemmF32(int64_t batch, bool trans_a, int64_t m, int64_t n, int64_t k, const float* a,
                  int64_t lda, int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b,
                  float* c, int64_t ldc, int64_t stride_c);

}  // namespace tpx

#endif  // TPX_CORE_SMALL_GEMM_H_
