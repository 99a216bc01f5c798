#include <vector>

#include "core/compare_testutil.h"
#include "core/device_testutil.h"
#include "core/ops.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpx::ops {
namespace {

using ::testing::HasSubstr;

TPX_DEVICE_TEST_SUITE(MatmulTest);
TPX_DEVICE_TEST_SUITE(LinearTest);

// op(a) @ op(b) for 2-D tensors, naive loops in double.
Tensor NaiveMatmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  std::vector<double> av = a.ToVector<double>(), bv = b.ToVector<double>();
  const int64_t m = ta ? a.size(1) : a.size(0), k = ta ? a.size(0) : a.size(1);
  const int64_t n = tb ? b.size(0) : b.size(1);
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        s += (ta ? av[p * m + i] : av[i * k + p]) * (tb ? bv[j * k + p] : bv[p * n + j]);
      }
      c[i * n + j] = s;
    }
  }
  return *TestFromVector<double>(c, {m, n});
}

Shape Stored(int64_t rows, int64_t cols, bool trans) {
  return trans ? Shape{cols, rows} : Shape{rows, cols};
}

TEST_P(MatmulTest, AllTransposesAllDTypes) {
  const int64_t m = 13, k = 29, n = 7;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const double tol = dtype == DType::kF32 ? 1e-5 : 1e-2;
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        Tensor a = TestRandom(Stored(m, k, ta), dtype, 1);
        Tensor b = TestRandom(Stored(k, n, tb), dtype, 2);
        Tensor c = *Matmul(a, b, ta, tb);
        EXPECT_EQ(c.dtype(), dtype);
        EXPECT_EQ(c.shape(), (Shape{m, n}));
        EXPECT_TRUE(TensorsClose(c, NaiveMatmul(a, b, ta, tb), tol, tol))
            << DTypeName(dtype) << " ta=" << ta << " tb=" << tb;
      }
    }
  }
}

TEST_P(MatmulTest, StridedViewsNeedNoTransposeFlag) {
  Tensor a = TestRandom({8, 5}, DType::kF32, 3);
  Tensor b = TestRandom({6, 8}, DType::kF32, 4);
  Tensor at = *a.Transpose(0, 1);  // [5, 8] column-major view
  Tensor bt = *b.Transpose(0, 1);  // [8, 6]
  Tensor ref = NaiveMatmul(at.Contiguous().value(), bt.Contiguous().value(), false, false);
  EXPECT_TRUE(TensorsClose(*Matmul(at, bt), ref, 1e-5, 1e-5));
  // A narrowed (padded-row) operand and a fully strided one.
  Tensor wide = TestRandom({5, 20}, DType::kF32, 5);
  Tensor narrow = *wide.Narrow(1, 3, 8);
  EXPECT_TRUE(TensorsClose(*Matmul(narrow, bt),
                           NaiveMatmul(*narrow.Contiguous(), *bt.Contiguous(), false, false),
                           1e-5, 1e-5));
  Tensor every_other = *TestRandom({5, 16}, DType::kF32, 6).Slice(1, 0, 16, 2);
  EXPECT_TRUE(TensorsClose(*Matmul(every_other, bt),
                           NaiveMatmul(*every_other.Contiguous(), *bt.Contiguous(), false, false),
                           1e-5, 1e-5));
}

TEST_P(MatmulTest, Batched) {
  Tensor a = TestRandom({3, 4, 5}, DType::kF32, 7);
  Tensor b = TestRandom({3, 5, 6}, DType::kF32, 8);
  Tensor w = TestRandom({6, 5}, DType::kF32, 9);
  Tensor c = *Matmul(a, b);
  Tensor d = *Matmul(a, w, false, true);  // shared 2-D b, flattened to one GEMM
  for (int64_t i = 0; i < 3; ++i) {
    Tensor ai = *a.Narrow(0, i, 1)->Squeeze(0);
    Tensor bi = *b.Narrow(0, i, 1)->Squeeze(0);
    EXPECT_TRUE(TensorsClose(*c.Narrow(0, i, 1)->Squeeze(0), NaiveMatmul(ai, bi, false, false),
                             1e-5, 1e-5));
    EXPECT_TRUE(TensorsClose(*d.Narrow(0, i, 1)->Squeeze(0), NaiveMatmul(ai, w, false, true),
                             1e-5, 1e-5));
  }
  EXPECT_FALSE(Matmul(a, TestRandom({2, 5, 6})).ok());
}

