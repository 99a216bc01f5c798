// The fused transformer ops (core/ops_nn.cc) against double-precision
// references computed here row by row, on shapes small enough to read and
// large enough to split over the kernel threads.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/compare_testutil.h"
#include "core/cpu/row_kernels_isa.h"
#include "core/cpu/vec_math.h"
#include "core/cpu_features.h"
#include "core/device_testutil.h"
#include "core/ops.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpx::ops {
namespace {

using ::testing::HasSubstr;

TPX_DEVICE_TEST_SUITE(FusedNnTest);

// Devices without the fused kernels return Unimplemented (callers compose).
#define SKIP_IF_UNIMPLEMENTED(status_or)                                      \
  if (absl::IsUnimplemented((status_or).status())) {                         \
    GTEST_SKIP() << (status_or).status();                                    \
  }

struct LayerNormRef {
  std::vector<double> y, mean, rstd, dx, dw, db;
};

// Layer norm over rows of h and its gradients, in double.
LayerNormRef LayerNormReference(const std::vector<double>& x, const std::vector<double>& w,
                                const std::vector<double>& b, const std::vector<double>& g,
                                int64_t h, double eps) {
  const int64_t rows = static_cast<int64_t>(x.size()) / h;
  LayerNormRef r;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  r.dw.assign(h, 0.0);
  r.db.assign(h, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    const double* xr = x.data() + i * h;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < h; ++j) mean += xr[j];
    mean /= h;
    for (int64_t j = 0; j < h; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    var /= h;
    const double rstd = 1.0 / std::sqrt(var + eps);
    r.mean.push_back(mean);
    r.rstd.push_back(rstd);
    double m1 = 0, m2 = 0;
    for (int64_t j = 0; j < h; ++j) {
      const double xhat = (xr[j] - mean) * rstd;
      r.y[i * h + j] = xhat * w[j] + b[j];
      const double d = g[i * h + j] * w[j];
      m1 += d / h;
      m2 += d * xhat / h;
      r.dw[j] += g[i * h + j] * xhat;
      r.db[j] += g[i * h + j];
    }
    for (int64_t j = 0; j < h; ++j) {
      const double xhat = (xr[j] - mean) * rstd;
      r.dx[i * h + j] = rstd * (g[i * h + j] * w[j] - m1 - xhat * m2);
    }
  }
  return r;
}

TEST_P(FusedNnTest, LayerNormAndBackwardMatchDoubleReference) {
  // [300, 130]: 39,000 elements, split over the threads.
  for (const Shape& shape : {Shape{3, 5}, Shape{2, 2, 8}, Shape{300, 130}}) {
    const int64_t h = shape.back();
    Tensor x = TestRandom(shape, DType::kF32, 1, -2.0f, 3.0f);
    Tensor g = TestRandom(shape, DType::kF32, 2);
    Tensor w = TestRandom({h}, DType::kF32, 3, 0.5f, 1.5f);
    Tensor b = TestRandom({h}, DType::kF32, 4);
    absl::StatusOr<LayerNormResult> f = LayerNorm(x, w, b, 1e-5);
    SKIP_IF_UNIMPLEMENTED(f);
    ASSERT_TRUE(f.ok()) << f.status();
    LayerNormRef ref = LayerNormReference(x.ToVector<double>(), w.ToVector<double>(),
                                          b.ToVector<double>(), g.ToVector<double>(), h, 1e-5);
    const int64_t rows = x.numel() / h;
    EXPECT_TRUE(TensorsClose(f->y, *TestFromVector<double>(ref.y, shape), 1e-5, 1e-5));
    EXPECT_TRUE(TensorsClose(f->mean, *TestFromVector<double>(ref.mean, {rows}), 1e-5, 1e-6));
    EXPECT_TRUE(TensorsClose(f->rstd, *TestFromVector<double>(ref.rstd, {rows}), 1e-5, 1e-6));
    absl::StatusOr<LayerNormGradients> d =
        LayerNormBackward(g, x, f->mean, f->rstd, w, true, true, true);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE(TensorsClose(d->input, *TestFromVector<double>(ref.dx, shape), 1e-4, 1e-5));
    EXPECT_TRUE(TensorsClose(d->weight, *TestFromVector<double>(ref.dw, {h}), 1e-4, 1e-4));
    EXPECT_TRUE(TensorsClose(d->bias, *TestFromVector<double>(ref.db, {h}), 1e-4, 1e-4));
    // Only what is asked for.
    d = LayerNormBackward(g, x, f->mean, f->rstd, w, false, false, true);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_FALSE(d->input.defined());
    EXPECT_FALSE(d->weight.defined());
    EXPECT_TRUE(TensorsClose(d->bias, *TestFromVector<double>(ref.db, {h}), 1e-4, 1e-4));
  }
}

TEST_P(FusedNnTest, LayerNormWithoutAffineAndInBf16) {
  const Shape shape = {64, 96};
  Tensor x = TestRandom(shape, DType::kF32, 5, -1.0f, 1.0f);
  Tensor g = TestRandom(shape, DType::kF32, 6);
  const std::vector<double> ones(96, 1.0), zeros(96, 0.0);
  LayerNormRef ref = LayerNormReference(x.ToVector<double>(), ones, zeros, g.ToVector<double>(),
                                        96, 1e-5);
  absl::StatusOr<LayerNormResult> f = LayerNorm(x, Tensor(), Tensor(), 1e-5);
  SKIP_IF_UNIMPLEMENTED(f);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(TensorsClose(f->y, *TestFromVector<double>(ref.y, shape), 1e-5, 1e-5));
  absl::StatusOr<LayerNormGradients> d =
      LayerNormBackward(g, x, f->mean, f->rstd, Tensor(), true, false, false);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(TensorsClose(d->input, *TestFromVector<double>(ref.dx, shape), 1e-4, 1e-5));
  // bf16 in and out, f32 statistics: within bf16 rounding of the reference.
  Tensor xb = *x.To(DType::kBF16);
  LayerNormRef refb = LayerNormReference(xb.ToVector<double>(), ones, zeros,
                                         g.ToVector<double>(), 96, 1e-5);
  absl::StatusOr<LayerNormResult> fb = LayerNorm(xb, Tensor(), Tensor(), 1e-5);
  ASSERT_TRUE(fb.ok()) << fb.status();
  EXPECT_EQ(fb->y.dtype(), DType::kBF16);
  EXPECT_TRUE(TensorsClose(fb->y, *TestFromVector<double>(refb.y, shape), 1e-2, 1e-2));
}

TEST_P(FusedNnTest, LayerNormRejectsBadArguments) {
  Tensor x = TestRandom({2, 4});
  absl::StatusOr<LayerNormResult> f = LayerNorm(x, TestRandom({3}), Tensor(), 1e-5);
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("weight"));
  EXPECT_FALSE(LayerNorm(Tensor(), Tensor(), Tensor(), 1e-5).ok());
  EXPECT_FALSE(LayerNorm(*TestZeros({2, 4}, DType::kI64), Tensor(), Tensor(), 1e-5).ok());
  f = LayerNorm(x, Tensor(), Tensor(), 1e-5);
  SKIP_IF_UNIMPLEMENTED(f);
  ASSERT_TRUE(f.ok());
  absl::StatusOr<LayerNormGradients> d =
      LayerNormBackward(x, x, f->rstd, *TestZeros({3}), Tensor(), true, true, true);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("rstd"));
  EXPECT_FALSE(LayerNormBackward(*x.Narrow(0, 0, 1), x, f->mean, f->rstd, Tensor(), true, true,
                                 true)
                   .ok());
}

