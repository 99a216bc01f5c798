// f32 products of at most kFewRowsMax rows with B stored transposed, on
// AVX-512 CPUs (chosen at run time): a decoding step's linear layers and
// logits, C[m, n] = A[m, k] W[n, k]^T for one or a few tokens. oneDNN's
// matmul spends most of such a call on its own overhead (1 x 128 x 384 at
// about a tenth of the FMA peak); here each output is a dot product of two
// contiguous rows, four of W's rows at a time.
//
//   if (FewRowsGemmF32Applies(trans_a, trans_b, m)) {
//     FewRowsGemmF32(m, n, k, a, lda, b, ldb, c, ldc);
//   }
#ifndef TPX_CORE_FEW_ROWS_GEMM_H_
#define TPX_CORE_FEW_ROWS_GEMM_H_

#include <cstdint>

namespace tpx {

inline constexpr int64_t kFewRowsMax = 4;

// True when this CPU has AVX-512, A is not transposed, B is, and m is 1 to
// kFewRowsMax.
bool FewRowsGemmF32Applies(bool trans_a, bool trans_b, int64_t m);

// C = A B^T (alpha 1, beta 0), row-major f32: A [m, k], B stored [n, k];
// only where FewRowsGemmF32Applies. Large B is split by rows between the
// GEMM threads (GemmThreads()).
void FewRowsGemmF32(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                    int64_t ldb, float* c, int64_t ldc);

}  // namespace tpx

#endif  // TPX_CORE_FEW_ROWS_GEMM_H_
