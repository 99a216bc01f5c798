#include "core/gemm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cpu_features.h"
#include "gtest/gtest.h"

namespace tpx {
namespace {

// The tests below reach the paths that split a product between threads
// with small products: every product is split as the thread count allows
// (SmallProductsRunWholeAtTheDefaultSize tests the default).
class SplitEveryProduct : public ::testing::Environment {
 public:
  void SetUp() override { SetGemmMinTeamMacs(0); }
};
const ::testing::Environment* const kSplitEveryProduct =
    ::testing::AddGlobalTestEnvironment(new SplitEveryProduct);

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

// Values rounded to `dtype` (f32: unchanged) and their bits in that dtype.
float RoundTo(DType dtype, float v) {
  if (dtype == DType::kBF16) return BF16ToFloat(FloatToBF16(v));
  if (dtype == DType::kF16) return F16ToFloat(FloatToF16(v));
  return v;
}

std::vector<char> Encode(DType dtype, const std::vector<float>& v) {
  std::vector<char> out(v.size() * SizeOf(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t bits = dtype == DType::kBF16 ? FloatToBF16(v[i]) : FloatToF16(v[i]);
      std::memcpy(out.data() + 2 * i, &bits, 2);
    }
  }
  return out;
}

float Decode(DType dtype, const std::vector<char>& bytes, int64_t i) {
  if (dtype == DType::kF32) {
    float v;
    std::memcpy(&v, bytes.data() + 4 * i, 4);
    return v;
  }
  uint16_t bits;
  std::memcpy(&bits, bytes.data() + 2 * i, 2);
  return dtype == DType::kBF16 ? BF16ToFloat(bits) : F16ToFloat(bits);
}

// One (batched) product with every layout parameter explicit.
struct Product {
  DType ab = DType::kF32, c = DType::kF32;
  bool ta = false, tb = false;
  int64_t batch = 1, m = 1, n = 1, k = 1;
  int64_t pad_a = 0, pad_b = 0, pad_c = 0;     // leading dims beyond the stored rows
  int64_t gap_a = 0, gap_b = 0, gap_c = 0;     // batch strides beyond one operand
  float alpha = 1.0f, beta = 0.0f;
  uint32_t seed = 1;
};

std::string Describe(const Product& p) {
  return absl::StrCat(std::string(DTypeName(p.ab)), "->", std::string(DTypeName(p.c)), " ", p.ta ? "T" : "N",
                      p.tb ? "T" : "N", " batch=", p.batch, " m=", p.m, " n=", p.n, " k=", p.k,
                      " alpha=", p.alpha, " beta=", p.beta);
}

// Runs `p` through Gemm (batch 1) or GemmBatched on inputs rounded to its
// dtype and checks every element against the double reference: within
// `tol` * (1 + |want|), padding and gaps of C untouched, C not read when
// beta == 0 (it starts as NaN then).
void ExpectMatchesReference(const Product& p, double tol) {
  const int64_t a_rows = p.ta ? p.k : p.m, a_cols = p.ta ? p.m : p.k;
  const int64_t b_rows = p.tb ? p.n : p.k, b_cols = p.tb ? p.k : p.n;
  const int64_t lda = a_cols + p.pad_a, ldb = b_cols + p.pad_b, ldc = p.n + p.pad_c;
  const int64_t sa = a_rows * lda + p.gap_a, sb = b_rows * ldb + p.gap_b;
  const int64_t sc = p.m * ldc + p.gap_c;
  std::vector<float> a = Random(p.batch * sa, p.seed), b = Random(p.batch * sb, p.seed + 1);
  for (float& v : a) v = RoundTo(p.ab, v);
  for (float& v : b) v = RoundTo(p.ab, v);
  const float sentinel = 7.0f;
  std::vector<float> c0 = Random(p.batch * sc, p.seed + 2);
  for (float& v : c0) v = p.beta == 0.0f ? std::nanf("") : RoundTo(p.c, v);
  std::vector<char> ea = Encode(p.ab, a), eb = Encode(p.ab, b), ec = Encode(p.c, c0);
  // Padding and gaps hold a sentinel that must survive.
  auto in_product = [&](int64_t i) { return i % sc < p.m * ldc && (i % sc) % ldc < p.n; };
  for (int64_t i = 0; i < p.batch * sc; ++i) {
    if (!in_product(i)) {
      std::vector<char> one = Encode(p.c, {sentinel});
      std::memcpy(ec.data() + i * SizeOf(p.c), one.data(), one.size());
    }
  }
  const absl::Status status =
      p.batch == 1
          ? Gemm(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.ab, ea.data(), lda, eb.data(), ldb, p.beta,
                 p.c, ec.data(), ldc)
          : GemmBatched(p.batch, p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.ab, ea.data(), lda, sa,
                        eb.data(), ldb, sb, p.beta, p.c, ec.data(), ldc, sc);
  ASSERT_TRUE(status.ok()) << Describe(p) << ": " << status;
  for (int64_t q = 0; q < p.batch; ++q) {
    std::vector<float> aq(a.begin() + q * sa, a.begin() + (q + 1) * sa);
    std::vector<float> bq(b.begin() + q * sb, b.begin() + (q + 1) * sb);
    const std::vector<double> ref = Reference(p.ta, p.tb, p.m, p.n, p.k, aq, lda, bq, ldb);
    for (int64_t i = q * sc; i < (q + 1) * sc; ++i) {
      const float got = Decode(p.c, ec, i);
      if (!in_product(i)) {
        ASSERT_EQ(got, sentinel) << Describe(p) << ": padding or gap written at " << i;
        continue;
      }
      const int64_t r = (i % sc) / ldc, j = (i % sc) % ldc;
      const double want = p.alpha * ref[r * p.n + j] + (p.beta == 0.0f ? 0.0 : p.beta * c0[i]);
      ASSERT_NEAR(got, want, tol * (1 + std::fabs(want)))
          << Describe(p) << " product " << q << " at " << r << "," << j;
    }
  }
}

// Tolerances: f32 accumulation of exact products; one bf16 rounding of C.
constexpr double kF32Tol = 1e-4;
constexpr double kBF16OutTol = 1e-2;

TEST(GemmTest, F32AllTransposesWithPaddedLeadingDims) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      ExpectMatchesReference({.ta = ta, .tb = tb, .m = 7, .n = 5, .k = 9, .pad_a = 3, .pad_b = 2,
                              .pad_c = 4, .alpha = 2.0f, .beta = 0.5f},
                             kF32Tol);
    }
  }
}