// softmax(scale * x) over rows of n of [batch, m, n], row i seeing j <= i + n - m.
std::vector<double> SoftmaxReference(const std::vector<double>& x, int64_t m, int64_t n,
                                     double scale, bool causal) {
  std::vector<double> y(x.size(), 0.0);
  for (int64_t r = 0; r < static_cast<int64_t>(x.size()) / n; ++r) {
    const int64_t valid = causal ? std::clamp<int64_t>(r % m + 1 + n - m, 0, n) : n;
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < valid; ++j) mx = std::max(mx, scale * x[r * n + j]);
    for (int64_t j = 0; j < valid; ++j) sum += std::exp(scale * x[r * n + j] - mx);
    for (int64_t j = 0; j < valid; ++j) y[r * n + j] = std::exp(scale * x[r * n + j] - mx) / sum;
  }
  return y;
}

TEST_P(FusedNnTest, ScaledSoftmaxMatchesDoubleReference) {
  struct Case {
    Shape shape;
    double scale;
    bool causal;
  };
  // [4, 130, 130] is split over the threads; [2, 3, 5]: more columns than rows.
  for (const Case& c : {Case{{2, 3, 5, 5}, 0.5, true}, Case{{4, 130, 130}, 0.125, true},
                        Case{{2, 3, 5}, 1.0, true}, Case{{3, 7}, 2.0, false}}) {
    const int64_t n = c.shape.back(), m = c.shape[c.shape.size() - 2];
    Tensor x = TestRandom(c.shape, DType::kF32, 7, -4.0f, 4.0f);
    absl::StatusOr<Tensor> y = ScaledSoftmax(x, c.scale, c.causal);
    SKIP_IF_UNIMPLEMENTED(y);
    ASSERT_TRUE(y.ok()) << y.status();
    std::vector<double> ref = SoftmaxReference(x.ToVector<double>(), m, n, c.scale, c.causal);
    EXPECT_TRUE(TensorsClose(*y, *TestFromVector<double>(ref, c.shape), 1e-5, 1e-7))
        << ShapeString(c.shape);
    if (c.causal) {
      // Masked positions are exactly 0.
      std::vector<float> got = y->ToVector<float>();
      for (size_t i = 0; i < ref.size(); ++i) {
        if (ref[i] == 0.0) {
          EXPECT_EQ(got[i], 0.0f) << i;
        }
      }
    }
    // Backward: dx = scale * y * (g - sum(g * y)).
    Tensor g = TestRandom(c.shape, DType::kF32, 8);
    std::vector<double> gv = g.ToVector<double>(), dx(ref.size());
    for (size_t r = 0; r < ref.size() / n; ++r) {
      double dot = 0;
      for (int64_t j = 0; j < n; ++j) dot += gv[r * n + j] * ref[r * n + j];
      for (int64_t j = 0; j < n; ++j) {
        dx[r * n + j] = c.scale * ref[r * n + j] * (gv[r * n + j] - dot);
      }
    }
    absl::StatusOr<Tensor> d = ScaledSoftmaxBackward(g, *y, c.scale);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE(TensorsClose(*d, *TestFromVector<double>(dx, c.shape), 1e-5, 1e-6));
  }
  EXPECT_FALSE(ScaledSoftmax(TestRandom({4}), 1.0, /*causal=*/true).ok());
  EXPECT_FALSE(ScaledSoftmaxBackward(TestRandom({2, 3}), TestRandom({3, 2}), 1.0).ok());
}

