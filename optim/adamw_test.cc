#include "optim/adamw.h"

#include <cmath>
#include <vector>

#include "core/device_testutil.h"
#include "gtest/gtest.h"

namespace tpx::optim {
namespace {

TPX_DEVICE_TEST_SUITE(AdamWOnDevice);

Variable Param(const std::vector<float>& v) {
  return Variable(*TestFromVector<float>(v, {static_cast<int64_t>(v.size())}), true, "p");
}

TEST_P(AdamWOnDevice, FirstStepMovesEachElementByLrTowardsMinusGradSign) {
  Variable p = Param({1.0f, -2.0f, 0.5f});
  auto opt = AdamW::Create({{p, true}}, {.weight_decay = 0.1});
  ASSERT_TRUE(opt.ok()) << opt.status();
  ASSERT_TRUE(p.set_grad(*TestFromVector<float>({0.3f, -4.0f, 2.0f}, {3})).ok());
  ASSERT_TRUE(opt->Step(0.01).ok());
  // Bias-corrected m / sqrt(v) is exactly sign(g) on the first step.
  std::vector<float> got = p.value().ToVector<float>();
  EXPECT_NEAR(got[0], 1.0f * (1 - 0.001f) - 0.01f, 1e-6);
  EXPECT_NEAR(got[1], -2.0f * (1 - 0.001f) + 0.01f, 1e-6);
  EXPECT_NEAR(got[2], 0.5f * (1 - 0.001f) - 0.01f, 1e-6);
}

// Steps of two parameters (with and without decay) against the update in double.
void CheckAgainstDoubleReference(const AdamWOptions& o) {
  const std::vector<float> init = {0.7f, -1.3f, 0.01f, 2.5f};
  Variable decayed = Param(init);
  Variable plain = Param(init);
  auto opt = AdamW::Create({{decayed, true}, {plain, false}}, o);
  ASSERT_TRUE(opt.ok());

  std::vector<double> ref_d(init.begin(), init.end()), ref_p = ref_d;
  std::vector<double> md(4, 0), vd(4, 0), mp(4, 0), vp(4, 0);
  for (int t = 1; t <= 25; ++t) {
    const double lr = 0.02 / t;
    // Gradient of sum((p - 1)^2 * k) with k per element, evaluated at the current values.
    std::vector<float> gd(4), gp(4);
    std::vector<float> cur_d = decayed.value().ToVector<float>();
    std::vector<float> cur_p = plain.value().ToVector<float>();
    for (int i = 0; i < 4; ++i) {
      gd[i] = 2.0f * (cur_d[i] - 1.0f) * (i + 1);
      gp[i] = 2.0f * (cur_p[i] - 1.0f) * (i + 1);
    }
    ASSERT_TRUE(decayed.set_grad(*TestFromVector<float>(gd, {4})).ok());
    ASSERT_TRUE(plain.set_grad(*TestFromVector<float>(gp, {4})).ok());
    ASSERT_TRUE(opt->Step(lr).ok());
    auto ref_step = [&](std::vector<double>& p, std::vector<double>& m, std::vector<double>& v,
                        const std::vector<float>& g, double wd) {
      for (int i = 0; i < 4; ++i) {
        p[i] -= lr * wd * p[i];
        m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
        v[i] = o.beta2 * v[i] + (1 - o.beta2) * double(g[i]) * g[i];
        const double mh = m[i] / (1 - std::pow(o.beta1, t));
        const double vh = v[i] / (1 - std::pow(o.beta2, t));
        p[i] -= lr * mh / (std::sqrt(vh) + o.eps);
      }
    };
    ref_step(ref_d, md, vd, gd, o.weight_decay);
    ref_step(ref_p, mp, vp, gp, 0.0);
  }
  std::vector<float> got_d = decayed.value().ToVector<float>();
  std::vector<float> got_p = plain.value().ToVector<float>();
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(got_d[i], ref_d[i], 1e-5) << i;
    EXPECT_NEAR(got_p[i], ref_p[i], 1e-5) << i;
  }
  // Decay makes a difference, so the flag is honoured.
  EXPECT_GT(std::abs(got_d[3] - got_p[3]), 1e-4);
  EXPECT_EQ(opt->steps_taken(), 25);
}

TEST_P(AdamWOnDevice, MatchesDoublePrecisionReferenceOverManySteps) {
  for (bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "core ops");
    const AdamWOptions o{
        .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.05, .fused = fused};
    CheckAgainstDoubleReference(o);
  }
}

TEST_P(AdamWOnDevice, SkipsParamsWithoutGradAndZeroGradClears) {
  Variable a = Param({1.0f}), b = Param({1.0f});
  auto opt = AdamW::Create({{a, true}, {b, true}});
  ASSERT_TRUE(opt.ok());
  ASSERT_TRUE(a.set_grad(*TestFromVector<float>({1.0f}, {1})).ok());
  ASSERT_TRUE(opt->Step(0.1).ok());
  EXPECT_LT(a.value().ToVector<float>()[0], 1.0f);
  EXPECT_EQ(b.value().ToVector<float>()[0], 1.0f);
  opt->ZeroGrad();
  EXPECT_FALSE(a.grad().defined());
}