TEST(GemmTest, BF16InputsF32AndBF16Outputs) {
  ExpectMatchesReference({.ab = DType::kBF16, .m = 16, .n = 12, .k = 64, .beta = 1.0f, .seed = 3},
                         kF32Tol);
  ExpectMatchesReference({.ab = DType::kBF16, .c = DType::kBF16, .m = 16, .n = 12, .k = 64,
                          .seed = 3},
                         kBF16OutTol);
}

// bf16 products with C wider than one range of columns (where oneDNN runs
// them on AMX, a range at a time): every layout, padded leading dims, alpha
// and beta into an f32 C, a bf16 C, on one thread and two.
TEST(GemmTest, WideBf16ProductsMatchReference) {
  const int before = GemmThreads();
  for (int threads : {1, 2}) {
    SetGemmThreads(threads);
    for (auto [ta, tb] :
         {std::pair(false, false), std::pair(false, true), std::pair(true, false)}) {
      ExpectMatchesReference({.ab = DType::kBF16,
                              .ta = ta,
                              .tb = tb,
                              .m = 40,
                              .n = 1100,
                              .k = 70,
                              .pad_a = 3,
                              .pad_b = 5,
                              .pad_c = 2,
                              .alpha = 2.0f,
                              .beta = 0.5f,
                              .seed = 30},
                             kF32Tol);
      ExpectMatchesReference({.ab = DType::kBF16,
                              .c = DType::kBF16,
                              .ta = ta,
                              .tb = tb,
                              .m = 40,
                              .n = 1100,
                              .k = 70,
                              .pad_c = 2,
                              .seed = 31},
                             kBF16OutTol);
    }
  }
  SetGemmThreads(before);
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
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        ExpectMatchesReference({.ab = dt, .ta = ta, .tb = tb, .batch = 5, .m = 6, .n = 7, .k = 9,
                                .pad_a = 1, .pad_b = 2, .pad_c = 3, .gap_a = 4, .gap_b = 1,
                                .gap_c = 5, .alpha = 2.0f, .beta = 0.5f, .seed = 30},
                               kF32Tol);
      }
    }
  }
}

// Batches for oneDNN's matmul at 2 and 3 threads go to the threads as
// ranges of whole products where the ranges are even or long (batches of 2,
// 3, 4, 9 and 16; 7 at 3 threads is neither and stays one primitive): every
// product, in every range, with padding, gaps, alpha and beta, f32 and bf16
// C; and a following single product still runs (on the caller's threads).
TEST(GemmTest, BatchesOverThreadsMatchReference) {
  const int before = GemmThreads();
  for (int threads : {2, 3}) {
    SetGemmThreads(threads);
    for (DType c : {DType::kF32, DType::kBF16}) {
      for (bool tb : {false, true}) {
        for (int64_t batch : {2, 3, 4, 7, 9, 16}) {
          const DType ab = c == DType::kBF16 ? DType::kBF16 : DType::kF32;
          ExpectMatchesReference({.ab = ab, .c = c, .tb = tb, .batch = batch, .m = 13, .n = 20,
                                  .k = 11, .pad_a = 1, .pad_b = 3, .pad_c = 2, .gap_a = 5,
                                  .gap_b = 2, .gap_c = 7, .alpha = 1.5f, .beta = 0.25f,
                                  .seed = 90},
                                 c == DType::kBF16 ? kBF16OutTol : kF32Tol);
        }
      }
    }
    ExpectMatchesReference({.m = 70, .n = 90, .k = 50, .seed = 91}, kF32Tol);
  }
  SetGemmThreads(before);
}

// Single products split into row ranges over the threads (one one-thread
// primitive each): row counts that are not a multiple of the 16-row ranges,
// both layouts of B, A stored transposed (bf16: ranges for oneDNN where the
// CPU has no AVX-512 BF16, else tpx's kernel with a C larger than L2),
// padding, alpha and beta, a fused bias; 128 rows at 3
// threads stays one primitive. The caller's thread setting is unchanged.
TEST(GemmTest, RowRangesOverThreadsMatchReference) {
  const int before = GemmThreads();
  for (int threads : {2, 3}) {
    SetGemmThreads(threads);
    for (DType c : {DType::kF32, DType::kBF16}) {
      const DType ab = c == DType::kBF16 ? DType::kBF16 : DType::kF32;
      const double tol = c == DType::kBF16 ? kBF16OutTol : kF32Tol;
      for (bool tb : {false, true}) {
        for (int64_t m : {128, 200, 1000}) {
          ExpectMatchesReference({.ab = ab, .c = c, .tb = tb, .m = m, .n = 40, .k = 24,
                                  .pad_a = 3, .pad_b = 1, .pad_c = 5, .alpha = 1.5f,
                                  .beta = 0.25f, .seed = 95},
                                 tol);
        }
      }
      if (ab == DType::kBF16) {
        ExpectMatchesReference({.ab = ab, .c = c, .ta = true, .m = 1040, .n = 1030, .k = 8,
                                .pad_a = 2, .pad_c = 1, .seed = 96},
                               tol);
      }
      // GemmBias: each range adds the bias to its own rows.
      const int64_t m = 300, n = 24, k = 16;
      std::vector<float> a = Random(m * k, 97), w = Random(n * k, 98), bias = Random(n, 99);
      for (float& v : a) v = RoundTo(ab, v);
      for (float& v : w) v = RoundTo(ab, v);
      for (float& v : bias) v = RoundTo(ab, v);
      std::vector<char> ea = Encode(ab, a), ew = Encode(ab, w), eb = Encode(ab, bias);
      std::vector<char> ec = Encode(ab, std::vector<float>(m * n, 0.0f));
      ASSERT_TRUE(
          GemmBias(false, true, m, n, k, ab, ea.data(), k, ew.data(), k, eb.data(), ec.data(), n)
              .ok());
      const std::vector<double> ref = Reference(false, true, m, n, k, a, k, w, k);
      for (int64_t i = 0; i < m * n; ++i) {
        const double want = ref[i] + bias[i % n];
        ASSERT_NEAR(Decode(ab, ec, i), want, tol * (1 + std::fabs(want)))
            << threads << " threads, " << DTypeName(ab) << " bias at " << i;
      }
    }
    // The calling thread's OpenMP setting is still the GEMM thread count.
    EXPECT_EQ(omp_get_max_threads(), GemmThreads());
  }
  SetGemmThreads(before);
}

