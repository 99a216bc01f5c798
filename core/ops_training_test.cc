// The fused training ops (core/ops_training.cc) against scalar double
// references written here, in f32 and bf16, on shapes large enough to split
// over the kernel threads; and their argument errors.
#include <cmath>
#include <limits>
#include <vector>

#include "core/compare_testutil.h"
#include "core/device_testutil.h"
#include "core/ops.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpx::ops {
namespace {

using ::testing::HasSubstr;

TPX_DEVICE_TEST_SUITE(FusedTrainingTest);

// Devices without the fused kernels return Unimplemented (callers compose).
#define SKIP_IF_UNIMPLEMENTED(status)                \
  if (absl::IsUnimplemented(status)) {               \
    GTEST_SKIP() << (status);                        \
  }

double Bf16Round(double v) { return BF16::FromFloat(static_cast<float>(v)).ToFloat(); }

// Targets cycling through a local column, another shard and an ignored row.
std::vector<int64_t> MixedTargets(int64_t rows, int64_t v) {
  std::vector<int64_t> t(rows);
  for (int64_t r = 0; r < rows; ++r) {
    t[r] = r % 5 == 3 ? kTargetIgnored : r % 5 == 4 ? kTargetElsewhere : (r * 37) % v;
  }
  return t;
}

TEST_P(FusedTrainingTest, CrossEntropyStatsAndBackwardMatchScalarReference) {
  // v = 2500 spans three online-max chunks; 64 x 2500 is split over threads.
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const auto& [rows, v] : std::vector<std::pair<int64_t, int64_t>>{{7, 3}, {64, 2500}}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " " << rows << "x" << v);
      Tensor x = TestRandom({rows, v}, dtype, 11, -6.0f, 6.0f);
      const std::vector<int64_t> tv = MixedTargets(rows, v);
      Tensor target = *TestFromVector(tv, {rows});
      absl::StatusOr<Tensor> stats = CrossEntropyStats(x, target);
      SKIP_IF_UNIMPLEMENTED(stats.status());
      ASSERT_TRUE(stats.ok()) << stats.status();
      ASSERT_EQ(stats->shape(), (Shape{rows, 4}));
      const std::vector<double> xs = x.ToVector<double>();
      const std::vector<float> st = stats->ToVector<float>();
      std::vector<float> lse(rows), g(rows);
      for (int64_t r = 0; r < rows; ++r) {
        const double* xr = xs.data() + r * v;
        g[r] = 0.5f + 0.25f * static_cast<float>(r % 3);
        if (tv[r] == kTargetIgnored) {
          EXPECT_EQ(st[r * 4], -std::numeric_limits<float>::infinity());
          EXPECT_EQ(st[r * 4 + 1], 0.f);
          EXPECT_EQ(st[r * 4 + 2], 0.f);
          EXPECT_EQ(st[r * 4 + 3], 0.f);
          continue;
        }
        double m = xr[0];
        for (int64_t j = 1; j < v; ++j) m = std::max(m, xr[j]);
        double se = 0, sd = 0;
        for (int64_t j = 0; j < v; ++j) {
          se += std::exp(xr[j] - m);
          sd += xr[j] - m;
        }
        EXPECT_EQ(st[r * 4], m) << "row " << r;
        EXPECT_NEAR(st[r * 4 + 1], se, 1e-5 * se) << "row " << r;
        EXPECT_NEAR(st[r * 4 + 2], sd, 1e-4 * std::abs(sd) + 1e-3) << "row " << r;
        EXPECT_EQ(st[r * 4 + 3], tv[r] >= 0 ? xr[tv[r]] : 0.0) << "row " << r;
        lse[r] = static_cast<float>(m + std::log(se));
      }
      Tensor lse_t = *TestFromVector(lse, {rows});
      Tensor g_t = *TestFromVector(g, {rows});
      const double sk = 0.1 / 1000, tc = 0.9;
      for (bool in_place : {false, true}) {
        Tensor xin = *x.Clone();
        absl::StatusOr<Tensor> dx = CrossEntropyBackward(xin, lse_t, g_t, target, sk, tc,
                                                         in_place);
        ASSERT_TRUE(dx.ok()) << dx.status();
        ASSERT_EQ(dx->dtype(), dtype);
        EXPECT_EQ(dx->SharesStorageWith(xin), in_place);
        const std::vector<double> got = dx->ToVector<double>();
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t j = 0; j < v; ++j) {
            double want = 0.0;
            if (tv[r] != kTargetIgnored) {
              want = g[r] * (std::exp(xs[r * v + j] - lse[r]) - sk);
              if (dtype == DType::kBF16) want = Bf16Round(want);
              if (j == tv[r]) want -= g[r] * tc;
            }
            const double tol = dtype == DType::kF32 ? 1e-6 + 1e-5 * std::abs(want)
                                                    : 1e-2 * std::abs(want) + 1e-5;
            ASSERT_NEAR(got[r * v + j], want, tol) << "row " << r << " col " << j;
          }
        }
      }
    }
  }
}

