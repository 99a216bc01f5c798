#include "core/gemm.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tpx {
namespace {

// Row-major op(A) [m, k] @ op(B) [k, n] in double.
std::vector<double> Reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                              const std::vector<float>& a, int64_t lda,
                              const std::vector<float>& b, int64_t ldb) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        double av = ta ? a[p * lda + i] : a[i * lda + p];
        double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        s += av * bv;
      }
      c[i * n + j] = s;
    }
  }
  return c;
}

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

TEST(GemmTest, F32AllTransposesWithPaddedLeadingDims) {
  const int64_t m = 7, n = 5, k = 9;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int64_t lda = (ta ? m : k) + 3;
      const int64_t ldb = (tb ? k : n) + 2;
      const int64_t ldc = n + 4;
      std::vector<float> a = Random((ta ? k : m) * lda, 1);
      std::vector<float> b = Random((tb ? n : k) * ldb, 2);
      std::vector<float> c(m * ldc, 1.0f);
      ASSERT_TRUE(Gemm(ta, tb, m, n, k, 2.0f, DType::kF32, a.data(), lda, b.data(), ldb, 0.5f,
                       DType::kF32, c.data(), ldc)
                      .ok());
      std::vector<double> ref = Reference(ta, tb, m, n, k, a, lda, b, ldb);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          EXPECT_NEAR(c[i * ldc + j], 2.0 * ref[i * n + j] + 0.5, 1e-4)
              << "ta=" << ta << " tb=" << tb << " at " << i << "," << j;
        }
        for (int64_t j = n; j < ldc; ++j) EXPECT_EQ(c[i * ldc + j], 1.0f) << "padding written";
      }
    }
  }
}

TEST(GemmTest, BF16InputsF32AndBF16Outputs) {
  const int64_t m = 16, n = 12, k = 64;
  std::vector<float> a = Random(m * k, 3), b = Random(k * n, 4);
  std::vector<uint16_t> a16(a.size()), b16(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a16[i] = FloatToBF16(a[i]);
    a[i] = BF16ToFloat(a16[i]);  // reference uses the rounded inputs
  }
  for (size_t i = 0; i < b.size(); ++i) {
    b16[i] = FloatToBF16(b[i]);
    b[i] = BF16ToFloat(b16[i]);
  }
  std::vector<double> ref = Reference(false, false, m, n, k, a, k, b, n);
  std::vector<float> c32(m * n, 1.0f);
  ASSERT_TRUE(Gemm(false, false, m, n, k, 1.0f, DType::kBF16, a16.data(), k, b16.data(), n, 1.0f,
                   DType::kF32, c32.data(), n)
                  .ok());
  std::vector<uint16_t> c16(m * n);
  ASSERT_TRUE(Gemm(false, false, m, n, k, 1.0f, DType::kBF16, a16.data(), k, b16.data(), n, 0.0f,
                   DType::kBF16, c16.data(), n)
                  .ok());
  for (int64_t i = 0; i < m * n; ++i) {
    EXPECT_NEAR(c32[i], ref[i] + 1.0, 1e-4);  // f32 accumulation of exact bf16 products
    EXPECT_NEAR(BF16ToFloat(c16[i]), ref[i], 1e-2 * (1 + std::fabs(ref[i])));
  }
}