// bf16 products with a bias and k >= 512 (B plain or transposed) run on
// the bf16 kernel, C seeded with the bias: every row gets it once, the
// padding columns of C are not written, at 1 and 2 threads.
TEST(GemmTest, Bf16BiasOfLongReductionsIsAddedToEveryRow) {
  const int before = GemmThreads();
  const int64_t m = 50, n = 70, k = 601, ldc = n + 3;
  std::vector<float> a = Random(m * k, 53), w = Random(n * k, 54), bias = Random(n, 55);
  for (std::vector<float>* v : {&a, &w, &bias}) {
    for (float& x : *v) x = RoundTo(DType::kBF16, x);
  }
  const std::vector<char> ea = Encode(DType::kBF16, a), ew = Encode(DType::kBF16, w),
                          eb = Encode(DType::kBF16, bias);
  for (int threads : {1, 2}) {
    SetGemmThreads(threads);
    for (bool tb : {false, true}) {
      const int64_t ldb = tb ? k : n;  // w as [n, k] or, read as [k, n], another B
      std::vector<char> ec = Encode(DType::kBF16, std::vector<float>(m * ldc, 9.0f));
      ASSERT_TRUE(GemmBias(false, tb, m, n, k, DType::kBF16, ea.data(), k, ew.data(), ldb,
                           eb.data(), ec.data(), ldc)
                      .ok());
      const std::vector<double> ref = Reference(false, tb, m, n, k, a, k, w, ldb);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < ldc; ++j) {
          const double want = j < n ? ref[i * n + j] + bias[j] : 9.0;
          ASSERT_NEAR(Decode(DType::kBF16, ec, i * ldc + j), want,
                      kBF16OutTol * (1 + std::fabs(want)))
              << (tb ? "NT" : "NN") << " " << threads << " threads at " << i << "," << j;
        }
      }
    }
  }
  SetGemmThreads(before);
}