TEST_P(FusedTrainingTest, CrossEntropyStatsOfNegInfRowTakesSumsAroundZero) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = *TestFromVector<float>({-inf, -inf, -inf, 1, 2, 3}, {2, 3});
  Tensor target = *TestFromVector<int64_t>({1, kTargetElsewhere}, {2});
  absl::StatusOr<Tensor> stats = CrossEntropyStats(x, target);
  SKIP_IF_UNIMPLEMENTED(stats.status());
  ASSERT_TRUE(stats.ok()) << stats.status();
  const std::vector<float> st = stats->ToVector<float>();
  EXPECT_EQ(st[0], -inf);
  EXPECT_EQ(st[1], 0.f);
  EXPECT_EQ(st[2], 0.f);
  EXPECT_EQ(st[3], -inf);
  EXPECT_EQ(st[4], 3.f);
  EXPECT_NEAR(st[5], std::exp(-2.0) + std::exp(-1.0) + 1.0, 1e-6);
  EXPECT_NEAR(st[6], -3.0, 1e-6);
  EXPECT_EQ(st[7], 0.f);
}

TEST_P(FusedTrainingTest, SumOfSquaresMatchesDoubleReference) {
  // 10,001 elements: several chunks and a ragged end; and a 3-element one.
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t n : {3, 10001}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " n " << n);
      Tensor t = TestRandom({n}, dtype, 9, -3.0f, 3.0f);
      absl::StatusOr<double> got = SumOfSquares(t);
      SKIP_IF_UNIMPLEMENTED(got.status());
      ASSERT_TRUE(got.ok()) << got.status();
      double want = 0;
      for (double v : t.ToVector<double>()) want += v * v;
      EXPECT_NEAR(*got, want, 1e-12 * want);
    }
  }
  // A strided view counts only its own elements.
  Tensor m = TestRandom({4, 6}, DType::kF32, 10);
  Tensor col = *m.Narrow(1, 2, 1);
  double want = 0;
  for (double v : col.ToVector<double>()) want += v * v;
  absl::StatusOr<double> got = SumOfSquares(col);
  SKIP_IF_UNIMPLEMENTED(got.status());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_NEAR(*got, want, 1e-12 * want);
  EXPECT_THAT(SumOfSquares(*TestZeros({2}, DType::kI64)).status().message(),
              HasSubstr("SumOfSquares: input must be f32, bf16 or f16"));
}

