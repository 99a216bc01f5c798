// ag::CausalSelfAttention (fused kernels) against a double-precision
// reference written here, against the composed ops, and against finite
// differences; plus its argument errors.
#include "core/autograd/attention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/attention.h"
#include "core/autograd/engine.h"
#include "core/autograd/ops.h"
#include "core/compare_testutil.h"
#include "core/device_kernels.h"
#include "core/gemm.h"
#include "core/ops.h"
#include "gtest/gtest.h"
#include "testing/gradcheck.h"

namespace tpx {
namespace {

struct Case {
  int64_t t, b, heads, d;
  std::string Name() const { return absl::StrCat("t", t, "_b", b, "_h", heads, "_d", d); }
};

// Sizes around the kernel's blocks: t = 1, t not a multiple of 16 or of any
// tile's rows, head_dim below, at and above one 16-float vector and above a
// 64-column tile (80), ones that are not a multiple of 16 (24, 40, 48),
// odd ones (15, 33: bf16 pairs then straddle heads, so the pair form packs
// its operands instead of reading them in place), many row chunks (t 300),
// rows of qkv far apart (b 8: the in-place reads ask for rows ahead), and
// t and head_dim multiples of 32, which CPUs with AMX run on tiles (one to
// four 16-column blocks of C, one to three row chunks).
const Case kCases[] = {
    {1, 1, 1, 16},  {1, 3, 2, 32},  {5, 2, 3, 32},  {16, 1, 1, 64},  {17, 3, 2, 64},
    {33, 1, 4, 80}, {20, 2, 1, 24}, {70, 1, 2, 16}, {128, 2, 4, 32}, {45, 2, 4, 48},
    {31, 3, 3, 40}, {49, 2, 1, 80}, {19, 2, 3, 15}, {40, 1, 2, 33},  {300, 1, 2, 32},
    {40, 8, 4, 32}, {64, 2, 3, 64}, {32, 1, 2, 96}, {96, 3, 1, 32},
};

std::vector<float> Floats(const Tensor& t) { return t.To(DType::kF32)->ToVector<float>(); }

struct Reference {
  std::vector<double> ctx, dqkv;
};

// Attention per (batch row, head) in double from the f32 values of qkv and
// of the upstream gradient g, straight from the definition.
Reference Naive(const Case& c, const std::vector<float>& qkv, const std::vector<float>& g,
                double scale) {
  const int64_t t = c.t, d = c.d, hd = c.heads * d, row = c.b * 3 * hd;
  Reference r{std::vector<double>(t * c.b * hd, 0.0), std::vector<double>(qkv.size(), 0.0)};
  for (int64_t bi = 0; bi < c.b; ++bi) {
    for (int64_t h = 0; h < c.heads; ++h) {
      auto q = [&](int64_t i, int64_t j) { return double{qkv[i * row + bi * 3 * hd + h * d + j]}; };
      auto k = [&](int64_t i, int64_t j) { return double{qkv[i * row + bi * 3 * hd + hd + h * d + j]}; };
      auto v = [&](int64_t i, int64_t j) {
        return double{qkv[i * row + bi * 3 * hd + 2 * hd + h * d + j]};
      };
      auto go = [&](int64_t i, int64_t j) { return double{g[i * c.b * hd + bi * hd + h * d + j]}; };
      auto dq = [&](int64_t i, int64_t j) -> double& { return r.dqkv[i * row + bi * 3 * hd + h * d + j]; };
      auto dk = [&](int64_t i, int64_t j) -> double& {
        return r.dqkv[i * row + bi * 3 * hd + hd + h * d + j];
      };
      auto dv = [&](int64_t i, int64_t j) -> double& {
        return r.dqkv[i * row + bi * 3 * hd + 2 * hd + h * d + j];
      };
      for (int64_t i = 0; i < t; ++i) {
        std::vector<double> p(i + 1), dp(i + 1);
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (int64_t e = 0; e < d; ++e) s += q(i, e) * k(j, e);
          p[j] = scale * s;
          mx = std::max(mx, p[j]);
        }
        for (int64_t j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int64_t j = 0; j <= i; ++j) p[j] /= sum;
        double dot = 0;
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t e = 0; e < d; ++e) {
            r.ctx[i * c.b * hd + bi * hd + h * d + e] += p[j] * v(j, e);
            dp[j] += go(i, e) * v(j, e);
            dv(j, e) += p[j] * go(i, e);
          }
          dot += p[j] * dp[j];
        }
        for (int64_t j = 0; j <= i; ++j) {
          const double ds = scale * p[j] * (dp[j] - dot);
          for (int64_t e = 0; e < d; ++e) {
            dq(i, e) += ds * k(j, e);
            dk(j, e) += ds * q(i, e);
          }
        }
      }
    }
  }
  return r;
}