// The bias row is added to every row of C, for f32, bf16 and f16 and an
// empty reduction, also to one to four rows (f32: core/few_rows_gemm.h);
// padding columns of C are not written.
TEST(GemmTest, BiasIsAddedToEveryRow) {
  const int64_t n = 6, k = 7, ldc = n + 2;
  for (int64_t m : {1, 3, 5}) {
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
        std::vector<uint16_t> c16(m * ldc,
                                  dt == DType::kBF16 ? FloatToBF16(9.0f) : FloatToF16(9.0f));
        const bool f32 = dt == DType::kF32;
        ASSERT_TRUE(GemmBias(false, true, m, n, kk, dt, f32 ? (void*)a.data() : (void*)a16.data(),
                             k, f32 ? (void*)w.data() : (void*)w16.data(), k,
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
                << DTypeName(dt) << " m=" << m << " k=" << kk << " at " << i << "," << j;
          }
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
// that are not a multiple of its blocks or of its work chunks (about 64), both
// layouts of A, padded leading dims and strides, one and two threads,
// batched and single; and a long reduction (B past L1), which the kernel
// takes for rows of one register block (1 and 13 at n = 16).
TEST(GemmTest, NarrowF32OutputsMatchReference) {
  const int before = GemmThreads();
  for (int threads : {1, 2}) {
    SetGemmThreads(threads);
    for (int64_t n : {16, 32, 48, 64}) {
      for (int64_t m : {1, 13, 130}) {
        for (bool ta : {false, true}) {
          for (int64_t batch : {1, 3}) {
            for (int64_t k : {37, 700}) {
              if (k == 700 && m == 130) continue;
              ExpectMatchesReference({.ta = ta,
                                      .batch = batch,
                                      .m = m,
                                      .n = n,
                                      .k = k,
                                      .pad_a = 3,
                                      .pad_b = 5,
                                      .pad_c = 2,
                                      .gap_a = 1,
                                      .gap_b = 7,
                                      .gap_c = 4,
                                      .seed = 60},
                                     kF32Tol);
            }
          }
        }
      }
    }
  }
  SetGemmThreads(before);
}

// Products of one to four rows (a decoding step's linear layers and
// attention) take core/few_rows_gemm.h's kernels on AVX-512 CPUs: f32 with
// B stored transposed, bf16 into f32 or bf16 with B in either layout.
// Reductions shorter than a vector, not a multiple of one, and long; B's
// rows in and out of steps of four and its columns in and out of 64-column
// blocks; padded leading dims; batches with gaps; single products and
// batches large enough to be split between two threads (a batch's split
// falling inside a product), which must give the same bits as one thread.
TEST(GemmTest, FewRowsMatchReferenceAndAreTheSameAtAnyThreadCount) {
  const int before = GemmThreads();
  struct Types {
    DType ab, c;
    double tol;
  };
  const std::vector<Types> types = {{DType::kF32, DType::kF32, kF32Tol},
                                    {DType::kBF16, DType::kF32, kF32Tol},
                                    {DType::kBF16, DType::kBF16, kBF16OutTol}};
  for (int threads : {1, 2}) {
    SetGemmThreads(threads);
    for (const Types& ty : types) {
      for (bool tb : {true, false}) {
        if (ty.ab == DType::kF32 && !tb) continue;  // f32 B not transposed: small_gemm's
        // p with this dtype pair and layout of B.
        auto check = [&](Product p) {
          p.ab = ty.ab;
          p.c = ty.c;
          p.tb = tb;
          ExpectMatchesReference(p, ty.tol);
        };
        for (int64_t m : {1, 2, 3, 4}) {
          for (int64_t k : {1, 15, 16, 31, 33, 37, 64, 130}) {
            for (int64_t n : {1, 5, 64, 65, 385}) {
              check({.m = m, .n = n, .k = k, .pad_a = 3, .pad_b = 5, .pad_c = 2, .seed = 70});
            }
          }
          check({.m = m, .n = 2103, .k = 130, .pad_b = 1, .seed = 71});
          for (int64_t n : {5, 97}) {
            check({.batch = 3,
                   .m = m,
                   .n = n,
                   .k = 37,
                   .pad_a = 2,
                   .pad_b = 1,
                   .pad_c = 3,
                   .gap_a = 5,
                   .gap_b = 3,
                   .gap_c = 2,
                   .seed = 74});
          }
          check({.batch = 7, .m = m, .n = 301, .k = 130, .gap_b = 3, .seed = 75});
        }
      }
    }
  }
  // Past the size that splits the work (one product of 2103 x 130; seven of
  // 301 x 130, split inside the fourth): bit-equal at 1 and 2 threads.
  const int64_t m = 3, k = 130;
  for (const Types& ty : types) {
    for (bool tb : {true, false}) {
      if (ty.ab == DType::kF32 && !tb) continue;
      for (auto [batch, n] : {std::pair<int64_t, int64_t>{1, 2103}, {7, 301}}) {
        const std::vector<char> a = Encode(ty.ab, Random(batch * m * k, 72));
        const std::vector<char> b = Encode(ty.ab, Random(batch * n * k, 73));
        const size_t c_bytes = batch * m * n * SizeOf(ty.c);
        std::vector<char> one(c_bytes), two(c_bytes);
        for (int threads : {1, 2}) {
          SetGemmThreads(threads);
          std::vector<char>& c = threads == 1 ? one : two;
          ASSERT_TRUE(GemmBatched(batch, false, tb, m, n, k, 1.0f, ty.ab, a.data(), k, m * k,
                                  b.data(), tb ? k : n, n * k, 0.0f, ty.c, c.data(), n, m * n)
                          .ok());
        }
        EXPECT_TRUE(one == two) << DTypeName(ty.ab) << "->" << DTypeName(ty.c) << " tb=" << tb
                                << " batch " << batch;
      }
    }
  }
  SetGemmThreads(before);
}

// Products with A stored transposed and B not (weight gradients) take
// their own paths: oneDNN's GEMM driver for f32, the packed AVX-512 BF16
// kernel for bf16 where the CPU has it (core/bf16_gemm.h). Sizes off its
// 6-row blocks (12-row ones for C of 17 to 32 columns, 16-row ones for at
// most 16; remainders split into two smaller blocks, as 128 and 57 rows
// have), 48-row chunks, 64-column panels, k in one slice and in two (130 x
// 130, k 4097: an odd last pair alone in its slice), C wider than tall
// (split by panels between threads) and taller than wide (split by rows),
// a long reduction with a small C (in 256-pair slices split between
// threads, odd k too, at 2 and 3 threads; 130 x 70, k 4097: in two slices
// of 1040 and 1009 pairs, split by k at 2 threads and by rows at 3), odd
// k, padded leading dims, alpha/beta, an unread C at beta 0, f32 and bf16
// C, batches, 1 to 3 threads.
// f32 products of at least 96 x 192 go to two threads as two ranges of C's
// rows (213 x 131) or columns (131 x 250), each one call of the driver.
TEST(GemmTest, TransposedAMatchesReference) {
  const int before = GemmThreads();
  struct Size {
    int64_t m, n, k;
  };
  const std::vector<Size> sizes = {Size{1, 1, 1},       Size{70, 13, 301},   Size{45, 37, 77},
                                   Size{130, 100, 600}, Size{256, 64, 512},  Size{20, 17, 2101},
                                   Size{37, 45, 77},    Size{64, 200, 600},  Size{13, 130, 77},
                                   Size{100, 32, 130},  Size{128, 96, 130},  Size{57, 48, 40},
                                   Size{40, 24, 4096},  Size{213, 131, 300}, Size{131, 250, 77},
                                   Size{130, 70, 4097}, Size{130, 130, 4097}};
  for (int threads : {1, 2, 3}) {
    SetGemmThreads(threads);
    for (DType ab : {DType::kF32, DType::kBF16}) {
      for (DType c : {DType::kF32, ab}) {
        for (Size sz : sizes) {
          // 3 threads: the long reductions only.
          if (threads == 3 && sz.k < 2048) continue;
          for (float beta : {0.0f, 0.5f}) {
            const double tol = c == DType::kBF16 ? kBF16OutTol : kF32Tol;
            ExpectMatchesReference({.ab = ab, .c = c, .ta = true, .m = sz.m, .n = sz.n,
                                    .k = sz.k, .pad_a = 3, .pad_b = 1, .pad_c = 2,
                                    .alpha = 1.5f, .beta = beta, .seed = 80},
                                   tol);
            if (sz.m * sz.n * sz.k > 1'000'000) continue;  // the batched case, small sizes only
            ExpectMatchesReference({.ab = ab, .c = c, .ta = true, .batch = 3, .m = sz.m,
                                    .n = sz.n, .k = sz.k, .pad_a = 1, .pad_b = 2, .pad_c = 1,
                                    .gap_a = 5, .gap_b = 3, .gap_c = 2, .alpha = 1.0f,
                                    .beta = beta, .seed = 90},
                                   tol);
          }
        }
      }
    }
  }
  SetGemmThreads(before);
}

// bf16 products of a plain A with k >= 512 run on the same kernel, reading
// A's k-pairs in place, with B plain (input gradients dY W) or stored
// transposed (forward products X W^T, whose B is packed by transposes): k
// odd (its last pair has one value) and even, one to three slices, a long
// reduction with a small C (split by k at 2 and 3 threads), odd leading
// dims (A's pairs then straddle 32-bit words), sizes off the blocks and
// panels, threads splitting rows or columns, alpha and beta, f32 and bf16 C,
// batches, 1 to 3 threads.
TEST(GemmTest, PlainABf16MatchesReference) {
  const int before = GemmThreads();
  struct Size {
    int64_t m, n, k;
  };
  // k up to 4096 is one slice of A's rows; 4097 (an odd last pair alone in
  // its slice), 4500 and 9000 two and three, where threads do not split
  // the reduction (C of more than 8192 values, or one thread).
  const std::vector<Size> sizes = {Size{1, 1, 513},     Size{70, 13, 512},  Size{45, 100, 1025},
                                   Size{130, 64, 600},  Size{20, 17, 2101}, Size{40, 24, 4096},
                                   Size{131, 250, 515}, Size{30, 70, 4097}, Size{100, 100, 4500},
                                   Size{9, 140, 9000}};
  for (int threads : {1, 2, 3}) {
    SetGemmThreads(threads);
    for (DType c : {DType::kF32, DType::kBF16}) {
      for (Size sz : sizes) {
        for (bool tb : {false, true}) {
          if (threads == 3 && sz.k < 2048) continue;  // 3 threads: the long reductions only
          const double tol = c == DType::kBF16 ? kBF16OutTol : kF32Tol;
          for (float beta : {0.0f, 0.5f}) {
            ExpectMatchesReference({.ab = DType::kBF16,
                                    .c = c,
                                    .tb = tb,
                                    .m = sz.m,
                                    .n = sz.n,
                                    .k = sz.k,
                                    .pad_a = 3,
                                    .pad_b = 1,
                                    .pad_c = 2,
                                    .alpha = 1.5f,
                                    .beta = beta,
                                    .seed = 120},
                                   tol);
          }
          if (sz.m * sz.n * sz.k > 1'000'000) continue;  // the batched case, small sizes only
          ExpectMatchesReference({.ab = DType::kBF16,
                                  .c = c,
                                  .tb = tb,
                                  .batch = 3,
                                  .m = sz.m,
                                  .n = sz.n,
                                  .k = sz.k,
                                  .pad_a = 1,
                                  .pad_b = 2,
                                  .gap_a = 5,
                                  .gap_b = 3,
                                  .gap_c = 2,
                                  .seed = 121},
                                 tol);
        }
      }
    }
  }
  SetGemmThreads(before);
}

// With odd k, the value after each row of a plain A, and of a B stored
// transposed (here a NaN in their padding, and past the end of the buffer
// for the last row), is never read: C is exact.
TEST(GemmTest, PlainABf16OddKReadsNothingPastTheRows) {
  const int64_t m = 13, n = 70, k = 513;
  // rows x k values, each row followed by a NaN (but the last: the
  // allocation ends at its k-th value).
  auto padded_rows = [&](int64_t rows, auto value) {
    std::vector<float> v(rows * (k + 1));
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t p = 0; p <= k; ++p) v[i * (k + 1) + p] = p == k ? std::nanf("") : value(i, p);
    }
    const std::vector<char> e = Encode(DType::kBF16, v);
    std::vector<uint16_t> out(rows * (k + 1) - 1);
    std::memcpy(out.data(), e.data(), out.size() * sizeof(uint16_t));
    return std::make_pair(v, out);
  };
  const auto [a, ea] = padded_rows(m, [](int64_t i, int64_t) { return 0.25f * (i % 3); });
  for (bool tb : {false, true}) {
    std::vector<float> b;
    std::vector<uint16_t> eb;
    int64_t ldb = n;
    if (tb) {  // B stored [n, k], element (p, j) of op(B) at j * (k + 1) + p
      std::tie(b, eb) = padded_rows(n, [](int64_t j, int64_t p) {
        return RoundTo(DType::kBF16, 0.125f * static_cast<float>((j + 3 * p) % 7) - 0.25f);
      });
      ldb = k + 1;
    } else {
      b = Random(k * n, 122);
      for (float& v : b) v = RoundTo(DType::kBF16, v);
      eb.resize(b.size());
      std::memcpy(eb.data(), Encode(DType::kBF16, b).data(), eb.size() * sizeof(uint16_t));
    }
    std::vector<float> out(m * n, 0.0f);
    ASSERT_TRUE(Gemm(false, tb, m, n, k, 1.0f, DType::kBF16, ea.data(), k + 1, eb.data(), ldb, 0.0f,
                     DType::kF32, out.data(), n)
                    .ok());
    const std::vector<double> ref = Reference(false, tb, m, n, k, a, k + 1, b, ldb);
    for (int64_t i = 0; i < m * n; ++i) {
      ASSERT_NEAR(out[i], ref[i], kF32Tol * (1 + std::fabs(ref[i]))) << (tb ? "NT" : "NN");
    }
  }
}

// Weight gradients in bf16 (A stored transposed) on CPUs with AVX-512 BF16
// give the same bits at 1, 2 and 3 threads, so training does not depend on
// the thread count: also where a long reduction is split by k between the
// threads (these sizes, in 256-pair slices or, 100 x 150 and 128 x 128,
// two of half of k; odd k, f32 and bf16 C, alpha and beta). So do the
// products of a plain A on the same kernel, B plain or transposed, in
// their longer slices too (k 4500: two). Where oneDNN runs bf16 on AMX these
// go to it instead, as ranges of C, with the same property.
TEST(GemmTest, Bf16KernelIsTheSameAtAnyThreadCount) {
  if (!CpuHasAvx512Bf16()) GTEST_SKIP() << "no AVX-512 BF16: oneDNN computes these";
  const int before = GemmThreads();
  struct Size {
    int64_t m, n, k;
  };
  for (Size sz : {Size{20, 17, 2101}, Size{40, 24, 4096}, Size{130, 100, 600}, Size{64, 200, 600},
                  Size{128, 128, 2048}, Size{100, 100, 4500}, Size{100, 150, 2101}}) {
    for (auto [ta, tb] :
         {std::pair(true, false), std::pair(false, false), std::pair(false, true)}) {
      const int64_t lda = (ta ? sz.m : sz.k) + 1, ldb = (tb ? sz.k : sz.n) + 2, ldc = sz.n + 3;
      std::vector<char> a = Encode(DType::kBF16, Random((ta ? sz.k : sz.m) * lda, 70));
      std::vector<char> b = Encode(DType::kBF16, Random((tb ? sz.n : sz.k) * ldb, 71));
      for (DType c : {DType::kF32, DType::kBF16}) {
        for (float beta : {0.0f, 0.5f}) {
          const std::vector<char> c0 = Encode(c, Random(sz.m * ldc, 72));
          std::vector<std::vector<char>> results;
          for (int threads : {1, 2, 3}) {
            SetGemmThreads(threads);
            std::vector<char> out = c0;
            ASSERT_TRUE(Gemm(ta, tb, sz.m, sz.n, sz.k, 1.5f, DType::kBF16, a.data(), lda, b.data(),
                             ldb, beta, c, out.data(), ldc)
                            .ok());
            results.push_back(std::move(out));
          }
          for (size_t i = 1; i < results.size(); ++i) {
            EXPECT_TRUE(results[i] == results[0])
                << (ta ? "T" : "N") << (tb ? "T" : "N") << " m=" << sz.m << " n=" << sz.n
                << " k=" << sz.k << " C " << DTypeName(c) << " beta=" << beta << ": " << i + 1
                << " threads differ from 1";
          }
        }
      }
    }
  }
  SetGemmThreads(before);
}

// bf16 products of too few rows for every thread, and batches of fewer
// products than threads, match the reference and give the same bits at 1, 2
// and 3 threads, a fused bias included (where oneDNN runs bf16 on AMX, the
// threads take ranges of C's columns; elsewhere the bf16 kernel or oneDNN
// computes them).
TEST(GemmTest, Bf16FewRowsAndSmallBatchesAreTheSameAtAnyThreadCount) {
  if (!CpuHasAvx512Bf16()) GTEST_SKIP() << "no AVX-512 BF16: oneDNN splits these its own way";
  const int before = GemmThreads();
  // C 100 wide; C wider than a range of AMX columns (which such a product
  // runs as, at any thread count) with rows for two threads (each then
  // splits its rows into columns) and too few for two (the threads take
  // columns, and each splits its own). k from 512: without AMX these are
  // the bf16 kernel's.
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>(20, 100, 600),
                         std::tuple<int64_t, int64_t, int64_t>(40, 1100, 520),
                         std::tuple<int64_t, int64_t, int64_t>(20, 1100, 520)}) {
    const int64_t ldc = n + 3;
    SCOPED_TRACE(absl::StrCat(m, " x ", n, " x ", k));
    for (auto [ta, tb] :
         {std::pair(false, true), std::pair(false, false), std::pair(true, false)}) {
      for (int64_t batch : {1, 2}) {
        const int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 2;
        const int64_t sa = (ta ? k : m) * lda, sb = (tb ? n : k) * ldb, sc = m * ldc;
        std::vector<float> a = Random(batch * sa, 120), b = Random(batch * sb, 121);
        for (float& v : a) v = RoundTo(DType::kBF16, v);
        for (float& v : b) v = RoundTo(DType::kBF16, v);
        const std::vector<char> ea = Encode(DType::kBF16, a), eb = Encode(DType::kBF16, b);
        std::vector<std::vector<char>> results;
        for (int threads : {1, 2, 3}) {
          SetGemmThreads(threads);
          std::vector<char> out = Encode(DType::kF32, std::vector<float>(batch * sc, 9.0f));
          ASSERT_TRUE(GemmBatched(batch, ta, tb, m, n, k, 1.0f, DType::kBF16, ea.data(), lda, sa,
                                  eb.data(), ldb, sb, 0.0f, DType::kF32, out.data(), ldc, sc)
                          .ok());
          for (int64_t q = 0; q < batch; ++q) {
            const std::vector<float> aq(a.begin() + q * sa, a.begin() + (q + 1) * sa);
            const std::vector<float> bq(b.begin() + q * sb, b.begin() + (q + 1) * sb);
            const std::vector<double> ref = Reference(ta, tb, m, n, k, aq, lda, bq, ldb);
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < ldc; ++j) {
                const double want = j < n ? ref[i * n + j] : 9.0;
                ASSERT_NEAR(Decode(DType::kF32, out, q * sc + i * ldc + j), want,
                            kF32Tol * (1 + std::fabs(want)))
                    << (ta ? "T" : "N") << (tb ? "T" : "N") << " batch " << batch << ", " << threads
                    << " threads, product " << q << " at " << i << "," << j;
              }
            }
          }
          results.push_back(std::move(out));
        }
        for (size_t i = 1; i < results.size(); ++i) {
          EXPECT_TRUE(results[i] == results[0])
              << (ta ? "T" : "N") << (tb ? "T" : "N") << " batch " << batch << ": " << i + 1
              << " threads differ from 1";
        }
      }
    }
    // A fused bias: each range of columns adds its own part of it.
    std::vector<float> a = Random(m * k, 122), w = Random(n * k, 123), bias = Random(n, 124);
    for (std::vector<float>* v : {&a, &w, &bias}) {
      for (float& x : *v) x = RoundTo(DType::kBF16, x);
    }
    const std::vector<char> ea = Encode(DType::kBF16, a), ew = Encode(DType::kBF16, w),
                            eb = Encode(DType::kBF16, bias);
    const std::vector<double> ref = Reference(false, true, m, n, k, a, k, w, k);
    std::vector<std::vector<char>> results;
    for (int threads : {1, 2, 3}) {
      SetGemmThreads(threads);
      std::vector<char> out = Encode(DType::kBF16, std::vector<float>(m * ldc, 9.0f));
      ASSERT_TRUE(GemmBias(false, true, m, n, k, DType::kBF16, ea.data(), k, ew.data(), k,
                           eb.data(), out.data(), ldc)
                      .ok());
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < ldc; ++j) {
          const double want = j < n ? ref[i * n + j] + bias[j] : 9.0;
          ASSERT_NEAR(Decode(DType::kBF16, out, i * ldc + j), want,
                      kBF16OutTol * (1 + std::fabs(want)))
              << threads << " threads, bias at " << i << "," << j;
        }
      }
      results.push_back(std::move(out));
    }
    for (size_t i = 1; i < results.size(); ++i) {
      EXPECT_TRUE(results[i] == results[0]) << "bias: " << i + 1 << " threads differ from 1";
    }
  }
  SetGemmThreads(before);
}

