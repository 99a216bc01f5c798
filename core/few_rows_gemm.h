// f32 products of at most kFewRowsMax rows with B stored transposed, on
// AVX-512 CPUs (chosen at run time): a decoding step's linear layers and
// logits, C[m, n] = A[m, k] W[n, k]^T for one or a few tokens, and its
// attention scores, the new query of each head against that head's cached
// keys. oneDNN's matmul spends most of such a call on its own overhead
// (1 x 128 x 384 at about a tenth of the FMA peak), and the scores' n grows
// by one every token, so each of their calls would also generate a new
// primitive. Here each output is a dot product of two contiguous rows, four
// of B's rows at a time.
//
//   if (FewRowsGemmF32Applies(trans_a, trans_b, m)) {
//     FewRowsGemmF32(batch, m, n, k, a, lda, stride_a, b, ldb, stride_b, c, ldc, stride_c);
//   }
#ifndef TPX_CORE_FEW_ROWS_GEMM_H_
#define TPX_CORE_FEW_ROWS_GEMM_H_

#include <cstdint>

namespace tpx {

inline constexpr int64_t kFewRowsMax = 4;

// True when this CPU has AVX-512, A is not transposed, B is, and m is 1 to
// kFewRowsMax.
bool FewRowsGemmF32Applies(bool trans_a, bool trans_b, int64_t m);

// For i in [0, batch): C_i = A_i B_i^T (alpha 1, beta 0), plus bias[n] on
// every row unless bias is null, row-major f32, as tpx::GemmBatched: A_i [m, k] at a + i *
// stride_a, B_i stored [n, k] at b + i * stride_b, C_i at c + i * stride_c; only where
// FewRowsGemmF32Applies. Large calls are split by rows of B (of all the
// products) between the GEMM threads (GemmThreads()); every output comes
// from the same code on any thread, so the bits do not depend on the
// thread count.
void FewRowsGemmF32(int64_t batch, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                    int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b, float* c,
                    int64_t ldc, int64_t stride_c, const float* bias = nullptr);

}  // namespace tpx

#endif  // TPX_CORE_FEW_ROWS_GEMM_H_