// A bf16 parameter steps exactly like an f32 one holding the same values and
// gradients (that f32 parameter is the master), and its working copy is the
// master rounded to bf16 after every step.
TEST_P(AdamWOnDevice, Bf16ParameterUpdatesAnF32MasterAndRefreshesItsWorkingCopy) {
  for (bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "core ops");
    const std::vector<float> init = {0.7f, -1.3f, 0.01f, 2.5f, 1e-3f};
    Variable working(*TestFromVector<float>(init, {5}, DType::kBF16), true, "w");
    Variable reference(*working.value().To(DType::kF32), true, "w_ref");
    auto opt = AdamW::Create({{working, true}, {reference, true}},
                             {.weight_decay = 0.1, .fused = fused});
    ASSERT_TRUE(opt.ok()) << opt.status();
    ASSERT_EQ(opt->master(0).dtype(), DType::kF32);
    EXPECT_EQ(opt->master(1).raw_data(), reference.value().raw_data()) << "f32: its own master";
    for (int t = 1; t <= 30; ++t) {
      // Gradients pull towards 1; a bf16 gradient for the bf16 parameter,
      // except every third step an f32 one (as after an f32 reduction).
      std::vector<float> g = opt->master(0).ToVector<float>();
      for (float& x : g) x = 3.0f * (x - 1.0f);
      Tensor g_bf16 = *TestFromVector<float>(g, {5}, DType::kBF16);
      Tensor g_f32 = *g_bf16.To(DType::kF32);
      ASSERT_TRUE(working.set_grad(t % 3 == 0 ? g_f32 : g_bf16).ok());
      ASSERT_TRUE(reference.set_grad(*g_f32.Clone()).ok());
      ASSERT_TRUE(opt->Step(0.05).ok());
      ASSERT_EQ(opt->master(0).ToVector<float>(), reference.value().ToVector<float>())
          << "step " << t;
      ASSERT_EQ(working.value().ToVector<float>(),
                opt->master(0).To(DType::kBF16)->ToVector<float>())
          << "step " << t;
    }
    // The master moved by less than a bf16 ulp in some steps, which the
    // working copy alone could not represent.
    EXPECT_NE(opt->master(0).ToVector<float>(), working.value().ToVector<float>());
    // Loading a checkpoint writes into the masters; the refresh follows.
    ASSERT_TRUE(opt->master(0).CopyFrom(*TestFromVector<float>({1, 2, 3, 4, 5}, {5})).ok());
    ASSERT_TRUE(opt->RefreshWorkingWeights().ok());
    EXPECT_EQ(working.value().ToVector<float>(), (std::vector<float>{1, 2, 3, 4, 5}));
  }
}

// A gradient scale (a clipping coefficient) read with the gradients steps
// exactly as gradients scaled beforehand (f32: the same rounded products),
// without changing the gradients; in the fused kernel and the core ops.
TEST_P(AdamWOnDevice, GradScaleStepsAsScaledGradients) {
  for (bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "core ops");
    const std::vector<float> init = {0.7f, -1.3f, 0.01f, 2.5f};
    const std::vector<float> g = {0.3f, -4.0f, 2.0f, 0.11f};
    Variable a = Param(init), b = Param(init);
    auto scaled = AdamW::Create({{a, true}}, {.fused = fused});
    auto prescaled = AdamW::Create({{b, true}}, {.fused = fused});
    ASSERT_TRUE(scaled.ok() && prescaled.ok());
    for (int t = 1; t <= 3; ++t) {
      ASSERT_TRUE(a.set_grad(*TestFromVector<float>(g, {4})).ok());
      std::vector<float> gs = g;
      for (float& x : gs) x *= 0.37f;
      ASSERT_TRUE(b.set_grad(*TestFromVector<float>(gs, {4})).ok());
      ASSERT_TRUE(scaled->Step(0.01, 0.37f).ok());
      ASSERT_TRUE(prescaled->Step(0.01).ok());
      EXPECT_EQ(a.value().ToVector<float>(), b.value().ToVector<float>()) << "step " << t;
      EXPECT_EQ(a.grad().ToVector<float>(), g) << "the gradient is not changed";
    }
    EXPECT_NE(a.value().ToVector<float>(), init);
  }
}

TEST(AdamW, RejectsBadArguments) {
  Variable frozen(*Tensor::FromVector<float>({1.0f}, {1}), false, "frozen");
  auto bad = AdamW::Create({{frozen, true}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("frozen"), std::string::npos) << bad.status();
  Variable half(*Tensor::FromVector<float>({1.0f}, {1}, DType::kF16), true, "half");
  auto f16 = AdamW::Create({{half, true}});
  ASSERT_FALSE(f16.ok());
  EXPECT_NE(f16.status().message().find("half"), std::string::npos) << f16.status();
  EXPECT_FALSE(AdamW::Create({}, {.beta1 = 1.0}).ok());
  EXPECT_FALSE(AdamW::Create({}, {.weight_decay = -1}).ok());
  // A bad gradient scale: an error, and nothing steps.
  Variable p(*Tensor::FromVector<float>({1.0f}, {1}), true, "p");
  auto opt = AdamW::Create({{p, true}});
  ASSERT_TRUE(opt.ok());
  ASSERT_TRUE(p.set_grad(*Tensor::FromVector<float>({1.0f}, {1})).ok());
  for (double scale : {0.0, -1.0, static_cast<double>(NAN), static_cast<double>(INFINITY)}) {
    absl::Status st = opt->Step(0.1, scale);
    EXPECT_NE(st.message().find("grad_scale must be finite and > 0"), std::string::npos) << st;
  }
  EXPECT_EQ(opt->steps_taken(), 0);
  EXPECT_EQ(p.value().ToVector<float>()[0], 1.0f);
}

}  // namespace
}  // namespace tpx::optim