// bf16 products of a plain A and B with k below 512 and C at most 128 wide
// (input gradients, attention's P V) run on oneDNN on one thread and, with
// beta 0, on the bf16 kernel on more: 1, 2 and 3 threads give the same
// bits and match the reference (odd k, padded leading dims, alpha, beta 0
// and 0.5, f32 and bf16 C, a batch).
TEST(GemmTest, Bf16NarrowInputGradientsAreTheSameAtAnyThreadCount) {
  const int before = GemmThreads();
  struct Size {
    int64_t batch, m, n, k;
  };
  for (Size sz : {Size{1, 2048, 128, 128}, Size{1, 300, 128, 383}, Size{1, 1000, 70, 64},
                  Size{1, 513, 16, 257}, Size{64, 128, 32, 128}}) {
    const int64_t lda = sz.k + 1, ldb = sz.n + 2, ldc = sz.n + 3;
    const int64_t sa = sz.m * lda + 5, sb = sz.k * ldb + 3, sc = sz.m * ldc + 2;
    const std::vector<char> a = Encode(DType::kBF16, Random(sz.batch * sa, 80));
    const std::vector<char> b = Encode(DType::kBF16, Random(sz.batch * sb, 81));
    for (DType c : {DType::kF32, DType::kBF16}) {
      for (float beta : {0.0f, 0.5f}) {
        const std::vector<char> c0 = Encode(c, Random(sz.batch * sc, 82));
        std::vector<std::vector<char>> results;
        for (int threads : {1, 2, 3}) {
          SetGemmThreads(threads);
          std::vector<char> out = c0;
          ASSERT_TRUE(GemmBatched(sz.batch, false, false, sz.m, sz.n, sz.k, 1.5f, DType::kBF16,
                                  a.data(), lda, sa, b.data(), ldb, sb, beta, c, out.data(), ldc,
                                  sc)
                          .ok());
          results.push_back(std::move(out));
          ExpectMatchesReference({.ab = DType::kBF16,
                                  .c = c,
                                  .batch = sz.batch,
                                  .m = sz.m,
                                  .n = sz.n,
                                  .k = sz.k,
                                  .pad_a = 1,
                                  .pad_b = 2,
                                  .pad_c = 3,
                                  .gap_a = 5,
                                  .gap_b = 3,
                                  .gap_c = 2,
                                  .alpha = 1.5f,
                                  .beta = beta,
                                  .seed = 83},
                                 c == DType::kBF16 ? kBF16OutTol : kF32Tol);
        }
        for (size_t i = 1; i < results.size(); ++i) {
          EXPECT_TRUE(results[i] == results[0])
              << sz.batch << " x " << sz.m << "x" << sz.n << "x" << sz.k << " C " << DTypeName(c)
              << " beta=" << beta << ": " << i + 1 << " threads differ";
        }
      }
    }
  }
  SetGemmThreads(before);
}