// What the rows read and how they end: a causal row never looks past its
// last key (garbage there changes nothing, also in a last vector shorter
// than 16), a NaN score makes its row NaN, a row of -inf scores is 0 / 0
// (NaN), and bf16 computes in f32 from the exact bf16 values and rounds
// once (on the CPU bit for bit the f32 result rounded).
TEST_P(FusedNnTest, ScaledSoftmaxRowEdgesAndBf16) {
  const int64_t m = 20, n = 37;  // row i sees keys j <= i + 17
  std::vector<float> clean = TestRandom({2, m, n}, DType::kF32, 11, -3.0f, 3.0f).ToVector<float>();
  std::vector<float> garbage = clean;
  for (int64_t r = 0; r < 2 * m; ++r) {
    for (int64_t j = r % m + 1 + n - m; j < n; ++j) {
      garbage[r * n + j] = j % 2 == 0 ? NAN : INFINITY;
    }
  }
  absl::StatusOr<Tensor> y_clean =
      ScaledSoftmax(*TestFromVector<float>(clean, {2, m, n}), 0.7, /*causal=*/true);
  SKIP_IF_UNIMPLEMENTED(y_clean);
  ASSERT_TRUE(y_clean.ok()) << y_clean.status();
  absl::StatusOr<Tensor> y_garbage =
      ScaledSoftmax(*TestFromVector<float>(garbage, {2, m, n}), 0.7, /*causal=*/true);
  ASSERT_TRUE(y_garbage.ok()) << y_garbage.status();
  EXPECT_EQ(y_garbage->ToVector<float>(), y_clean->ToVector<float>());

  // Rows of 37 (two whole vectors and a partial one): a NaN in row 0's
  // last vector, row 1 all -inf, row 2 finite.
  std::vector<float> rows = TestRandom({3, n}, DType::kF32, 12, -3.0f, 3.0f).ToVector<float>();
  rows[35] = NAN;
  for (int64_t j = 0; j < n; ++j) rows[n + j] = -INFINITY;
  absl::StatusOr<Tensor> y_rows =
      ScaledSoftmax(*TestFromVector<float>(rows, {3, n}), 1.0, /*causal=*/false);
  ASSERT_TRUE(y_rows.ok()) << y_rows.status();
  const std::vector<float> got = y_rows->ToVector<float>();
  double row2_sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    EXPECT_TRUE(std::isnan(got[j])) << j;
    EXPECT_TRUE(std::isnan(got[n + j])) << j;
    EXPECT_TRUE(std::isfinite(got[2 * n + j])) << j;
    row2_sum += got[2 * n + j];
  }
  EXPECT_NEAR(row2_sum, 1.0, 1e-6);

  Tensor x16 = TestRandom({2, m, n}, DType::kBF16, 13, -3.0f, 3.0f);
  Tensor g16 = TestRandom({2, m, n}, DType::kBF16, 14);
  absl::StatusOr<Tensor> y16 = ScaledSoftmax(x16, 0.7, /*causal=*/true);
  absl::StatusOr<Tensor> y32 = ScaledSoftmax(*x16.To(DType::kF32), 0.7, /*causal=*/true);
  ASSERT_TRUE(y16.ok() && y32.ok());
  absl::StatusOr<Tensor> d16 = ScaledSoftmaxBackward(g16, *y16, 0.7);
  absl::StatusOr<Tensor> d32 =
      ScaledSoftmaxBackward(*g16.To(DType::kF32), *y16->To(DType::kF32), 0.7);
  ASSERT_TRUE(d16.ok() && d32.ok());
  if (TestDevice().is_cpu()) {
    EXPECT_EQ(y16->ToVector<float>(), y32->To(DType::kBF16)->ToVector<float>());
    EXPECT_EQ(d16->ToVector<float>(), d32->To(DType::kBF16)->ToVector<float>());
  } else {
    EXPECT_TRUE(TensorsClose(*y16->To(DType::kF32), *y32, 1e-2, 1e-3));
    EXPECT_TRUE(TensorsClose(*d16->To(DType::kF32), *d32, 1e-2, 1e-3));
  }
}

