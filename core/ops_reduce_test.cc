#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/compare_testutil.h"
#include "core/device_testutil.h"
#include "core/gemm.h"
#include "core/ops.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpx::ops {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TPX_DEVICE_TEST_SUITE(ReduceTest);

// Reduces t (any dtype) over dim in double with `step`, returning [outer, inner] flattened
// into the keepdim=false shape.
template <typename F>
Tensor ReduceReference(const Tensor& t, int64_t dim, double init, F step) {
  std::vector<double> v = t.ToVector<double>();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d < dim) outer *= t.size(d);
    if (d > dim) inner *= t.size(d);
  }
  const int64_t n = t.size(dim);
  std::vector<double> out(outer * inner, init);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k = 0; k < n; ++k) {
      for (int64_t i = 0; i < inner; ++i) {
        out[o * inner + i] = step(out[o * inner + i], v[(o * n + k) * inner + i]);
      }
    }
  }
  Shape shape = t.shape();
  shape.erase(shape.begin() + dim);
  return *TestFromVector<double>(out, shape);
}

TEST_P(ReduceTest, SumMeanMaxOnEveryDimMatchReference) {
  Tensor x = TestRandom({3, 17, 5}, DType::kF32, 1);
  for (int64_t dim = 0; dim < 3; ++dim) {
    Tensor sum_ref = ReduceReference(x, dim, 0.0, std::plus<>());
    EXPECT_TRUE(TensorsClose(*Sum(x, dim), sum_ref, 1e-5, 1e-5)) << dim;
    Tensor mean_ref = *Scale(*sum_ref.To(DType::kF32), 1.0 / x.size(dim));
    EXPECT_TRUE(TensorsClose(*Mean(x, dim), mean_ref, 1e-5, 1e-6)) << dim;
    Tensor max_ref =
        ReduceReference(x, dim, -INFINITY, [](double a, double b) { return std::max(a, b); });
    EXPECT_TRUE(TensorsClose(*Max(x, dim), max_ref, 0, 0)) << dim;
  }
  // keepdim and negative dims.
  EXPECT_EQ(Sum(x, -1, true)->shape(), (Shape{3, 17, 1}));
  EXPECT_EQ(Max(x, 1, true)->shape(), (Shape{3, 1, 5}));
  EXPECT_EQ(Mean(x, -3)->shape(), (Shape{17, 5}));
}

TEST_P(ReduceTest, StridedAndReducedPrecisionInputs) {
  Tensor x = *TestRandom({40, 6}, DType::kBF16, 2).Transpose(0, 1);  // [6, 40]
  Tensor s = *Sum(x, 1);
  EXPECT_EQ(s.dtype(), DType::kBF16);
  // f32 accumulation, one final rounding to bf16.
  Tensor ref = *ReduceReference(x, 1, 0.0, std::plus<>()).To(DType::kBF16);
  EXPECT_TRUE(TensorsClose(s, ref, 1e-2, 1e-3));
  // Long bf16 sums would lose everything when accumulated in bf16: 4096 * 1 = 4096.
  Tensor ones = *TestOnes({4096}, DType::kBF16);
  EXPECT_EQ(SumAll(ones)->Item(), 4096.0);
}

TEST_P(ReduceTest, ArgmaxFirstMaximumAndIntegers) {
  Tensor x = *TestFromVector<float>({1, 5, 5, 2, 7, 0, 7, 3}, {2, 4});
  EXPECT_THAT(Argmax(x, 1)->ToVector<int64_t>(), ElementsAre(1, 0));
  EXPECT_EQ(Argmax(x, 1)->dtype(), DType::kI64);
  EXPECT_THAT(Argmax(x, 0)->ToVector<int64_t>(), ElementsAre(1, 0, 1, 1));
  EXPECT_EQ(Argmax(x, 0, true)->shape(), (Shape{1, 4}));
  Tensor i = *TestFromVector<int32_t>({3, -1, 4, 1}, {2, 2});
  EXPECT_THAT(Max(i, 1)->ToVector<int32_t>(), ElementsAre(3, 4));
  EXPECT_THAT(Sum(i, 0)->ToVector<int64_t>(), ElementsAre(7, 0));
  EXPECT_EQ(Sum(i, 0)->dtype(), DType::kI64);
}