// A bf16 weight gradient whose C (over 2^18 values: 1 MiB in f32) is
// larger than L2: the kernel then prefetches C's tiles and packs B slices as
// wide as n, into f32 C (alpha, beta) and bf16 C (through f32 running
// sums), in chunks of 96 rows of A (the last one partial), at 1 and 2
// threads, with padded leading dims. 1030 x 1030: 17 panels, the last of 6
// columns, all of k (odd) in one slice, split by rows; 130 x 2050: 33
// panels, so wide that the slices are cut to 496 pairs (two, the last with
// one odd value), split by columns.
TEST(GemmTest, TransposedABf16WithCLargerThanL2MatchesReference) {
  if (!CpuHasAvx512Bf16()) GTEST_SKIP() << "no AVX-512 BF16: oneDNN computes these";
  struct Size {
    int64_t m, n, k;
  };
  const int before = GemmThreads();
  for (Size sz : {Size{1030, 1030, 515}, Size{130, 2050, 1025}}) {
    const int64_t m = sz.m, n = sz.n, k = sz.k, lda = m + 3, ldb = n + 1, ldc = n + 2;
    std::vector<float> a = Random(k * lda, 110), b = Random(k * ldb, 111);
    for (float& v : a) v = RoundTo(DType::kBF16, v);
    for (float& v : b) v = RoundTo(DType::kBF16, v);
    const std::vector<char> ea = Encode(DType::kBF16, a), eb = Encode(DType::kBF16, b);
    // A^T B in double, in the order that reads rows of both.
    std::vector<double> ref(m * n, 0.0);
    for (int64_t p = 0; p < k; ++p) {
      for (int64_t i = 0; i < m; ++i) {
        const double av = a[p * lda + i];
        for (int64_t j = 0; j < n; ++j) ref[i * n + j] += av * b[p * ldb + j];
      }
    }
    for (int threads : {1, 2}) {
      SetGemmThreads(threads);
      for (DType c : {DType::kF32, DType::kBF16}) {
        const float alpha = c == DType::kF32 ? 1.5f : 1.0f, beta = c == DType::kF32 ? 0.5f : 0.0f;
        std::vector<float> c0 = Random(m * ldc, 112);
        for (float& v : c0) v = RoundTo(c, v);
        std::vector<char> ec = Encode(c, c0);
        ASSERT_TRUE(Gemm(true, false, m, n, k, alpha, DType::kBF16, ea.data(), lda, eb.data(), ldb,
                         beta, c, ec.data(), ldc)
                        .ok());
        const double tol = c == DType::kBF16 ? kBF16OutTol : kF32Tol;
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < ldc; ++j) {
            const float got = Decode(c, ec, i * ldc + j);
            if (j >= n) {
              ASSERT_EQ(got, c0[i * ldc + j]) << "padding written at " << i << "," << j;
              continue;
            }
            const double want = alpha * ref[i * n + j] + beta * c0[i * ldc + j];
            ASSERT_NEAR(got, want, tol * (1 + std::fabs(want)))
                << m << " x " << n << ", " << threads << " threads, C " << DTypeName(c) << " at "
                << i << "," << j;
          }
        }
      }
    }
  }
  SetGemmThreads(before);
}