TEST(GemmTest, F16InputsGoThroughF32) {
  const int64_t m = 3, n = 4, k = 5;
  std::vector<float> a = Random(m * k, 5), b = Random(n * k, 6);
  std::vector<uint16_t> a16(a.size()), b16(b.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = F16ToFloat(a16[i] = FloatToF16(a[i]));
  for (size_t i = 0; i < b.size(); ++i) b[i] = F16ToFloat(b16[i] = FloatToF16(b[i]));
  std::vector<double> ref = Reference(false, true, m, n, k, a, k, b, k);
  std::vector<uint16_t> c16(m * n, FloatToF16(2.0f));
  ASSERT_TRUE(Gemm(false, true, m, n, k, 1.0f, DType::kF16, a16.data(), k, b16.data(), k, 1.0f,
                   DType::kF16, c16.data(), n)
                  .ok());
  for (int64_t i = 0; i < m * n; ++i) EXPECT_NEAR(F16ToFloat(c16[i]), ref[i] + 2.0, 4e-3);
}

TEST(GemmTest, EmptyReductionScalesC) {
  std::vector<float> c = {1, 2, 3, 4};
  ASSERT_TRUE(Gemm(false, false, 2, 2, 0, 1.0f, DType::kF32, nullptr, 1, nullptr, 2, 3.0f,
                   DType::kF32, c.data(), 2)
                  .ok());
  EXPECT_EQ(c, (std::vector<float>{3, 6, 9, 12}));
}

TEST(GemmTest, RejectsBadArguments) {
  float x = 0;
  EXPECT_FALSE(Gemm(false, false, 2, 2, 2, 1, DType::kI32, &x, 2, &x, 2, 0, DType::kF32, &x, 2)
                   .ok());
  EXPECT_FALSE(Gemm(false, false, 2, 2, 2, 1, DType::kBF16, &x, 2, &x, 2, 0, DType::kF16, &x, 2)
                   .ok());
  absl::Status ld =
      Gemm(false, false, 2, 3, 4, 1, DType::kF32, &x, 3, &x, 3, 0, DType::kF32, &x, 3);
  EXPECT_NE(std::string(ld.message()).find("lda=3"), std::string::npos) << ld;
}

// Every transpose, padded leading dims, padded batch strides, alpha/beta,
// f32 and bf16 inputs: each product matches the single-product reference and
// the padding between products is untouched.
TEST(GemmTest, BatchedMatchesPerProductReference) {
  const int64_t batch = 5, m = 6, n = 7, k = 9;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 2, ldc = n + 3;
        const int64_t sa = (ta ? k : m) * lda + 4, sb = (tb ? n : k) * ldb + 1;
        const int64_t sc = m * ldc + 5;
        std::vector<float> a = Random(batch * sa, 30), b = Random(batch * sb, 31);
        std::vector<uint16_t> a16(a.size()), b16(b.size());
        for (size_t i = 0; i < a.size(); ++i) a[i] = BF16ToFloat(a16[i] = FloatToBF16(a[i]));
        for (size_t i = 0; i < b.size(); ++i) b[i] = BF16ToFloat(b16[i] = FloatToBF16(b[i]));
        const void* pa = dt == DType::kF32 ? static_cast<const void*>(a.data()) : a16.data();
        const void* pb = dt == DType::kF32 ? static_cast<const void*>(b.data()) : b16.data();
        std::vector<float> c(batch * sc, 1.0f);
        ASSERT_TRUE(GemmBatched(batch, ta, tb, m, n, k, 2.0f, dt, pa, lda, sa, pb, ldb, sb, 0.5f,
                                DType::kF32, c.data(), ldc, sc)
                        .ok());
        for (int64_t p = 0; p < batch; ++p) {
          std::vector<float> ap(a.begin() + p * sa, a.begin() + (p + 1) * sa);
          std::vector<float> bp(b.begin() + p * sb, b.begin() + (p + 1) * sb);
          std::vector<double> ref = Reference(ta, tb, m, n, k, ap, lda, bp, ldb);
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < ldc; ++j) {
              const float got = c[p * sc + i * ldc + j];
              if (j < n) {
                EXPECT_NEAR(got, 2.0 * ref[i * n + j] + 0.5, 1e-4)
                    << DTypeName(dt) << " ta=" << ta << " tb=" << tb << " product " << p;
              } else {
                EXPECT_EQ(got, 1.0f) << "padding written";
              }
            }
          }
          for (int64_t j = m * ldc; j < sc; ++j) EXPECT_EQ(c[p * sc + j], 1.0f) << "gap written";
        }
      }
    }
  }
}

// The bias row is added to every row of C, for f32, bf16 and f16 and an
// empty reduction; padding columns of C are not written.
TEST(GemmTest, BiasIsAddedToEveryRow) {
  const int64_t m = 5, n = 6, k = 7, ldc = n + 2;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t kk : {k, int64_t{0}}) {
      std::vector<float> a = Random(m * k, 50), w = Random(n * k, 51), bias = Random(n, 52);
      auto round = [dt](float v) {
        if (dt == DType::kBF16) return BF16ToFloat(FloatToBF16(v));
        if (dt == DType::kF16) return F16ToFloat(FloatToF16(v));
        return v;
      };
      for (float& v : a) v = round(v);
      for (float& v : w) v = round(v);
      for (float& v : bias) v = round(v);
      std::vector<double> ref = Reference(false, true, m, n, kk, a, k, w, k);
      auto pack = [dt](const std::vector<float>& v) {
        std::vector<uint16_t> out(v.size());
        for (size_t i = 0; i < v.size(); ++i) {
          out[i] = dt == DType::kBF16 ? FloatToBF16(v[i]) : FloatToF16(v[i]);
        }
        return out;
      };
      std::vector<float> c32(m * ldc, 9.0f);
      std::vector<uint16_t> a16 = pack(a), w16 = pack(w), b16 = pack(bias);
      std::vector<uint16_t> c16(m * ldc, dt == DType::kBF16 ? FloatToBF16(9.0f) : FloatToF16(9.0f));
      const bool f32 = dt == DType::kF32;
      ASSERT_TRUE(GemmBias(false, true, m, n, kk, dt, f32 ? (void*)a.data() : (void*)a16.data(), k,
                           f32 ? (void*)w.data() : (void*)w16.data(), k,
                           f32 ? (void*)bias.data() : (void*)b16.data(),
                           f32 ? (void*)c32.data() : (void*)c16.data(), ldc)
                      .ok());
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < ldc; ++j) {
          const float got = f32 ? c32[i * ldc + j]
                                : (dt == DType::kBF16 ? BF16ToFloat(c16[i * ldc + j])
                                                      : F16ToFloat(c16[i * ldc + j]));
          const double want = j < n ? ref[i * n + j] + bias[j] : 9.0;
          EXPECT_NEAR(got, want, f32 ? 1e-4 : 2e-2 * (1 + std::fabs(want)))
              << DTypeName(dt) << " k=" << kk << " at " << i << "," << j;
        }
      }
    }
  }
  float x = 0;
  absl::Status bad =
      GemmBias(false, false, 2, 2, 2, DType::kI32, &x, 2, &x, 2, &x, &x, 2);
  EXPECT_NE(std::string(bad.message()).find("GemmBias: inputs must be"), std::string::npos)
      << bad;
}

