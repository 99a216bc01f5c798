// Reduction kernels against a scalar reference: every op and dtype, widening
// and rounding of bf16/f16 (nearest even, NaN kept), in-place aliasing.
#include "comm_ucx/reduce_kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "gtest/gtest.h"

namespace tpx::ucx {
namespace {

TEST(ReduceKernels, F32OpsMatchScalarReference) {
  // 1003 elements: exercises vector bodies and scalar tails.
  const size_t n = 1003;
  std::vector<float> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 17) - 8.5f;
    b[i] = static_cast<float>(i % 5) * 1.25f - 2.0f;
  }
  const tpx_reduce_op_t ops[] = {TPX_REDUCE_SUM, TPX_REDUCE_PROD, TPX_REDUCE_MAX, TPX_REDUCE_MIN};
  for (tpx_reduce_op_t op : ops) {
    std::vector<float> acc = a;
    ReduceAcc(TPX_DTYPE_F32, op, acc.data(), b.data(), n);
    std::vector<float> out(n);
    ReduceInto(TPX_DTYPE_F32, op, out.data(), a.data(), b.data(), n);
    for (size_t i = 0; i < n; ++i) {
      float want = op == TPX_REDUCE_SUM    ? a[i] + b[i]
                   : op == TPX_REDUCE_PROD ? a[i] * b[i]
                   : op == TPX_REDUCE_MAX  ? std::max(a[i], b[i])
                                           : std::min(a[i], b[i]);
      ASSERT_EQ(acc[i], want) << "op " << op << " element " << i;
      ASSERT_EQ(out[i], want) << "op " << op << " element " << i;
    }
  }
}

TEST(ReduceKernels, IntegerAverageTruncatesAndSumIsExact) {
  std::vector<int64_t> acc = {int64_t{1} << 40, -7, 9};
  const std::vector<int64_t> in = {int64_t{1} << 40, 0, 2};
  ReduceAcc(TPX_DTYPE_I64, TPX_REDUCE_SUM, acc.data(), in.data(), 3);
  EXPECT_EQ(acc[0], int64_t{1} << 41);
  std::vector<int64_t> out(3);
  FromAcc(TPX_DTYPE_I64, TPX_REDUCE_AVG, 2, acc.data(), out.data(), 3);
  EXPECT_EQ(out[0], int64_t{1} << 40);
  EXPECT_EQ(out[1], -3);  // -7 / 2 truncates toward zero
  EXPECT_EQ(out[2], 5);
}

TEST(ReduceKernels, HalfTypesWidenAndRoundLikeCore) {
  // Values around rounding ties, subnormals, infinities and NaN.
  std::vector<float> values;
  for (int i = -300; i <= 300; ++i) values.push_back(1.0f + i * (1.0f / 1024));
  values.insert(values.end(), {0.0f, -0.0f, 1e-6f, 6.1e-5f, 65504.0f, 70000.0f, INFINITY,
                               -INFINITY, NAN, 3.0e38f, 1.0f + 1.0f / 256 + 1.0f / 512});
  const size_t n = values.size();
  for (tpx_dtype_t t : {TPX_DTYPE_BF16, TPX_DTYPE_F16}) {
    std::vector<uint16_t> narrow(n);
    FromAcc(t, TPX_REDUCE_SUM, 1, values.data(), narrow.data(), n);
    std::vector<float> wide(n);
    ToAcc(t, narrow.data(), wide.data(), n);
    for (size_t i = 0; i < n; ++i) {
      const uint16_t want =
          t == TPX_DTYPE_BF16 ? FloatToBF16(values[i]) : FloatToF16(values[i]);
      if (std::isnan(values[i])) {
        EXPECT_TRUE(std::isnan(wide[i])) << "dtype " << t;
        continue;
      }
      EXPECT_EQ(narrow[i], want) << "dtype " << t << " value " << values[i];
      const float back = t == TPX_DTYPE_BF16 ? BF16ToFloat(want) : F16ToFloat(want);
      EXPECT_EQ(wide[i], back) << "dtype " << t << " value " << values[i];
    }
  }
}