// Largest |actual - expected| - rtol * |expected| over the elements (<= atol passes).
::testing::AssertionResult Close(const std::vector<float>& actual,
                                 const std::vector<double>& expected, double rtol, double atol) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure() << actual.size() << " vs " << expected.size();
  }
  for (size_t i = 0; i < actual.size(); ++i) {
    const double err = std::abs(actual[i] - expected[i]);
    if (!(err <= atol + rtol * std::abs(expected[i]))) {
      return ::testing::AssertionFailure() << "element " << i << ": " << actual[i] << " vs "
                                           << expected[i] << " (error " << err << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

struct Outputs {
  Tensor ctx, dqkv;
};

// ctx and d sum(ctx * g) / d qkv of one attention function.
template <typename Fn>
Outputs Evaluate(Fn attention, const Tensor& qkv, const Tensor& g) {
  Variable x(qkv, /*requires_grad=*/true);
  absl::StatusOr<Variable> ctx = attention(x);
  EXPECT_TRUE(ctx.ok()) << ctx.status();
  if (!ctx.ok()) return {};
  absl::StatusOr<Variable> y = ag::Mul(*ctx, Variable(g));
  absl::StatusOr<Variable> loss = ag::Sum(*y);
  EXPECT_TRUE(loss.ok()) << loss.status();
  absl::Status s = Backward(*loss);
  EXPECT_TRUE(s.ok()) << s;
  return {ctx->value(), x.grad()};
}

class CausalSelfAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(CausalSelfAttentionTest, F32MatchesDoubleReferenceAndComposedOps) {
  const Case c = GetParam();
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  const Tensor qkv = RandomTensor({c.t, c.b, 3 * c.heads * c.d}, DType::kF32, 1, -2, 2);
  const Tensor g = RandomTensor({c.t, c.b, c.heads * c.d}, DType::kF32, 2);
  const Outputs fused = Evaluate(
      [&](const Variable& x) { return ag::CausalSelfAttention(x, c.heads, c.d, scale); }, qkv, g);
  const Outputs composed = Evaluate(
      [&](const Variable& x) {
        return ag::ComposedCausalSelfAttention(x, c.heads, c.d, scale);
      },
      qkv, g);
  ASSERT_TRUE(fused.ctx.defined() && fused.dqkv.defined());
  const Reference ref = Naive(c, Floats(qkv), Floats(g), scale);
  EXPECT_TRUE(Close(Floats(fused.ctx), ref.ctx, 1e-5, 1e-5)) << "ctx";
  EXPECT_TRUE(Close(Floats(fused.dqkv), ref.dqkv, 1e-5, 1e-5)) << "dqkv";
  EXPECT_TRUE(TensorsClose(fused.ctx, composed.ctx, 1e-5, 1e-5));
  EXPECT_TRUE(TensorsClose(fused.dqkv, composed.dqkv, 1e-5, 1e-5));
}

// bf16 in and out: within bf16 rounding of the exact result (relative 2^-8
// per rounding, a few roundings of values of order one) and of the composed
// bf16 ops, which also round the scores and probabilities. On CPUs with
// AVX-512 BF16 the kernels round P and dS to bf16 before their products as
// well: rounding every probability moves a ctx element by at most 2^-9 *
// max|v| * sum(p) = 2^-8 (|v| <= 2), hence ctx's absolute 4e-3 (the f32
// form, as TPX_ATTENTION_ISA=avx512 / baseline run it, stays within 1e-3).
TEST_P(CausalSelfAttentionTest, Bf16WithinRoundingOfReference) {
  const Case c = GetParam();
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  const Tensor qkv = RandomTensor({c.t, c.b, 3 * c.heads * c.d}, DType::kBF16, 3, -2, 2);
  const Tensor g = RandomTensor({c.t, c.b, c.heads * c.d}, DType::kBF16, 4);
  const Outputs fused = Evaluate(
      [&](const Variable& x) { return ag::CausalSelfAttention(x, c.heads, c.d, scale); }, qkv, g);
  ASSERT_TRUE(fused.ctx.defined() && fused.dqkv.defined());
  EXPECT_EQ(fused.ctx.dtype(), DType::kBF16);
  EXPECT_EQ(fused.dqkv.dtype(), DType::kBF16);
  const Reference ref = Naive(c, Floats(qkv), Floats(g), scale);
  EXPECT_TRUE(Close(Floats(fused.ctx), ref.ctx, 8e-3, 4e-3)) << "ctx";
  EXPECT_TRUE(Close(Floats(fused.dqkv), ref.dqkv, 8e-3, 1e-2)) << "dqkv";
  const Outputs composed = Evaluate(
      [&](const Variable& x) {
        return ag::ComposedCausalSelfAttention(x, c.heads, c.d, scale);
      },
      qkv, g);
  EXPECT_TRUE(TensorsClose(fused.ctx, composed.ctx, 3e-2, 3e-2));
  EXPECT_TRUE(TensorsClose(fused.dqkv, composed.dqkv, 3e-2, 6e-2));
}

// f16 runs the f32 form (operands widened, results rounded once): within
// f16 rounding (relative 2^-11 per rounding) of the exact result, and of the
// composed f16 ops, which round the scores and probabilities as well.
TEST_P(CausalSelfAttentionTest, F16WithinRoundingOfReference) {
  const Case c = GetParam();
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  const Tensor qkv = RandomTensor({c.t, c.b, 3 * c.heads * c.d}, DType::kF16, 14, -2, 2);
  const Tensor g = RandomTensor({c.t, c.b, c.heads * c.d}, DType::kF16, 15);
  const Outputs fused = Evaluate(
      [&](const Variable& x) { return ag::CausalSelfAttention(x, c.heads, c.d, scale); }, qkv, g);
  ASSERT_TRUE(fused.ctx.defined() && fused.dqkv.defined());
  EXPECT_EQ(fused.ctx.dtype(), DType::kF16);
  EXPECT_EQ(fused.dqkv.dtype(), DType::kF16);
  const Reference ref = Naive(c, Floats(qkv), Floats(g), scale);
  EXPECT_TRUE(Close(Floats(fused.ctx), ref.ctx, 1e-3, 1e-3)) << "ctx";
  EXPECT_TRUE(Close(Floats(fused.dqkv), ref.dqkv, 1e-3, 2e-3)) << "dqkv";
  const Outputs composed = Evaluate(
      [&](const Variable& x) {
        return ag::ComposedCausalSelfAttention(x, c.heads, c.d, scale);
      },
      qkv, g);
  EXPECT_TRUE(TensorsClose(fused.ctx, composed.ctx, 1e-2, 1e-2));
  EXPECT_TRUE(TensorsClose(fused.dqkv, composed.dqkv, 1e-2, 2e-2));
}

// The statistics the forward keeps are every row's maximum of its scaled
// scores and the reciprocal of its sum of exponentials (double reference
// from the same inputs), for every dtype.
TEST_P(CausalSelfAttentionTest, StatsAreRowMaximaAndReciprocalSums) {
  const Case c = GetParam();
  const double scale = 0.3;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor qkv = RandomTensor({c.t, c.b, 3 * c.heads * c.d}, dtype, 16, -2, 2);
    absl::StatusOr<ops::CausalSelfAttentionResult> r =
        ops::CausalSelfAttention(qkv, c.heads, c.d, scale, /*keep_stats=*/true);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->stats.shape(), (Shape{c.b * c.heads, c.t, 2}));
    const std::vector<float> x = Floats(qkv), st = Floats(r->stats);
    const int64_t hd = c.heads * c.d, row = c.b * 3 * hd;
    for (int64_t bi = 0; bi < c.b; ++bi) {
      for (int64_t h = 0; h < c.heads; ++h) {
        for (int64_t i = 0; i < c.t; ++i) {
          std::vector<double> s(i + 1);
          for (int64_t j = 0; j <= i; ++j) {
            double dot = 0;
            for (int64_t e = 0; e < c.d; ++e) {
              dot += static_cast<double>(x[i * row + bi * 3 * hd + h * c.d + e]) *
                     x[j * row + bi * 3 * hd + hd + h * c.d + e];
            }
            s[j] = scale * dot;
          }
          const double m = *std::max_element(s.begin(), s.end());
          double sum = 0;
          for (double v : s) sum += std::exp(v - m);
          const float* got = st.data() + ((bi * c.heads + h) * c.t + i) * 2;
          ASSERT_NEAR(got[0], m, 1e-5 * (1 + std::abs(m))) << bi << " " << h << " " << i;
          ASSERT_NEAR(got[1], 1 / sum, 1e-5 / sum) << bi << " " << h << " " << i;
        }
      }
    }
  }
}