// f32 products of 2^30 multiply-adds and more take oneDNN's GEMM driver in
// every layout (smaller ones its matmul primitive): both layouts of each
// operand, padded leading dims, alpha and beta.
TEST(GemmTest, LargeF32ProductsMatchReference) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      ExpectMatchesReference({.ta = ta, .tb = tb, .m = 1024, .n = 1025, .k = 1024, .pad_a = 3,
                              .pad_b = 1, .pad_c = 2, .alpha = 1.5f, .beta = 0.5f,
                              .seed = static_cast<uint32_t>(100 + 2 * ta + tb)},
                             kF32Tol);
    }
  }
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

// Every path (oneDNN's primitive and its row and batch splits, the narrow
// f32 kernel, the bf16 transposed-A kernel and its split reduction, the
// f32 transposed-A driver) gives the right product when called from the
// threads of the caller's own parallel region, whose nested teams have one
// thread.
TEST(GemmTest, RunsInsideTheCallersParallelRegion) {
  const int before = GemmThreads();
  SetGemmThreads(2);
  std::vector<Product> products = {{.m = 300, .n = 90, .k = 50, .seed = 110},
                                   {.batch = 4, .m = 40, .n = 30, .k = 20, .seed = 111},
                                   {.m = 130, .n = 64, .k = 37, .seed = 112},
                                   {.ab = DType::kBF16,
                                    .c = DType::kBF16,
                                    .ta = true,
                                    .m = 128,
                                    .n = 128,
                                    .k = 2048,
                                    .seed = 113},
                                   {.ta = true, .m = 70, .n = 13, .k = 301, .seed = 114}};
#pragma omp parallel num_threads(2)
  for (const Product& p : products) {
    ExpectMatchesReference(p, p.c == DType::kBF16 ? kBF16OutTol : kF32Tol);
  }
  SetGemmThreads(before);
}

