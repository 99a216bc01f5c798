#include "core/cuda/gemm.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/cuda/copy.h"
#include "core/cuda/cuda_status.h"
#include "core/cuda/device_allocator.h"
#include "core/cuda/stream.h"
#include "core/dtype.h"
#include "gtest/gtest.h"

namespace tpx::cuda {
namespace {

// Host values stored in `dtype` (raw bytes) and as the floats they represent.
struct Matrix {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

Matrix MakeMatrix(DType dtype, int64_t elements, int seed) {
  Matrix m;
  m.values.resize(elements);
  m.bytes.resize(elements * SizeOf(dtype));
  for (int64_t i = 0; i < elements; ++i) {
    float v = std::sin(0.7f * i + seed) * 2.0f;
    if (dtype == DType::kBF16) {
      uint16_t bits = FloatToBF16(v);
      v = BF16ToFloat(bits);
      std::memcpy(&m.bytes[i * 2], &bits, 2);
    } else if (dtype == DType::kF16) {
      uint16_t bits = FloatToF16(v);
      v = F16ToFloat(bits);
      std::memcpy(&m.bytes[i * 2], &bits, 2);
    } else {
      std::memcpy(&m.bytes[i * 4], &v, 4);
    }
    m.values[i] = v;
  }
  return m;
}

float Read(const std::vector<uint8_t>& bytes, DType dtype, int64_t i) {
  uint16_t bits;
  float f;
  switch (dtype) {
    case DType::kBF16: std::memcpy(&bits, &bytes[i * 2], 2); return BF16ToFloat(bits);
    case DType::kF16: std::memcpy(&bits, &bytes[i * 2], 2); return F16ToFloat(bits);
    default: std::memcpy(&f, &bytes[i * 4], 4); return f;
  }
}

struct Case {
  DType ab, c;
  bool trans_a, trans_b;
};

class CudaGemmTest : public ::testing::TestWithParam<Case> {};

TEST_P(CudaGemmTest, MatchesDoubleReference) {
  std::string why;
  if (DeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device visible: " << why;
  const Case p = GetParam();
  const int64_t m = 37, n = 29, k = 53;
  const int64_t lda = (p.trans_a ? m : k) + 3, ldb = (p.trans_b ? k : n) + 1, ldc = n + 2;
  Matrix a = MakeMatrix(p.ab, (p.trans_a ? k : m) * lda, 1);
  Matrix b = MakeMatrix(p.ab, (p.trans_b ? n : k) * ldb, 2);
  Matrix c = MakeMatrix(p.c, m * ldc, 3);
  auto stream = Stream::Create(0);
  auto blas = CublasHandle::Create(0);
  ASSERT_TRUE(stream.ok() && blas.ok());
  CudaCachingAllocator& alloc = GetCudaAllocator(0);
  void* da = alloc.Allocate(a.bytes.size());
  void* db = alloc.Allocate(b.bytes.size());
  void* dc = alloc.Allocate(c.bytes.size());
  ASSERT_TRUE(CopyToDevice(da, a.bytes.data(), a.bytes.size(), *stream).ok());
  ASSERT_TRUE(CopyToDevice(db, b.bytes.data(), b.bytes.size(), *stream).ok());
  ASSERT_TRUE(CopyToDevice(dc, c.bytes.data(), c.bytes.size(), *stream).ok());
  const float alpha = 0.75f, beta = -0.5f;
  absl::Status s = Gemm(*blas, *stream, p.trans_a, p.trans_b, m, n, k, alpha, p.ab, da, lda, db,
                        ldb, beta, p.c, dc, ldc);
  ASSERT_TRUE(s.ok()) << s;
  std::vector<uint8_t> out(c.bytes.size());
  ASSERT_TRUE(CopyToHost(out.data(), dc, out.size(), *stream).ok());
  const double tol = p.c == DType::kF32 ? 1e-4 : (p.c == DType::kF16 ? 2e-3 : 1e-2);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0;
      for (int64_t l = 0; l < k; ++l) {
        const float av = p.trans_a ? a.values[l * lda + i] : a.values[i * lda + l];
        const float bv = p.trans_b ? b.values[j * ldb + l] : b.values[l * ldb + j];
        ref += double(av) * bv;
      }
      ref = alpha * ref + beta * c.values[i * ldc + j];
      const double got = Read(out, p.c, i * ldc + j);
      ASSERT_NEAR(got, ref, tol * (1 + std::abs(ref))) << "C[" << i << ", " << j << "]";
    }
    // Padding columns of C are untouched.
    for (int64_t j = n; j < ldc; ++j) {
      ASSERT_EQ(Read(out, p.c, i * ldc + j), c.values[i * ldc + j]);
    }
  }
  alloc.Deallocate(da, a.bytes.size());
  alloc.Deallocate(db, b.bytes.size());
  alloc.Deallocate(dc, c.bytes.size());
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, CudaGemmTest,
    ::testing::Values(Case{DType::kF32, DType::kF32, false, false},
                      Case{DType::kF32, DType::kF32, true, true},
                      Case{DType::kBF16, DType::kF32, false, true},
                      Case{DType::kBF16, DType::kBF16, true, false},
                      Case{DType::kF16, DType::kF32, false, true},
                      Case{DType::kF16, DType::kF16, false, false}));

TEST(CudaGemmArgsTest, RejectsBadArgumentsBeforeTouchingTheDevice) {
  std::string why;
  if (DeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device visible: " << why;
  auto stream = Stream::Create(0);
  auto blas = CublasHandle::Create(0);
  ASSERT_TRUE(stream.ok() && blas.ok());
  EXPECT_EQ(Gemm(*blas, *stream, false, false, 4, 4, 4, 1, DType::kI32, nullptr, 4, nullptr, 4,
                 0, DType::kI32, nullptr, 4)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Gemm(*blas, *stream, false, false, 4, 4, 4, 1, DType::kF32, nullptr, 3, nullptr, 4,
                 0, DType::kF32, nullptr, 4)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Gemm(*blas, *stream, false, false, 4, 4, 4, 1, DType::kBF16, nullptr, 4, nullptr, 4,
                 0, DType::kF16, nullptr, 4)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpx::cuda