TEST_P(ReduceTest, NaNPropagates) {
  Tensor x = *TestFromVector<float>({1, NAN, 3, 2}, {4});
  EXPECT_TRUE(std::isnan(Max(x, 0)->Item()));
  EXPECT_EQ(Argmax(x, 0)->Item(), 1.0);
  EXPECT_TRUE(std::isnan(SumAll(x)->Item()));
}

TEST_P(ReduceTest, SumAllAndEmpty) {
  Tensor x = *TestArange(1.0, 101.0, 1.0, DType::kF32);
  Tensor s = *SumAll(*x.View({10, 10}));
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.Item(), 5050.0);
  Tensor e = *TestZeros({3, 0});
  EXPECT_THAT(Sum(e, 1)->ToVector<float>(), ElementsAre(0, 0, 0));
  EXPECT_THAT(std::string(Max(e, 1).status().message()),
              HasSubstr("Max: dim 1 of shape [3, 0] is empty"));
  EXPECT_FALSE(Sum(x, 1).ok());
  EXPECT_FALSE(Mean(*TestZeros({2}, DType::kI32), 0).ok());
}

TEST_P(ReduceTest, SumToUndoesBroadcasting) {
  Tensor g = TestRandom({4, 3, 5}, DType::kF32, 3);
  Tensor bias_grad = *SumTo(g, {5});
  EXPECT_EQ(bias_grad.shape(), (Shape{5}));
  EXPECT_TRUE(TensorsClose(bias_grad, *Sum(*Sum(g, 0), 0), 1e-6, 1e-6));
  Tensor col = *SumTo(g, {3, 1});
  EXPECT_EQ(col.shape(), (Shape{3, 1}));
  EXPECT_TRUE(TensorsClose(*col.View({3}), *Sum(*Sum(g, 2), 0), 1e-6, 1e-6));
  EXPECT_TRUE(TensorsClose(*SumTo(g, {4, 3, 5}), g, 0, 0));
  EXPECT_THAT(std::string(SumTo(g, {2, 5}).status().message()),
              HasSubstr("SumTo: shape [2, 5] does not broadcast to [4, 3, 5]"));
}

// Sums over the rows of [rows, h] (bias gradients) are added up in fixed
// chunks of rows split over the kernel threads: they match the reference
// in f32 and bf16, and are the same bits at 1 and 2 threads.
TEST_P(ReduceTest, LargeColumnSumsMatchReferenceAtAnyThreadCount) {
  const int before = GemmThreads();
  for (const Shape& shape : {Shape{1000, 67}, Shape{3, 130, 33}, Shape{2, 31, 7}}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(ShapeString(shape));
      Tensor x = TestRandom(shape, dtype, 11);
      const int64_t dim = static_cast<int64_t>(shape.size()) - 2;
      Tensor ref = ReduceReference(x, dim, 0.0, std::plus<>());
      Tensor abs_ref =
          ReduceReference(x, dim, 0.0, [](double a, double b) { return a + std::abs(b); });
      SetGemmThreads(1);
      absl::StatusOr<Tensor> one = Sum(x, dim);
      absl::StatusOr<Tensor> mean = Mean(x, dim);
      SetGemmThreads(2);
      absl::StatusOr<Tensor> two = Sum(x, dim);
      ASSERT_TRUE(one.ok() && two.ok() && mean.ok()) << one.status() << two.status();
      ASSERT_EQ(one->dtype(), dtype);
      EXPECT_EQ(one->ToVector<double>(), two->ToVector<double>());
      const double rel = dtype == DType::kF32 ? 1e-5 : 8e-3;
      const std::vector<double> got = one->ToVector<double>(), want = ref.ToVector<double>();
      const std::vector<double> bound = abs_ref.ToVector<double>();
      const std::vector<double> got_mean = mean->ToVector<double>();
      const double n = static_cast<double>(shape[dim]);
      for (size_t j = 0; j < want.size(); ++j) {
        ASSERT_NEAR(got[j], want[j], rel * bound[j] + 1e-6) << j;
        ASSERT_NEAR(got_mean[j], want[j] / n, (rel * bound[j] + 1e-6) / n) << j;
      }
    }
  }
  SetGemmThreads(before);
}