// Narrow f32 outputs (n of 16..64 columns, alpha 1, beta 0) take the
// register-blocked kernel on AVX-512 CPUs (core/small_gemm.h): row counts
// that are not a multiple of its blocks or of its 64-row work chunks, both
// layouts of A, padded leading dims and strides, one and two threads.
TEST(GemmTest, NarrowF32OutputsMatchReference) {
  const int before = GemmThreads();
  for (int threads : {1, 2}) {
    SetGemmThreads(threads);
    for (int64_t n : {16, 32, 48, 64}) {
      for (int64_t m : {1, 13, 130}) {
        for (bool ta : {false, true}) {
          const int64_t batch = 3, k = 37;
          const int64_t lda = (ta ? m : k) + 3, ldb = n + 5, ldc = n + 2;
          const int64_t sa = (ta ? k : m) * lda + 1, sb = k * ldb + 7, sc = m * ldc + 4;
          std::vector<float> a = Random(batch * sa, 60), b = Random(batch * sb, 61);
          std::vector<float> c(batch * sc, 5.0f);
          ASSERT_TRUE(GemmBatched(batch, ta, false, m, n, k, 1.0f, DType::kF32, a.data(), lda, sa,
                                  b.data(), ldb, sb, 0.0f, DType::kF32, c.data(), ldc, sc)
                          .ok());
          for (int64_t p = 0; p < batch; ++p) {
            std::vector<float> ap(a.begin() + p * sa, a.begin() + (p + 1) * sa);
            std::vector<float> bp(b.begin() + p * sb, b.begin() + (p + 1) * sb);
            std::vector<double> ref = Reference(ta, false, m, n, k, ap, lda, bp, ldb);
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < ldc; ++j) {
                const float got = c[p * sc + i * ldc + j];
                if (j < n) {
                  ASSERT_NEAR(got, ref[i * n + j], 1e-4)
                      << "threads=" << threads << " n=" << n << " m=" << m << " ta=" << ta
                      << " product " << p << " at " << i << "," << j;
                } else {
                  ASSERT_EQ(got, 5.0f) << "padding written";
                }
              }
            }
          }
          // The same product unbatched.
          std::vector<float> c1(m * ldc, 5.0f);
          ASSERT_TRUE(Gemm(ta, false, m, n, k, 1.0f, DType::kF32, a.data(), lda, b.data(), ldb,
                           0.0f, DType::kF32, c1.data(), ldc)
                          .ok());
          for (int64_t i = 0; i < m * ldc; ++i) ASSERT_EQ(c1[i], c[i]) << "unbatched differs";
        }
      }
    }
  }
  SetGemmThreads(before);
}