// Without gradients the op keeps no statistics and gives the same ctx.
TEST_P(CausalSelfAttentionTest, ForwardWithoutStatsMatches) {
  const Case c = GetParam();
  const Tensor qkv = RandomTensor({c.t, c.b, 3 * c.heads * c.d}, DType::kF32, 5);
  absl::StatusOr<ops::CausalSelfAttentionResult> kept =
      ops::CausalSelfAttention(qkv, c.heads, c.d, 0.3, /*keep_stats=*/true);
  absl::StatusOr<ops::CausalSelfAttentionResult> bare =
      ops::CausalSelfAttention(qkv, c.heads, c.d, 0.3, /*keep_stats=*/false);
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_FALSE(bare->stats.defined());
  EXPECT_TRUE(kept->stats.defined());
  EXPECT_TRUE(TensorsClose(bare->ctx, kept->ctx, 0, 0));
}

// The kernels split the work by thread count (heads per task), never the
// arithmetic: 1 and 3 threads give the same bits.
TEST_P(CausalSelfAttentionTest, ResultsDoNotDependOnThreadCount) {
  const Case c = GetParam();
  const int threads = GemmThreads();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor qkv = RandomTensor({c.t, c.b, 3 * c.heads * c.d}, dtype, 11, -2, 2);
    const Tensor g = RandomTensor({c.t, c.b, c.heads * c.d}, dtype, 12);
    auto run = [&](int n) {
      SetGemmThreads(n);
      return Evaluate(
          [&](const Variable& x) { return ag::CausalSelfAttention(x, c.heads, c.d, 0.2); }, qkv,
          g);
    };
    const Outputs one = run(1), three = run(3);
    SetGemmThreads(threads);
    ASSERT_TRUE(one.ctx.defined() && three.ctx.defined());
    EXPECT_TRUE(TensorsClose(one.ctx, three.ctx, 0, 0));
    EXPECT_TRUE(TensorsClose(one.dqkv, three.dqkv, 0, 0));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CausalSelfAttentionTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.Name(); });