TEST_P(FusedNnTest, BiasGeluAndBackwardMatchDoubleReference) {
  // [300, 130]: split over the threads, the bias gradient over several row
  // chunks with a partial last one; [3, 5, 7]: rows over two leading dims;
  // [0, 9]: no rows (bias gradient 0).
  for (const Shape& shape : {Shape{300, 130}, Shape{3, 5, 7}, Shape{1, 1}, Shape{0, 9}}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(absl::StrCat(std::string(DTypeName(dtype)), " ", ShapeString(shape)));
      const int64_t h = shape.back();
      const int64_t n = NumElements(shape), rows = n / h;
      Tensor x = TestRandom(shape, dtype, 31, -4.0f, 4.0f);
      Tensor b = TestRandom({h}, dtype, 32);
      Tensor g = TestRandom(shape, dtype, 33);
      absl::StatusOr<Tensor> y = BiasGelu(x, b);
      SKIP_IF_UNIMPLEMENTED(y);
      ASSERT_TRUE(y.ok()) << y.status();
      absl::StatusOr<BiasGeluGradients> d = BiasGeluBackward(g, x, b);
      ASSERT_TRUE(d.ok()) << d.status();
      ASSERT_EQ(y->dtype(), dtype);
      ASSERT_EQ(d->dx.dtype(), dtype);
      ASSERT_EQ(d->dx.shape(), shape);
      ASSERT_EQ(d->dbias.dtype(), dtype);
      ASSERT_EQ(d->dbias.shape(), Shape{h});
      const std::vector<double> xv = x.ToVector<double>(), bv = b.ToVector<double>();
      const std::vector<double> gv = g.ToVector<double>();
      const std::vector<double> yv = y->ToVector<double>(), dv = d->dx.ToVector<double>();
      const double rel = dtype == DType::kF32 ? 1e-5 : 8e-3;
      std::vector<double> want_db(h, 0.0), abs_db(h, 0.0);
      for (int64_t i = 0; i < n; ++i) {
        const double z = xv[i] + bv[i % h];
        const double cdf = 0.5 * (1.0 + std::erf(z / std::sqrt(2.0)));
        const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2.0 * M_PI);
        const double want_y = z * cdf, want_dx = gv[i] * (cdf + z * pdf);
        ASSERT_NEAR(yv[i], want_y, rel * std::abs(want_y) + 1e-6) << i;
        ASSERT_NEAR(dv[i], want_dx, rel * std::abs(want_dx) + 1e-6) << i;
        want_db[i % h] += want_dx;
        abs_db[i % h] += std::abs(want_dx);
      }
      // Error bound of the column sum: relative to the sum of magnitudes.
      const std::vector<double> db = d->dbias.ToVector<double>();
      for (int64_t j = 0; j < h; ++j) {
        ASSERT_NEAR(db[j], want_db[j], rel * abs_db[j] + 1e-6) << j << " of " << rows << " rows";
      }
      if (!TestDevice().is_cpu()) continue;
      // On the CPU, whichever ISA runs the rows: the scalar functions' bits
      // (f32 arithmetic on the widened inputs, rounded once to the dtype).
      const std::vector<float> xf = x.ToVector<float>(), bf = b.ToVector<float>();
      const std::vector<float> gf = g.ToVector<float>();
      const std::vector<float> yf = y->ToVector<float>(), df = d->dx.ToVector<float>();
      for (int64_t i = 0; i < n; ++i) {
        const float z = xf[i] + bf[i % h];
        const float want_y = cpu::Gelu(z), want_dx = gf[i] * cpu::GeluGrad(z);
        auto in_dtype = [&](float v) {
          return dtype == DType::kBF16 ? BF16ToFloat(FloatToBF16(v)) : v;
        };
        ASSERT_EQ(yf[i], in_dtype(want_y)) << i;
        ASSERT_EQ(df[i], in_dtype(want_dx)) << i;
      }
    }
  }
  EXPECT_FALSE(BiasGeluBackward(TestRandom({2, 3}), TestRandom({3, 2}), TestRandom({2})).ok());
  EXPECT_THAT(BiasGelu(TestRandom({2, 3}), TestRandom({2})).status().message(),
              HasSubstr("BiasGelu: bias"));
}