TEST(ReduceKernels, HalfAverageDividesBeforeRoundingOnce) {
  // The f32 sum 3 * (1 + 2^-8) divided by 3 is 1 + 2^-8, which bf16 rounds
  // (tie to even) to 1. Rounding the sum to bf16 first would give 3.015625,
  // and 3.015625 / 3 rounds to 1.0078125.
  std::vector<float> acc = {3.0f * (1.0f + 1.0f / 256)};
  uint16_t out = 0;
  FromAcc(TPX_DTYPE_BF16, TPX_REDUCE_AVG, 3, acc.data(), &out, 1);
  EXPECT_EQ(BF16ToFloat(out), 1.0f);
}

TEST(ReduceKernels, ReduceIntoAllowsOutputAliasingInputs) {
  std::vector<uint16_t> in(2000);
  std::vector<float> partial(2000);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = FloatToF16(static_cast<float>(i % 9));
    partial[i] = static_cast<float>(i % 4);
  }
  ReduceInto(TPX_DTYPE_F16, TPX_REDUCE_MAX, partial.data(), in.data(), partial.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(partial[i], std::max<float>(i % 9, i % 4)) << i;
  }
}

// ReduceTwo against a scalar reference (widen both, combine in f32 in the
// order in (op) partial, divide for AVG, round once): every op, AVG over 2
// and 3 ranks, values around rounding ties, subnormals, infinities and NaN,
// a length with a vector tail, and the output over either input.
TEST(ReduceKernels, ReduceTwoMatchesScalarReference) {
  std::vector<float> values;
  for (int i = -200; i <= 200; ++i) values.push_back(1.0f + i * (1.0f / 512));
  values.insert(values.end(), {0.0f, -0.0f, 1e-40f, -3e-39f, 6.1e-5f, 65504.0f, 3.0e38f, INFINITY,
                               -INFINITY, NAN, -2.5f, 7.0f});
  const size_t n = 1037;
  std::vector<uint16_t> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = FloatToBF16(values[i % values.size()]);
    b[i] = FloatToBF16(values[(i * 7 + 3) % values.size()] * 1.5f);
  }
  struct Case {
    tpx_reduce_op_t op;
    int world;
  };
  for (Case c : {Case{TPX_REDUCE_SUM, 2}, Case{TPX_REDUCE_AVG, 2}, Case{TPX_REDUCE_AVG, 3},
                 Case{TPX_REDUCE_PROD, 2}, Case{TPX_REDUCE_MAX, 2}, Case{TPX_REDUCE_MIN, 2}}) {
    std::vector<uint16_t> want(n);
    for (size_t i = 0; i < n; ++i) {
      const float x = BF16ToFloat(a[i]), y = BF16ToFloat(b[i]);
      float r = c.op == TPX_REDUCE_PROD  ? x * y
                : c.op == TPX_REDUCE_MAX ? (x < y ? y : x)
                : c.op == TPX_REDUCE_MIN ? (y < x ? y : x)
                                         : x + y;
      if (c.op == TPX_REDUCE_AVG) r /= static_cast<float>(c.world);
      want[i] = FloatToBF16(r);
    }
    for (int alias = 0; alias < 3; ++alias) {  // out apart, over in, over partial
      std::vector<uint16_t> in = a, partial = b, apart(n);
      uint16_t* out = alias == 0 ? apart.data() : alias == 1 ? in.data() : partial.data();
      ReduceTwo(TPX_DTYPE_BF16, c.op, c.world, out, in.data(), partial.data(), n);
      for (size_t i = 0; i < n; ++i) {
        if (std::isnan(BF16ToFloat(want[i]))) {
          ASSERT_TRUE(std::isnan(BF16ToFloat(out[i]))) << "op " << c.op << " element " << i;
        } else {
          ASSERT_EQ(out[i], want[i])
              << "op " << c.op << " world " << c.world << " alias " << alias << " element " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tpx::ucx