// A NaN score makes its query's row NaN and leaves the queries that do not
// see that key alone (the kernels compute whole 16-key blocks, so the NaN
// score is also computed, then masked, for the earlier queries of its
// block). A query whose scores are all -inf gets a NaN row too (0 / 0, as
// ScaledSoftmax and so the composed form give). t = 20 puts the rows on
// both sides of a 16-key block edge.
class CausalSelfAttentionNonFinite : public ::testing::TestWithParam<Case> {};

TEST_P(CausalSelfAttentionNonFinite, NanKeyAndAllNegativeInfinityRow) {
  const Case c = GetParam();
  const int64_t hd = c.heads * c.d, row = c.b * 3 * hd;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    std::vector<float> x = Floats(RandomTensor({c.t, c.b, 3 * hd}, dtype, 13, -2, 2));
    // Batch row 0, head 0: key 5 has a NaN.
    constexpr int64_t kNanKey = 5, kInfQuery = 3;
    x[kNanKey * row + hd + 2] = NAN;
    // Batch row 1, head 1: query 3 is (inf, 0, ..., 0) and every key's first
    // element is -1, so all of that query's scores are -inf.
    const int64_t q1 = 3 * hd + c.d, k1 = 3 * hd + hd + c.d;
    for (int64_t e = 0; e < c.d; ++e) x[kInfQuery * row + q1 + e] = e == 0 ? INFINITY : 0.0f;
    for (int64_t j = 0; j < c.t; ++j) x[j * row + k1] = -1.0f;
    const Tensor qkv = *Tensor::FromVector<float>(x, {c.t, c.b, 3 * hd}, dtype);
    absl::StatusOr<ops::CausalSelfAttentionResult> r =
        ops::CausalSelfAttention(qkv, c.heads, c.d, 0.25, /*keep_stats=*/true);
    ASSERT_TRUE(r.ok()) << r.status();
    const std::vector<float> ctx = Floats(r->ctx), st = Floats(r->stats);
    absl::StatusOr<Variable> composed =
        ag::ComposedCausalSelfAttention(Variable(qkv), c.heads, c.d, 0.25);
    ASSERT_TRUE(composed.ok()) << composed.status();
    const std::vector<float> composed_ctx = Floats(composed->value());
    const Reference ref = Naive(c, x, std::vector<float>(c.t * c.b * hd, 0.0f), 0.25);
    const double tol = dtype == DType::kF32 ? 1e-5 : 4e-3;
    for (int64_t bi = 0; bi < c.b; ++bi) {
      for (int64_t h = 0; h < c.heads; ++h) {
        const bool nan_head = bi == 0 && h == 0, inf_head = bi == 1 && h == 1;
        for (int64_t i = 0; i < c.t; ++i) {
          SCOPED_TRACE(absl::StrCat("batch ", bi, " head ", h, " query ", i));
          // The row's statistics: a NaN score makes its sum NaN; all -inf
          // scores, a maximum of 0 and a sum of 0 (P = 0 * inf = NaN).
          const float* si = st.data() + ((bi * c.heads + h) * c.t + i) * 2;
          const int64_t o = i * c.b * hd + bi * hd + h * c.d;
          if ((nan_head && i >= kNanKey) || (inf_head && i == kInfQuery)) {
            EXPECT_FALSE(std::isfinite(si[1])) << si[1];
            for (int64_t e = 0; e < c.d; ++e) {
              EXPECT_TRUE(std::isnan(ctx[o + e])) << e;
              EXPECT_TRUE(std::isnan(composed_ctx[o + e])) << e;
            }
            continue;
          }
          EXPECT_TRUE(std::isfinite(si[0])) << si[0];
          EXPECT_TRUE(si[1] > 0.0f && si[1] <= 1.0f) << si[1];
          for (int64_t e = 0; e < c.d; ++e) {
            EXPECT_NEAR(ctx[o + e], ref.ctx[o + e], tol * (1 + std::abs(ref.ctx[o + e]))) << e;
          }
        }
      }
    }
  }
}