TEST_P(FusedTrainingTest, AdamWStepMatchesScalarReference) {
  // 10,001 elements: several blocks plus a ragged end.
  const int64_t n = 10001;
  const AdamWCoefficients c{.decay = 0.999f, .beta1 = 0.9f, .beta2 = 0.95f,
                            .step_size = 1e-3f / 0.1f, .inv_sqrt_bias2 = 1.0f / std::sqrt(0.05f),
                            .eps = 1e-8f};
  for (DType grad_dtype : {DType::kF32, DType::kBF16}) {
    for (bool with_working : {false, true}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(grad_dtype) << " working " << with_working);
      Tensor p = TestRandom({n}, DType::kF32, 1);
      Tensor g = TestRandom({n}, grad_dtype, 2);
      Tensor m = TestRandom({n}, DType::kF32, 3, -0.1f, 0.1f);
      Tensor s = TestRandom({n}, DType::kF32, 4, 0.0f, 0.01f);
      Tensor w = with_working ? *TestZeros({n}, DType::kBF16) : Tensor();
      std::vector<double> pv = p.ToVector<double>(), gv = g.ToVector<double>();
      std::vector<double> mv = m.ToVector<double>(), sv = s.ToVector<double>();
      absl::Status st = AdamWStep(p, g, m, s, w, c);
      SKIP_IF_UNIMPLEMENTED(st);
      ASSERT_TRUE(st.ok()) << st;
      const std::vector<double> p2 = p.ToVector<double>(), m2 = m.ToVector<double>();
      const std::vector<double> s2 = s.ToVector<double>();
      const std::vector<double> w2 = with_working ? w.ToVector<double>() : std::vector<double>();
      for (int64_t j = 0; j < n; ++j) {
        const double mj = c.beta1 * mv[j] + (1 - c.beta1) * gv[j];
        const double sj = c.beta2 * sv[j] + (1 - c.beta2) * gv[j] * gv[j];
        const double pj =
            pv[j] * c.decay - c.step_size * mj / (std::sqrt(sj) * c.inv_sqrt_bias2 + c.eps);
        // f32 rounding relative to the terms (they may cancel).
        const double m_terms = c.beta1 * std::abs(mv[j]) + (1 - c.beta1) * std::abs(gv[j]);
        ASSERT_NEAR(m2[j], mj, 1e-6 * m_terms + 1e-12) << j;
        ASSERT_NEAR(s2[j], sj, 1e-6 * sj + 1e-12) << j;
        ASSERT_NEAR(p2[j], pj, 1e-5 * (std::abs(pv[j]) + std::abs(pj - pv[j] * c.decay)) + 1e-7)
            << j;
        if (with_working) {
          ASSERT_EQ(w2[j], Bf16Round(p2[j])) << j;
        }
      }
    }
  }
}