// The bit patterns of a float tensor's values (bf16 widened exactly).
std::vector<uint32_t> Bits(const Tensor& t) {
  const std::vector<float> v = t.ToVector<float>();
  std::vector<uint32_t> bits(v.size());
  std::memcpy(bits.data(), v.data(), v.size() * sizeof(float));
  return bits;
}

// The layer-norm and bias + GeLU results of one set of inputs, in order.
std::vector<Tensor> FusedRowResults(const Tensor& x, const Tensor& g, const Tensor& w,
                                    const Tensor& b, bool want_dx, bool want_dw, bool want_db) {
  std::vector<Tensor> out;
  absl::StatusOr<LayerNormResult> f = LayerNorm(x, w, b, 1e-5);
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return out;
  out.insert(out.end(), {f->y, f->mean, f->rstd});
  absl::StatusOr<LayerNormGradients> d =
      LayerNormBackward(g, x, f->mean, f->rstd, w, want_dx, want_dw, want_db);
  EXPECT_TRUE(d.ok()) << d.status();
  if (!d.ok()) return out;
  for (const Tensor* t : {&d->input, &d->weight, &d->bias}) {
    if (t->defined()) out.push_back(*t);
  }
  if (b.defined()) {
    const Tensor bias = *b.To(x.dtype());
    absl::StatusOr<Tensor> y = BiasGelu(x, bias);
    absl::StatusOr<BiasGeluGradients> dg = BiasGeluBackward(g, x, bias);
    EXPECT_TRUE(y.ok() && dg.ok());
    if (y.ok() && dg.ok()) out.insert(out.end(), {*y, dg->dx, dg->dbias});
  }
  return out;
}