TEST_P(MatmulTest, BatchedTransposed) {
  Tensor a = TestRandom({2, 5, 4}, DType::kBF16, 10);  // op(a) = [2, 4, 5]
  Tensor b = TestRandom({2, 3, 5}, DType::kBF16, 11);  // op(b) = [2, 5, 3]
  Tensor c = *Matmul(a, b, true, true);
  EXPECT_EQ(c.shape(), (Shape{2, 4, 3}));
  for (int64_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(TensorsClose(*c.Narrow(0, i, 1)->Squeeze(0),
                             NaiveMatmul(*a.Narrow(0, i, 1)->Squeeze(0),
                                         *b.Narrow(0, i, 1)->Squeeze(0), true, true),
                             1e-2, 1e-2));
  }
}

// Batched operands as views: a batch dim that is not outermost in memory
// (attention's heads), a transposed view (k^T), a shared 2-D b with a
// transposed a, and an operand with no unit stride (copied).
TEST_P(MatmulTest, BatchedStridedViews) {
  Tensor qs = TestRandom({6, 3, 4}, DType::kF32, 16);  // [T, B, hd]
  Tensor q = *qs.Transpose(0, 1);                      // [B, T, hd], batch stride 4
  Tensor ks = TestRandom({3, 6, 4}, DType::kF32, 17);
  Tensor kt = *ks.Transpose(1, 2);  // [B, hd, T] column-major per product
  Tensor scores = *Matmul(q, kt);
  Tensor w = TestRandom({6, 5}, DType::kF32, 18);
  Tensor shared = *Matmul(q, w, true, false);  // [B, hd, 5]
  Tensor gapped = *TestRandom({3, 4, 12}, DType::kF32, 19).Slice(2, 0, 12, 2);  // [3, 4, 6]
  Tensor vs = TestRandom({3, 6, 2}, DType::kF32, 20);
  Tensor ctx = *Matmul(gapped, vs);
  for (int64_t i = 0; i < 3; ++i) {
    auto at = [i](const Tensor& t) { return *t.Narrow(0, i, 1)->Squeeze(0)->Contiguous(); };
    EXPECT_TRUE(TensorsClose(at(scores), NaiveMatmul(at(q), at(kt), false, false), 1e-5, 1e-5))
        << "product " << i;
    EXPECT_TRUE(TensorsClose(at(shared), NaiveMatmul(at(q), w, true, false), 1e-5, 1e-5))
        << "product " << i;
    EXPECT_TRUE(TensorsClose(at(ctx), NaiveMatmul(at(gapped), at(vs), false, false), 1e-5, 1e-5))
        << "product " << i;
  }
}

TEST_P(MatmulTest, MatmulIntoAccumulatesIntoF32MainGrad) {
  // Weight gradient dW = dY^T X accumulated over two micro-batches into f32.
  Tensor dy1 = TestRandom({16, 6}, DType::kBF16, 12), x1 = TestRandom({16, 9}, DType::kBF16, 13);
  Tensor dy2 = TestRandom({16, 6}, DType::kBF16, 14), x2 = TestRandom({16, 9}, DType::kBF16, 15);
  Tensor main_grad = *TestZeros({6, 9}, DType::kF32);
  ASSERT_TRUE(MatmulInto(main_grad, dy1, x1, true, false, 1.0f, 1.0f).ok());
  ASSERT_TRUE(MatmulInto(main_grad, dy2, x2, true, false, 1.0f, 1.0f).ok());
  Tensor ref = *Add(NaiveMatmul(dy1, x1, true, false), NaiveMatmul(dy2, x2, true, false));
  EXPECT_TRUE(TensorsClose(main_grad, ref, 1e-5, 1e-5));
  // alpha / beta scaling in f32.
  Tensor a = TestRandom({4, 3}, DType::kF32, 16), b = TestRandom({3, 5}, DType::kF32, 17);
  Tensor out = *TestFull({4, 5}, 2.0);
  ASSERT_TRUE(MatmulInto(out, a, b, false, false, 0.5f, 3.0f).ok());
  EXPECT_TRUE(TensorsClose(out, *AddScalar(*Scale(NaiveMatmul(a, b, false, false), 0.5), 6.0),
                           1e-5, 1e-5));
  // Into a column window of a wider buffer (row stride > n).
  Tensor wide = *TestZeros({4, 8});
  Tensor window = *wide.Narrow(1, 2, 5);
  ASSERT_TRUE(MatmulInto(window, a, b, false, false).ok());
  EXPECT_TRUE(TensorsClose(window, NaiveMatmul(a, b, false, false), 1e-5, 1e-5));
  EXPECT_EQ(wide.Item({0, 0}), 0.0);
}