// Many parameters in one call: each exactly as AdamWStep alone would update
// it (entries of several blocks, ragged, tiny and empty; f32 and bf16
// gradients; with and without a working copy; per-entry coefficients). A
// gradient scale is the same as the gradient scaled first (f32: the same
// rounded product).
TEST_P(FusedTrainingTest, AdamWStepsIsAdamWStepPerEntryBitForBit) {
  struct Entry {
    int64_t n;
    DType grad_dtype;
    bool working;
    float grad_scale;
  };
  const std::vector<Entry> entries = {{10001, DType::kF32, false, 1.0f},
                                      {3, DType::kBF16, true, 0.37f},
                                      {0, DType::kF32, false, 1.0f},
                                      {2048, DType::kBF16, false, 1.0f},
                                      {4097, DType::kF32, true, 0.37f}};
  std::vector<AdamWOperands> batch, alone;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    const uint32_t seed = static_cast<uint32_t>(10 * i);
    AdamWOperands u{TestRandom({e.n}, DType::kF32, seed + 1),
                    TestRandom({e.n}, e.grad_dtype, seed + 2),
                    TestRandom({e.n}, DType::kF32, seed + 3, -0.1f, 0.1f),
                    TestRandom({e.n}, DType::kF32, seed + 4, 0.0f, 0.01f),
                    e.working ? *TestZeros({e.n}, DType::kBF16) : Tensor(),
                    AdamWCoefficients{.decay = 1.0f - 1e-4f * static_cast<float>(i),
                                      .beta1 = 0.9f,
                                      .beta2 = 0.95f,
                                      .step_size = 1e-3f * static_cast<float>(i + 1),
                                      .inv_sqrt_bias2 = 1.5f,
                                      .eps = 1e-8f,
                                      .grad_scale = e.grad_scale}};
    AdamWOperands v = u;
    for (Tensor* t : {&v.param, &v.grad, &v.exp_avg, &v.exp_avg_sq, &v.working}) {
      if (t->defined()) *t = *t->Clone();
    }
    batch.push_back(std::move(u));
    alone.push_back(std::move(v));
  }
  absl::Status st = AdamWSteps(batch);
  SKIP_IF_UNIMPLEMENTED(st);
  ASSERT_TRUE(st.ok()) << st;
  for (size_t i = 0; i < entries.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "entry " << i);
    AdamWOperands& v = alone[i];
    ASSERT_TRUE(AdamWStep(v.param, v.grad, v.exp_avg, v.exp_avg_sq, v.working, v.coefficients)
                    .ok());
    EXPECT_EQ(batch[i].param.ToVector<float>(), v.param.ToVector<float>());
    EXPECT_EQ(batch[i].exp_avg.ToVector<float>(), v.exp_avg.ToVector<float>());
    EXPECT_EQ(batch[i].exp_avg_sq.ToVector<float>(), v.exp_avg_sq.ToVector<float>());
    if (entries[i].working) {
      EXPECT_EQ(batch[i].working.ToVector<float>(), v.working.ToVector<float>());
    }
  }
  // The scale read with the gradient: an f32 gradient scaled beforehand
  // (the same rounded products) gives the same update.
  AdamWOperands scaled = alone[4], prescaled = alone[4];
  for (AdamWOperands* u : {&scaled, &prescaled}) {
    for (Tensor* t : {&u->param, &u->grad, &u->exp_avg, &u->exp_avg_sq, &u->working}) {
      *t = *t->Clone();
    }
  }
  prescaled.grad = *Scale(prescaled.grad, 0.37f);
  prescaled.coefficients.grad_scale = 1.0f;
  ASSERT_TRUE(AdamWSteps({scaled}).ok());
  ASSERT_TRUE(AdamWSteps({prescaled}).ok());
  EXPECT_EQ(scaled.param.ToVector<float>(), prescaled.param.ToVector<float>());
  EXPECT_EQ(scaled.exp_avg_sq.ToVector<float>(), prescaled.exp_avg_sq.ToVector<float>());

  // A bad entry is named, and nothing is updated.
  const std::vector<float> before = batch[0].param.ToVector<float>();
  std::vector<AdamWOperands> bad = {batch[0], batch[1]};
  bad[1].exp_avg = TestRandom({4});
  EXPECT_THAT(AdamWSteps(bad).message(),
              HasSubstr("entry 1 of 2: AdamWStep: exp_avg must be contiguous f32 [3]"));
  EXPECT_EQ(batch[0].param.ToVector<float>(), before);
}

// Sums of squares of several tensors in one call: each exactly its
// SumOfSquares alone (mixed dtypes, a strided view, an empty tensor).
TEST_P(FusedTrainingTest, SumsOfSquaresIsSumOfSquaresPerTensorBitForBit) {
  Tensor m = TestRandom({40, 6}, DType::kF32, 11);
  const std::vector<Tensor> ts = {TestRandom({10001}, DType::kF32, 12),
                                  TestRandom({3}, DType::kBF16, 13), *TestZeros({0}),
                                  *m.Narrow(1, 2, 3), TestRandom({4097}, DType::kBF16, 14)};
  absl::StatusOr<std::vector<double>> sums = SumsOfSquares(ts);
  SKIP_IF_UNIMPLEMENTED(sums.status());
  ASSERT_TRUE(sums.ok()) << sums.status();
  ASSERT_EQ(sums->size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    absl::StatusOr<double> alone = SumOfSquares(ts[i]);
    ASSERT_TRUE(alone.ok()) << alone.status();
    EXPECT_EQ((*sums)[i], *alone) << i;
  }
  EXPECT_EQ((*sums)[2], 0.0);
  EXPECT_THAT(SumsOfSquares({ts[0], *TestZeros({2}, DType::kI64)}).status().message(),
              HasSubstr("SumOfSquares: input must be f32, bf16 or f16"));
}