TEST_P(ReduceTest, SoftmaxAndLogSoftmax) {
  Tensor x = TestRandom({3, 7}, DType::kF32, 4, -20.0f, 20.0f);
  for (int64_t dim : {0, 1}) {
    Tensor lse = ReduceReference(x, dim, 0.0, [](double a, double b) { return a + std::exp(b); });
    Tensor log_lse = *Log(*lse.To(DType::kF32));
    Tensor ref_log = *Sub(x, *log_lse.Unsqueeze(dim));
    EXPECT_TRUE(TensorsClose(*LogSoftmax(x, dim), ref_log, 1e-5, 1e-5)) << dim;
    EXPECT_TRUE(TensorsClose(*Softmax(x, dim), *Exp(ref_log), 1e-5, 1e-6)) << dim;
  }
  // Large logits do not overflow.
  Tensor big = *TestFromVector<float>({1000.0f, 1000.0f}, {2});
  EXPECT_THAT(Softmax(big, 0)->ToVector<float>(), ElementsAre(0.5f, 0.5f));
}

// Rows long enough for the vector loops and their tails (37, 300), every
// dim, f32 and bf16; the first maximum and the first NaN where they fall in
// different vectors; rows of -inf.
TEST_P(ReduceTest, LongRowsMaxArgmaxSoftmax) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    Tensor x = TestRandom({4, 37, 300}, dtype, 5, -8.0f, 8.0f);
    for (int64_t dim = 0; dim < 3; ++dim) {
      Tensor max_ref =
          ReduceReference(x, dim, -INFINITY, [](double a, double b) { return std::max(a, b); });
      EXPECT_TRUE(TensorsClose(*Max(x, dim), *max_ref.To(dtype), 0, 0)) << dim;
      Tensor lse = ReduceReference(x, dim, 0.0, [](double a, double b) { return a + std::exp(b); });
      Tensor ref_log = *Sub(*x.To(DType::kF32), *Log(*lse.To(DType::kF32))->Unsqueeze(dim));
      const double tol = dtype == DType::kBF16 ? 1e-2 : 1e-5;
      EXPECT_TRUE(TensorsClose(*LogSoftmax(x, dim)->To(DType::kF32), ref_log, tol, tol)) << dim;
      EXPECT_TRUE(TensorsClose(*Softmax(x, dim)->To(DType::kF32), *Exp(ref_log), tol, 1e-6))
          << dim;
    }
    // Row 0: its maximum 9 at 5 and 21 (argmax 5); row 1: NaN at 20 and 33
    // (argmax 20, max NaN, softmax NaN); row 2: all -inf (max -inf).
    std::vector<float> v = TestRandom({3, 37}, DType::kF32, 6).ToVector<float>();
    v[5] = v[21] = 9.0f;
    v[37 + 20] = v[37 + 33] = NAN;
    for (int64_t j = 0; j < 37; ++j) v[74 + j] = -INFINITY;
    Tensor rows = *TestFromVector<float>(v, {3, 37}, dtype);
    EXPECT_THAT(Argmax(rows, 1)->ToVector<int64_t>(), ElementsAre(5, 20, 0));
    const std::vector<float> m = Max(rows, 1)->ToVector<float>();
    EXPECT_EQ(m[0], 9.0f);
    EXPECT_TRUE(std::isnan(m[1]));
    EXPECT_EQ(m[2], -INFINITY);
    // The same as columns of [37, 3] (reduced a row of 3 at a time).
    Tensor columns = *rows.Transpose(0, 1)->Contiguous();
    EXPECT_THAT(Argmax(columns, 0)->ToVector<int64_t>(), ElementsAre(5, 20, 0));
    const std::vector<float> mc = Max(columns, 0)->ToVector<float>();
    EXPECT_EQ(mc[0], 9.0f);
    EXPECT_TRUE(std::isnan(mc[1]));
    EXPECT_EQ(mc[2], -INFINITY);
    const std::vector<float> sm = Softmax(rows, 1)->ToVector<float>();
    for (int64_t j = 0; j < 37; ++j) {
      EXPECT_TRUE(std::isfinite(sm[j])) << j;
      EXPECT_TRUE(std::isnan(sm[37 + j])) << j;
    }
  }
}

}  // namespace
}  // namespace tpx::ops
