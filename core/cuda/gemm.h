// General matrix multiply on a CUDA device through cuBLAS, with the same
// row-major conventions as the CPU tpx::Gemm (core/gemm.h).
//
//   TPX_ASSIGN_OR_RETURN(cuda::CublasHandle blas, cuda::CublasHandle::Create(0));
//   // C[m, n] = A[m, k] @ B[n, k]^T, bf16 inputs, f32 C, f32 accumulation
//   TPX_RETURN_IF_ERROR(cuda::Gemm(blas, stream, false, true, m, n, k, 1.0f, DType::kBF16,
//                                  a, k, b, k, 0.0f, DType::kF32, c, n));
//
// A, B and C are device pointers. ab_dtype is f32, bf16 or f16; c_dtype is
// f32 or equal to ab_dtype. Accumulation is always f32 (CUBLAS_COMPUTE_32F:
// f32 inputs are not rounded to TF32). The call only enqueues work on
// `stream`.
#ifndef TPX_CORE_CUDA_GEMM_H_
#define TPX_CORE_CUDA_GEMM_H_

#include <cublas_v2.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/cuda/stream.h"
#include "core/dtype.h"

namespace tpx::cuda {

// One cuBLAS handle bound to a device; not thread-safe (one per thread).
class CublasHandle {
 public:
  static absl::StatusOr<CublasHandle> Create(int device);
  CublasHandle(CublasHandle&& other) noexcept;
  CublasHandle& operator=(CublasHandle&& other) noexcept;
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  ~CublasHandle();

  cublasHandle_t get() const { return handle_; }
  int device() const { return device_; }

 private:
  CublasHandle(cublasHandle_t handle, int device) : handle_(handle), device_(device) {}
  cublasHandle_t handle_ = nullptr;
  int device_ = 0;
};

// Row-major C[m, n] = alpha * op(A) @ op(B) + beta * C; op(A) is [m, k]
// (A stored [k, m] when trans_a), op(B) is [k, n] (B stored [n, k] when
// trans_b); lda/ldb/ldc are row strides in elements.
absl::Status Gemm(const CublasHandle& blas, const Stream& stream, bool trans_a, bool trans_b,
                  int64_t m, int64_t n, int64_t k, float alpha, DType ab_dtype, const void* a,
                  int64_t lda, const void* b, int64_t ldb, float beta, DType c_dtype, void* c,
                  int64_t ldc);

// `batch` products as in Gemm in one cuBLAS call (strided batched): product
// i reads A + i * stride_a, B + i * stride_b and writes C + i * stride_c
// (element strides; 0 shares an A or B across the batch). The C_i must not
// overlap (stride_c >= (m - 1) * ldc + n when batch > 1).
absl::Status GemmBatched(const CublasHandle& blas, const Stream& stream, int64_t batch,
                         bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                         DType ab_dtype, const void* a, int64_t lda, int64_t stride_a,
                         const void* b, int64_t ldb, int64_t stride_b, float beta, DType c_dtype,
                         void* c, int64_t ldc, int64_t stride_c);

}  // namespace tpx::cuda

#endif  // TPX_CORE_CUDA_GEMM_H_