TEST_P(FusedTrainingTest, DropoutAddMatchesScalarReferenceForEveryOperandMix) {
  const Shape shape = {96, 130};  // 12,480 elements over several pieces
  const int64_t n = 96 * 130, h = 130;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Tensor x = TestRandom(shape, dtype, 5);
    Tensor bias = TestRandom({h}, dtype, 6);
    Tensor res = TestRandom(shape, dtype, 7);
    Tensor u = TestRandom(shape, DType::kF32, 8, 0.0f, 1.0f);
    Tensor keep = *GeScalar(u, 0.3);
    const std::vector<double> xv = x.ToVector<double>(), bv = bias.ToVector<double>();
    const std::vector<double> rv = res.ToVector<double>();
    const std::vector<bool> kv = [&] {
      std::vector<bool> k;
      for (double v : u.ToVector<double>()) k.push_back(v >= 0.3f);
      return k;
    }();
    const double scale = 1.0 / 0.7;
    for (int mix = 0; mix < 8; ++mix) {
      const bool use_b = mix & 4, use_k = mix & 2, use_r = mix & 1;
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " bias " << use_b << " keep "
                                        << use_k << " residual " << use_r);
      absl::StatusOr<Tensor> y = DropoutAdd(x, use_b ? bias : Tensor(), use_k ? keep : Tensor(),
                                            use_r ? res : Tensor(), scale);
      SKIP_IF_UNIMPLEMENTED(y.status());
      ASSERT_TRUE(y.ok()) << y.status();
      ASSERT_EQ(y->dtype(), dtype);
      const std::vector<double> got = y->ToVector<double>();
      for (int64_t i = 0; i < n; ++i) {
        double v = xv[i] + (use_b ? bv[i % h] : 0.0);
        v = (!use_k || kv[i]) ? v * scale : 0.0;
        v += use_r ? rv[i] : 0.0;
        const double tol = dtype == DType::kF32 ? 1e-6 * (1 + std::abs(v))
                                                : 8e-3 * std::abs(v) + 1e-6;
        ASSERT_NEAR(got[i], v, tol) << i;
      }
    }
  }
}

TEST_P(FusedTrainingTest, ErrorsNameTheOpAndOperand) {
  Tensor x = TestRandom({4, 5});
  Tensor t32 = *TestFromVector<int32_t>({0, 1, 2, 3}, {4});
  absl::StatusOr<Tensor> stats = CrossEntropyStats(x, t32);
  EXPECT_THAT(stats.status().message(), HasSubstr("CrossEntropyStats: target must be i64 [4]"));
  Tensor t = *TestFromVector<int64_t>({0, 1, 2, 3}, {4});
  Tensor bad_lse = TestRandom({3});
  EXPECT_THAT(CrossEntropyBackward(x, bad_lse, TestRandom({4}), t, 0, 1, false).status().message(),
              HasSubstr("CrossEntropyBackward: lse must be f32 with 4 elements"));
  Tensor p = TestRandom({5});
  EXPECT_THAT(AdamWStep(p, TestRandom({5}, DType::kF16), TestRandom({5}), TestRandom({5}),
                        Tensor(), {})
                  .message(),
              HasSubstr("AdamWStep: grad must be f32 or bf16 [5]"));
  EXPECT_THAT(AdamWStep(p, TestRandom({5}), TestRandom({4}), TestRandom({5}), Tensor(), {})
                  .message(),
              HasSubstr("AdamWStep: exp_avg must be contiguous f32 [5]"));
  EXPECT_THAT(DropoutAdd(x, TestRandom({4}), Tensor(), Tensor(), 1.0).status().message(),
              HasSubstr("DropoutAdd: bias"));
  EXPECT_THAT(DropoutAdd(x, Tensor(), TestRandom({4, 5}), Tensor(), 1.0).status().message(),
              HasSubstr("DropoutAdd: keep must be bool [4, 5]"));
}

}  // namespace
}  // namespace tpx::ops
