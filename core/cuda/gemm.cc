#include "core/cuda/gemm.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/cuda/cuda_status.h"
#include "core/cuda/device_guard.h"
#include "core/status_macros.h"

namespace tpx::cuda {
namespace {

// DTypeName is std::string_view; Debian Abseil's StrCat takes absl::string_view.
std::string Name(DType dtype) { return std::string(DTypeName(dtype)); }

absl::StatusOr<cudaDataType_t> CudaType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("cuda gemm: dtype ", Name(dtype), " is not f32, bf16 or f16"));
  }
}

// cuBLAS's types for one product's operands.
struct ProductTypes {
  cudaDataType_t ab;
  cudaDataType_t c;
};

// "cuda gemm [MxK] @ [KxN] (ab -> c)" for error messages.
std::string ProductName(int64_t m, int64_t n, int64_t k, DType ab_dtype, DType c_dtype) {
  return absl::StrCat("cuda gemm [", m, "x", k, "] @ [", k, "x", n, "] (", Name(ab_dtype),
                      " -> ", Name(c_dtype), ")");
}

// The checks of one product (as tpx::Gemm makes them), then its cuBLAS types;
// errors start with `what`.
absl::StatusOr<ProductTypes> CheckProduct(const std::string& what, bool trans_a, bool trans_b,
                                          int64_t m, int64_t n, int64_t k, DType ab_dtype,
                                          int64_t lda, int64_t ldb, DType c_dtype, int64_t ldc) {
  if (m < 0 || n < 0 || k < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": negative size"));
  }
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (m > kIntMax || n > kIntMax || k > kIntMax || lda > kIntMax || ldb > kIntMax ||
      ldc > kIntMax) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": sizes exceed cuBLAS's int range"));
  }
  const int64_t a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;
  if (lda < std::max<int64_t>(1, a_cols) || ldb < std::max<int64_t>(1, b_cols) ||
      ldc < std::max<int64_t>(1, n)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": leading dimension too small (lda ",
                                                   lda, ", ldb ", ldb, ", ldc ", ldc, ")"));
  }
  if (c_dtype != DType::kF32 && c_dtype != ab_dtype) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": C must be f32 or the input dtype"));
  }
  TPX_ASSIGN_OR_RETURN(cudaDataType_t ab_type, CudaType(ab_dtype));
  TPX_ASSIGN_OR_RETURN(cudaDataType_t c_type, CudaType(c_dtype));
  return ProductTypes{ab_type, c_type};
}

// Runs `call` (a cuBLAS call on blas's handle, returning its status) on
// `stream`, with blas's device current: cuBLAS runs on the current device.
template <typename Call>
absl::Status RunOnStream(const CublasHandle& blas, const Stream& stream, const std::string& what,
                         Call call) {
  DeviceGuard guard(blas.device());
  TPX_RETURN_IF_ERROR(guard.status());
  TPX_RETURN_IF_ERROR(CublasStatus(cublasSetStream(blas.get(), stream.get()), "cublasSetStream"));
  return CublasStatus(call(), what);
}

// cuBLAS is column-major: a row-major [r, c] matrix is its [c, r]
// transpose, so C^T = op(B)^T op(A)^T is computed with A and B swapped.
cublasOperation_t Op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

}  // namespace

absl::StatusOr<CublasHandle> CublasHandle::Create(int device) {
  DeviceGuard guard(device);  // the handle binds to `device`; the caller's stays current
  TPX_RETURN_IF_ERROR(guard.status());
  cublasHandle_t handle = nullptr;
  TPX_RETURN_IF_ERROR(CublasStatus(cublasCreate(&handle), "cublasCreate"));
  // Never silently use reduced-precision tensor-core math for f32, and keep
  // split-K partial sums in f32 for bf16/f16 C (by default cuBLAS may reduce
  // them in C's dtype, rounding more than once unlike the CPU GEMM).
  TPX_RETURN_IF_ERROR(CublasStatus(
      cublasSetMathMode(handle, static_cast<cublasMath_t>(
                                    CUBLAS_DEFAULT_MATH |
                                    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
      "cublasSetMathMode"));
  return CublasHandle(handle, device);
}

CublasHandle::CublasHandle(CublasHandle&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), device_(other.device_) {}

CublasHandle& CublasHandle::operator=(CublasHandle&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) cublasDestroy(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

CublasHandle::~CublasHandle() {
  if (handle_ != nullptr) cublasDestroy(handle_);
}

absl::Status Gemm(const CublasHandle& blas, const Stream& stream, bool trans_a, bool trans_b,
                  int64_t m, int64_t n, int64_t k, float alpha, DType ab_dtype, const void* a,
                  int64_t lda, const void* b, int64_t ldb, float beta, DType c_dtype, void* c,
                  int64_t ldc) {
  const std::string what = ProductName(m, n, k, ab_dtype, c_dtype);
  TPX_ASSIGN_OR_RETURN(ProductTypes types, CheckProduct(what, trans_a, trans_b, m, n, k, ab_dtype,
                                                        lda, ldb, c_dtype, ldc));
  if (m == 0 || n == 0) return absl::OkStatus();
  return RunOnStream(blas, stream, what, [&] {
    return cublasGemmEx(blas.get(), Op(trans_b), Op(trans_a), static_cast<int>(n),
                        static_cast<int>(m), static_cast<int>(k), &alpha, b, types.ab,
                        static_cast<int>(ldb), a, types.ab, static_cast<int>(lda), &beta, c,
                        types.c, static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  });
}

absl::Status GemmBatched(const CublasHandle& blas, const Stream& stream, int64_t batch,
                         bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                         DType ab_dtype, const void* a, int64_t lda, int64_t stride_a,
                         const void* b, int64_t ldb, int64_t stride_b, float beta, DType c_dtype,
                         void* c, int64_t ldc, int64_t stride_c) {
  const std::string what =
      absl::StrCat(ProductName(m, n, k, ab_dtype, c_dtype), " x ", batch, " (batched)");
  if (batch < 0 || stride_a < 0 || stride_b < 0 || stride_c < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": negative batch or strides (a ",
                                                   stride_a, ", b ", stride_b, ", c ", stride_c,
                                                   ")"));
  }
  if (batch > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": batch exceeds cuBLAS's int range"));
  }
  if (batch > 1 && m > 0 && n > 0 && stride_c < (m - 1) * ldc + n) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": C stride ", stride_c, " overlaps products with ldc ", ldc));
  }
  TPX_ASSIGN_OR_RETURN(ProductTypes types, CheckProduct(what, trans_a, trans_b, m, n, k, ab_dtype,
                                                        lda, ldb, c_dtype, ldc));
  if (batch == 0 || m == 0 || n == 0) return absl::OkStatus();
  return RunOnStream(blas, stream, what, [&] {
    return cublasGemmStridedBatchedEx(
        blas.get(), Op(trans_b), Op(trans_a), static_cast<int>(n), static_cast<int>(m),
        static_cast<int>(k), &alpha, b, types.ab, static_cast<int>(ldb), stride_b, a, types.ab,
        static_cast<int>(lda), stride_a, &beta, c, types.c, static_cast<int>(ldc), stride_c,
        static_cast<int>(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  });
}

}  // namespace tpx::cuda