TEST_P(MatmulTest, ErrorsNameShapes) {
  Tensor a = *TestZeros({4, 3});
  Tensor b = *TestZeros({4, 5});
  EXPECT_THAT(std::string(Matmul(a, b).status().message()),
              HasSubstr("Matmul: inner dims differ: 3 vs 4 (a [4, 3], b [4, 5])"));
  EXPECT_TRUE(Matmul(a, b, true, false).ok());
  EXPECT_THAT(std::string(Matmul(a, *b.To(DType::kBF16)).status().message()),
              HasSubstr("dtypes differ"));
  EXPECT_FALSE(Matmul(*TestZeros({4}), b).ok());
  EXPECT_FALSE(Matmul(*TestZeros({4, 4}, DType::kI32), *TestZeros({4, 4}, DType::kI32)).ok());
  Tensor out = *TestZeros({3, 4});
  EXPECT_THAT(std::string(MatmulInto(out, a, b, true, false).message()),
              HasSubstr("cannot write the product into out [3, 4]"));
  Tensor out_t = *TestZeros({5, 3})->Transpose(0, 1);
  EXPECT_THAT(std::string(MatmulInto(out_t, a, b, true, false).message()),
              HasSubstr("unit stride"));
  EXPECT_FALSE(MatmulInto(*TestZeros({3, 5}, DType::kF16), *a.To(DType::kBF16),
                          *b.To(DType::kBF16), true, false)
                   .ok());
}

TEST_P(LinearTest, MatchesMatmulPlusBiasForAnyLeadingDims) {
  Tensor x = TestRandom({2, 3, 8}, DType::kF32, 18);
  Tensor w = TestRandom({5, 8}, DType::kF32, 19);
  Tensor bias = TestRandom({5}, DType::kF32, 20);
  Tensor y = *Linear(x, w, bias);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 5}));
  Tensor ref = *Add(NaiveMatmul(*x.View({6, 8}), w, false, true), bias);
  EXPECT_TRUE(TensorsClose(*y.View({6, 5}), ref, 1e-5, 1e-5));
  Tensor no_bias = *Linear(x, w);
  EXPECT_TRUE(TensorsClose(*no_bias.View({6, 5}), NaiveMatmul(*x.View({6, 8}), w, false, true),
                           1e-5, 1e-5));
  // Strided input (transposed leading dims) and bf16.
  Tensor xt = *x.Transpose(0, 1);  // [3, 2, 8]
  Tensor yt = *Linear(xt, w, bias);
  EXPECT_TRUE(TensorsClose(yt, *y.Transpose(0, 1), 1e-5, 1e-5));
  Tensor yb = *Linear(*x.To(DType::kBF16), *w.To(DType::kBF16), *bias.To(DType::kBF16));
  EXPECT_EQ(yb.dtype(), DType::kBF16);
  EXPECT_TRUE(TensorsClose(yb, y, 3e-2, 3e-2));
  EXPECT_THAT(std::string(Linear(x, *TestZeros({5, 7})).status().message()),
              HasSubstr("Linear: input [2, 3, 8] does not match weight [5, 7]"));
  EXPECT_FALSE(Linear(x, w, *TestZeros({4})).ok());
}

}  // namespace
}  // namespace tpx::ops
