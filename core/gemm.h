// General matrix multiply on the CPU, hiding which BLAS library does it.
//
//   // C[m, n] = alpha * A[m, k] @ B[n, k]^T + beta * C, all row-major f32
//   TPX_RETURN_IF_ERROR(Gemm(false, true, m, n, k, 1.0f, DType::kF32, a, k, b, k,
//                            0.0f, DType::kF32, c, n));
//
// Backend: oneDNN's matmul primitive (cached per shape), for f32 and for
// bf16 inputs with f32 accumulation (AVX-512 BF16 or AMX where the CPU
// has them) and an f32 or bf16 C. Strides, alpha and beta go to the library:
// no copies or conversions on the f32 and bf16 paths. f16 inputs have no
// library kernel on this CPU: they are widened to f32 scratch copies and run
// on the f32 path (f16 C is rounded once at the end). f32 products with a
// narrow C (16-64 columns, alpha 1, beta 0: attention's per-head products)
// run on a register-blocked AVX-512 kernel instead (core/small_gemm.h), where
// the CPU has AVX-512, and products of one to four rows (a decoding step's
// layers, with or without a bias, and its attention) on tpx's own f32 and
// bf16 kernels (core/few_rows_gemm.h). Products with A stored transposed and
// B not (weight gradients X^T dY) avoid the matmul primitive's slow copy of
// a transposed A: f32 goes through oneDNN's sgemm driver (on two threads,
// mid-sized ones as two one-thread calls on halves of C), bf16 through a
// packed AVX-512 BF16 kernel where the CPU has one (core/bf16_gemm.h),
// which also takes bf16 products of a plain A and B with k >= 512 (input
// gradients dY W among them) and, on two or more threads, those with a
// narrower k, C at most 128 wide and beta 0 (the same bits as oneDNN's).
// Where oneDNN runs bf16 on AMX tiles (Intel Xeon from Sapphire Rapids on,
// which run vdpbf16ps at half the f32 FMA rate) every bf16 product goes to
// oneDNN instead, its threads each taking a range of C, so that bf16
// results do not depend on the thread count there either.
// Every kernel picks its ISA at run time.
//
// GemmBias adds a bias row in the GEMM's own epilogue, so a linear layer's
// output is written once instead of seeded with the bias and read back.
// GemmBatched runs a strided batch of equal-shaped products as one library
// call, so many small ones (attention's per-head products) share one
// primitive and one thread team instead of paying per-call overhead each.
//
// Threads: SetGemmThreads(n) applies to all later calls from any thread;
// the default is the TPX_NUM_THREADS environment variable if set, else all
// cores; OMP_THREAD_LIMIT caps it. A thread that runs GEMMs has OpenMP's
// dynamic team sizes turned off (oneDNN needs the team it planned for).
#ifndef TPX_CORE_GEMM_H_
#define TPX_CORE_GEMM_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "core/dtype.h"

namespace tpx {

// Row-major C[m, n] = alpha * op(A) @ op(B) + beta * C, where op(A) is
// [m, k] (A stored [k, m] when trans_a) and op(B) is [k, n] (B stored [n, k]
// when trans_b). lda/ldb/ldc are row strides in elements. ab_dtype is the
// dtype of A and B (f32, bf16, f16); c_dtype is f32, or equal to ab_dtype.
// With beta == 0, C is not read (may hold garbage/NaN).
// Errors: unsupported dtypes, negative sizes, leading dims too small.
absl::Status Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  DType ab_dtype, const void* a, int64_t lda, const void* b, int64_t ldb,
                  float beta, DType c_dtype, void* c, int64_t ldc);

// Row-major C[m, n] = op(A) @ op(B) + bias, where bias[n] is added to every
// row; bias and C have A's dtype (f32, bf16 or f16), accumulation is f32.
// Errors: as Gemm.
absl::Status GemmBias(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      DType ab_dtype, const void* a, int64_t lda, const void* b, int64_t ldb,
                      const void* bias, void* c, int64_t ldc);

// For i in [0, batch): C_i = alpha * op(A_i) @ op(B_i) + beta * C_i, where
// A_i = a + i * stride_a elements (likewise B_i, C_i) and each product is as
// in Gemm. The C_i must not overlap (stride_c >= (m - 1) * ldc + n).
// Errors: as Gemm, plus batch < 0, negative strides or overlapping C.
absl::Status GemmBatched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n,
                         int64_t k, float alpha, DType ab_dtype, const void* a, int64_t lda,
                         int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b,
                         float beta, DType c_dtype, void* c, int64_t ldc, int64_t stride_c);

// Number of threads GEMMs use (>= 1). Thread-safe.
void SetGemmThreads(int threads);
int GemmThreads();

// A product (a batch: all of it together) of fewer multiply-adds than this
// runs on the calling thread alone, where starting and joining a team of
// threads costs more than splitting it saves. Default 2^20; 0 splits every
// product as the thread count allows (tests of the split paths use that).
// Applies to all later calls from any thread. Results do not depend on it
// where they do not depend on the thread count.
void SetGemmMinTeamMacs(int64_t macs);
int64_t GemmMinTeamMacs();

// "onednn" — for logs and benchmarks.
std::string_view GemmBackendName();

}  // namespace tpx

#endif  // TPX_CORE_GEMM_H_