// A shared B (stride 0) and f16 inputs take the per-product path.
TEST(GemmTest, BatchedSharedOperandAndF16) {
  const int64_t batch = 3, m = 4, n = 5, k = 6;
  std::vector<float> a = Random(batch * m * k, 40), b = Random(k * n, 41);
  std::vector<float> c(batch * m * n);
  ASSERT_TRUE(GemmBatched(batch, false, false, m, n, k, 1.0f, DType::kF32, a.data(), k, m * k,
                          b.data(), n, 0, 0.0f, DType::kF32, c.data(), n, m * n)
                  .ok());
  std::vector<uint16_t> a16(a.size()), b16(b.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = F16ToFloat(a16[i] = FloatToF16(a[i]));
  for (size_t i = 0; i < b.size(); ++i) b[i] = F16ToFloat(b16[i] = FloatToF16(b[i]));
  std::vector<float> c16(batch * m * n);
  ASSERT_TRUE(GemmBatched(batch, false, false, m, n, k, 1.0f, DType::kF16, a16.data(), k, m * k,
                          b16.data(), n, 0, 0.0f, DType::kF32, c16.data(), n, m * n)
                  .ok());
  for (int64_t p = 0; p < batch; ++p) {
    std::vector<float> ap(a.begin() + p * m * k, a.begin() + (p + 1) * m * k);
    std::vector<double> ref = Reference(false, false, m, n, k, ap, k, b, n);
    for (int64_t i = 0; i < m * n; ++i) {
      EXPECT_NEAR(c16[p * m * n + i], ref[i], 1e-4) << "f16 product " << p;
      EXPECT_NEAR(c[p * m * n + i], ref[i], 5e-3) << "f32 product " << p;
    }
  }
}

TEST(GemmTest, BatchedRejectsBadArguments) {
  float x = 0;
  absl::Status overlap = GemmBatched(2, false, false, 2, 2, 2, 1, DType::kF32, &x, 2, 4, &x, 2, 4,
                                     0, DType::kF32, &x, 2, 3);
  EXPECT_NE(std::string(overlap.message()).find("C stride 3"), std::string::npos) << overlap;
  EXPECT_FALSE(GemmBatched(-1, false, false, 2, 2, 2, 1, DType::kF32, &x, 2, 4, &x, 2, 4, 0,
                           DType::kF32, &x, 2, 4)
                   .ok());
  absl::Status ld = GemmBatched(2, false, false, 2, 3, 4, 1, DType::kF32, &x, 3, 8, &x, 3, 12, 0,
                                DType::kF32, &x, 3, 6);
  EXPECT_NE(std::string(ld.message()).find("GemmBatched: leading dims lda=3"), std::string::npos)
      << ld;
  EXPECT_TRUE(GemmBatched(0, false, false, 2, 2, 2, 1, DType::kF32, nullptr, 2, 4, nullptr, 2, 4,
                          0, DType::kF32, nullptr, 2, 4)
                  .ok());
}

// Same-shape GEMMs from several threads at once (one cached primitive) give
// the same results as sequential ones.
TEST(GemmTest, ConcurrentCallsFromManyThreads) {
  const int64_t m = 64, n = 48, k = 96;
  std::vector<float> a = Random(m * k, 20), b = Random(k * n, 21);
  std::vector<double> ref = Reference(false, false, m, n, k, a, k, b, n);
  std::vector<std::vector<float>> outs(4, std::vector<float>(m * n));
  std::vector<std::thread> threads;
  for (auto& out : outs) {
    threads.emplace_back([&, out_ptr = out.data()] {
      for (int rep = 0; rep < 20; ++rep) {
        EXPECT_TRUE(Gemm(false, false, m, n, k, 1.0f, DType::kF32, a.data(), k, b.data(), n, 0.0f,
                         DType::kF32, out_ptr, n)
                        .ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& out : outs) {
    for (int64_t i = 0; i < m * n; ++i) ASSERT_NEAR(out[i], ref[i], 1e-4);
  }
}

// A shape first run on 1 thread and then on 2 (a primitive per thread
// count) gives the same product both times.
TEST(GemmTest, ThreadCountChangeKeepsResults) {
  const int before = GemmThreads();
  const int64_t m = 96, n = 80, k = 72;
  std::vector<float> a = Random(m * k, 70), b = Random(k * n, 71);
  std::vector<double> ref = Reference(false, false, m, n, k, a, k, b, n);
  for (int threads : {1, 2, 1}) {
    SetGemmThreads(threads);
    std::vector<float> c(m * n);
    ASSERT_TRUE(Gemm(false, false, m, n, k, 1.0f, DType::kF32, a.data(), k, b.data(), n, 0.0f,
                     DType::kF32, c.data(), n)
                    .ok());
    for (int64_t i = 0; i < m * n; ++i) ASSERT_NEAR(c[i], ref[i], 1e-4) << "threads=" << threads;
  }
  SetGemmThreads(before);
}

TEST(GemmTest, ThreadSetting) {
  const int before = GemmThreads();
  EXPECT_GE(before, 1);
  SetGemmThreads(1);
  EXPECT_EQ(GemmThreads(), 1);
  SetGemmThreads(0);
  EXPECT_EQ(GemmThreads(), 1);
  SetGemmThreads(before);
  EXPECT_EQ(GemmBackendName(), "onednn");
}

}  // namespace
}  // namespace tpx