// t = 64, head_dim 32: the AMX form's tiles on CPUs that have them.
INSTANTIATE_TEST_SUITE_P(Shapes, CausalSelfAttentionNonFinite,
                         ::testing::Values(Case{20, 2, 2, 16}, Case{64, 2, 2, 32}),
                         [](const auto& info) { return info.param.Name(); });

TEST(CausalSelfAttentionGradcheck, QkvGradientMatchesFiniteDifferences) {
  for (const Case c : {Case{5, 2, 2, 16}, Case{1, 1, 1, 16}, Case{18, 1, 1, 24}}) {
    SCOPED_TRACE(c.Name());
    Variable qkv(RandomUniform({c.t, c.b, 3 * c.heads * c.d}, 7).value(), /*requires_grad=*/true);
    absl::StatusOr<GradcheckResult> r = Gradcheck(
        [&](absl::Span<const Variable> in) {
          return ag::CausalSelfAttention(in[0], c.heads, c.d, 0.5);
        },
        {qkv});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->ok) << r->message;
    EXPECT_EQ(r->checked, qkv.value().numel());
  }
}

TEST(CausalSelfAttentionHook, ComposedFormAppliesTheHookToTheProbabilities) {
  const Tensor qkv = RandomTensor({6, 2, 3 * 2 * 16}, DType::kF32, 8);
  absl::StatusOr<Variable> plain = ag::ComposedCausalSelfAttention(Variable(qkv), 2, 16, 0.25);
  absl::StatusOr<Variable> doubled = ag::ComposedCausalSelfAttention(
      Variable(qkv), 2, 16, 0.25, [](const Variable& p) -> absl::StatusOr<Variable> {
        EXPECT_EQ(p.shape(), (Shape{4, 6, 6}));
        return ag::Scale(p, 2.0);
      });
  ASSERT_TRUE(plain.ok() && doubled.ok());
  absl::StatusOr<Tensor> twice = ops::Scale(plain->value(), 2.0);
  EXPECT_TRUE(TensorsClose(doubled->value(), *twice, 1e-6, 1e-6));
}