// A GEMM turns OpenMP's dynamic team sizes off on its thread, also after
// the caller turned them on (a smaller team than planned would leave parts
// of C unwritten).
TEST(GemmTest, TurnsOffDynamicTeams) {
  omp_set_dynamic(1);
  ExpectMatchesReference({.m = 300, .n = 90, .k = 50, .seed = 115}, kF32Tol);
  EXPECT_EQ(omp_get_dynamic(), 0);
}

// Below the default size (2^20 multiply-adds) a product runs whole on the
// calling thread: on 2 threads, oneDNN's row ranges (f32 and bf16), its
// batch ranges, tpx's bf16 kernel with A transposed (one product and a
// batch) give the right products, and the calling thread's OpenMP setting
// is the GEMM thread count again after each. Negative sizes read as 0.
TEST(GemmTest, SmallProductsRunWholeAtTheDefaultSize) {
  const int before = GemmThreads();
  const int64_t before_macs = GemmMinTeamMacs();
  SetGemmMinTeamMacs(-5);
  EXPECT_EQ(GemmMinTeamMacs(), 0);
  SetGemmMinTeamMacs(int64_t{1} << 20);
  SetGemmThreads(2);
  const std::vector<Product> products = {
      {.m = 200, .n = 40, .k = 24, .pad_a = 3, .alpha = 1.5f, .beta = 0.25f, .seed = 120},
      {.ab = DType::kBF16, .c = DType::kBF16, .tb = true, .m = 128, .n = 40, .k = 24, .seed = 121},
      {.batch = 4, .m = 13, .n = 20, .k = 11, .gap_a = 5, .seed = 122},
      {.ab = DType::kBF16, .ta = true, .m = 64, .n = 64, .k = 64, .seed = 123},
      {.ab = DType::kBF16, .ta = true, .batch = 3, .m = 45, .n = 37, .k = 77, .seed = 124}};
  for (const Product& p : products) {
    ExpectMatchesReference(p, p.c == DType::kBF16 ? kBF16OutTol : kF32Tol);
    EXPECT_EQ(omp_get_max_threads(), GemmThreads()) << "after seed " << p.seed;
  }
  SetGemmThreads(before);
  SetGemmMinTeamMacs(before_macs);
}

TEST(GemmTest, ThreadSetting) {
  const int before = GemmThreads();
  EXPECT_GE(before, 1);
  SetGemmThreads(1);
  EXPECT_EQ(GemmThreads(), 1);
  SetGemmThreads(0);
  EXPECT_EQ(GemmThreads(), 1);
  // OMP_THREAD_LIMIT caps the setting (//core:gemm_thread_limit_test runs
  // this file with a limit of 1).
  SetGemmThreads(3);
  EXPECT_EQ(GemmThreads(), std::min(3, omp_get_thread_limit()));
  SetGemmThreads(before);
  EXPECT_EQ(GemmBackendName(), "onednn");
}

}  // namespace
}  // namespace tpx