// Whether this build fuses the portable rows' multiplies and adds as the
// intrinsics do (an optimising build does; an unoptimised one leaves them
// apart, one more rounding each).
#if defined(__OPTIMIZE__)
constexpr bool kPortableRowsFused = true;
#else
constexpr bool kPortableRowsFused = false;
#endif

// On a CPU with AVX-512 BF16 the layer-norm and bias + GeLU rows run in
// intrinsics (core/cpu/row_kernels_isa.h), layer norm two rows to a vector:
// in an optimised build their bits are the portable rows'; unoptimised,
// their results are within rounding of each other. Row counts that leave
// odd rows and partial groups, and widths that are not a multiple of 8
// (the portable rows in both).
TEST(RowKernelsIsaTest, Avx512RowsGiveThePortableRowsBits) {
  if (!CpuHasAvx512Bf16()) GTEST_SKIP() << "the CPU has no AVX-512 BF16: portable rows only";
  if (!TestDevice().is_cpu()) GTEST_SKIP() << "CPU kernels";
  for (const Shape& shape : {Shape{37, 128}, Shape{300, 96}, Shape{2, 9, 136}, Shape{5, 130},
                             Shape{1, 8}, Shape{70, 256}}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const int64_t h = shape.back();
      Tensor x = *TestRandom(shape, DType::kF32, 41, -2.0f, 3.0f).To(dtype);
      Tensor g = *TestRandom(shape, DType::kF32, 42).To(dtype);
      Tensor w = TestRandom({h}, DType::kF32, 43, 0.5f, 1.5f);
      Tensor b = TestRandom({h}, DType::kF32, 44);
      struct Case {
        bool weight, bias, dx, dw, db;
      };
      for (const Case& c :
           {Case{true, true, true, true, true}, Case{false, false, true, false, false},
            Case{true, false, true, true, false}, Case{false, true, false, false, true},
            Case{true, true, true, false, false}}) {
        SCOPED_TRACE(absl::StrCat(std::string(DTypeName(dtype)), " ", ShapeString(shape),
                                  " weight ", c.weight, " bias ", c.bias, " dx/dw/db ", c.dx, c.dw,
                                  c.db));
        const Tensor wc = c.weight ? w : Tensor(), bc = c.bias ? b : Tensor();
        cpu::SetRowKernelsIsaForTesting(cpu::RowKernelsIsa::kPortable);
        const std::vector<Tensor> portable = FusedRowResults(x, g, wc, bc, c.dx, c.dw, c.db);
        cpu::SetRowKernelsIsaForTesting(cpu::RowKernelsIsa::kAvx512);
        ASSERT_EQ(cpu::RowKernelsIsaInUse(), cpu::RowKernelsIsa::kAvx512);
        const std::vector<Tensor> avx512 = FusedRowResults(x, g, wc, bc, c.dx, c.dw, c.db);
        ASSERT_EQ(portable.size(), avx512.size());
        for (size_t i = 0; i < portable.size(); ++i) {
          if (kPortableRowsFused) {
            EXPECT_EQ(Bits(portable[i]), Bits(avx512[i])) << "result " << i;
          } else {
            const double rtol = avx512[i].dtype() == DType::kBF16 ? 8e-3 : 1e-5;
            EXPECT_TRUE(TensorsClose(avx512[i], portable[i], rtol, 1e-5)) << "result " << i;
          }
        }
      }
    }
  }
}
}  // namespace
}  // namespace tpx::ops
