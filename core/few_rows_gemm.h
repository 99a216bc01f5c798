// Products of one to kFewRowsMax rows, the GEMMs of a decoding step: its
// linear layers and logits, C[m, n] = A[m, k] W[n, k]^T (with or without a
// bias) for one or a few tokens, and its attention, the new query of each
// head against that head's cached keys and values. oneDNN's matmul spends
// most of such a call on its own overhead (f32 1 x 128 x 384 at about a
// tenth of the FMA peak), and attention's products change shape every token
// as the cache grows, so each of their calls would also generate a new
// primitive. Here, on AVX-512 CPUs (chosen at run time):
//   - B stored transposed, f32 or bf16: each output is a dot product of two
//     contiguous rows, four of B's rows at a time (bf16 by vdpbf16ps);
//   - B not transposed, bf16 (attention's probabilities times the cached
//     values): A's rows times blocks of 64 of B's columns, widened to f32.
// Sums are f32; a bf16 C is rounded once at the end.
//
//   if (FewRowsGemmApplies(ab_dtype, c_dtype, trans_a, trans_b, m)) {
//     FewRowsGemm(ab_dtype, c_dtype, trans_b, batch, m, n, k, a, lda, stride_a, b, ldb,
//                 stride_b, c, ldc, stride_c);
//   }
#ifndef TPX_CORE_FEW_ROWS_GEMM_H_
#define TPX_CORE_FEW_ROWS_GEMM_H_

#include <cstdint>

#include "core/dtype.h"

namespace tpx {

inline constexpr int64_t kFewRowsMax = 4;

// True when m is 1 to kFewRowsMax, A is not transposed and the CPU runs the
// case: f32 inputs and C with B transposed (AVX-512 F), or bf16 inputs and
// an f32 or bf16 C with either layout of B (AVX-512 BF16).
bool FewRowsGemmApplies(DType ab_dtype, DType c_dtype, bool trans_a, bool trans_b, int64_t m);

// For i in [0, batch): C_i = A_i op(B_i) (alpha 1, beta 0), plus bias[n] (of
// ab_dtype) on every row unless bias is null; row-major, as
// tpx::GemmBatched: A_i [m, k] at a + i * stride_a elements, B_i stored
// [n, k] (trans_b) or [k, n] at b + i * stride_b, C_i at c + i * stride_c.
// Only where FewRowsGemmApplies. Large calls are split by B's rows or
// columns (of all the products) between the GEMM threads (GemmThreads());
// every output comes from the same code on any thread, so the bits do not
// depend on the thread count.
void FewRowsGemm(DType ab_dtype, DType c_dtype, bool trans_b, int64_t batch, int64_t m, int64_t n,
                 int64_t k, const void* a, int64_t lda, int64_t stride_a, const void* b,
                 int64_t ldb, int64_t stride_b, void* c, int64_t ldc, int64_t stride_c,
                 const void* bias = nullptr);

}  // namespace tpx

#endif  // TPX_CORE_FEW_ROWS_GEMM_H_