TEST(CausalSelfAttentionErrors, BadArgumentsAreInvalidArgument) {
  const Tensor qkv = RandomTensor({4, 2, 96}, DType::kF32, 9);
  auto message = [](const absl::Status& s) { return std::string(s.message()); };
  // Last dim is not 3 * heads * head_dim.
  absl::StatusOr<Variable> r = ag::CausalSelfAttention(Variable(qkv), 2, 32, 1.0);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(message(r.status()).find("3 * heads * head_dim"), std::string::npos) << r.status();
  EXPECT_EQ(ag::CausalSelfAttention(Variable(qkv), 0, 32, 1.0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ag::CausalSelfAttention(Variable(), 2, 16, 1.0).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<Tensor> flat = qkv.Reshape({8, 96});
  EXPECT_EQ(ops::CausalSelfAttention(*flat, 2, 16, 1.0, false).status().code(),
            absl::StatusCode::kInvalidArgument);
  const Tensor ints = *Tensor::Zeros({4, 2, 96}, DType::kI32);
  EXPECT_EQ(ops::CausalSelfAttention(ints, 2, 16, 1.0, false).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Backward: stats and grad_ctx of the wrong shape or dtype.
  const Tensor g = RandomTensor({4, 2, 32}, DType::kF32, 10);
  const Tensor stats = *Tensor::Zeros({4, 4, 2}, DType::kF32);
  EXPECT_TRUE(ops::CausalSelfAttentionBackward(g, qkv, stats, 2, 16, 1.0).ok());
  absl::StatusOr<Tensor> bad =
      ops::CausalSelfAttentionBackward(g, qkv, *Tensor::Zeros({4, 4, 4}, DType::kF32), 2, 16, 1.0);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(message(bad.status()).find("stats"), std::string::npos) << bad.status();
  EXPECT_EQ(ops::CausalSelfAttentionBackward(g, qkv, *stats.To(DType::kBF16), 2, 16, 1.0)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  bad = ops::CausalSelfAttentionBackward(*g.To(DType::kBF16), qkv, stats, 2, 16, 1.0);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(message(bad.status()).find("grad_ctx"), std::string::npos) << bad.status();
}

// An empty sequence or batch gives empty results, not a kernel call.
TEST(CausalSelfAttentionEmpty, ZeroLengthIsEmpty) {
  for (const Shape& shape : {Shape{0, 2, 48}, Shape{3, 0, 48}}) {
    absl::StatusOr<ops::CausalSelfAttentionResult> r =
        ops::CausalSelfAttention(*Tensor::Zeros(shape, DType::kF32), 1, 16, 1.0, true);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->ctx.shape(), (Shape{shape[0], shape[1], 16}));
  }
}

}  // namespace
}  // namespace tpx
