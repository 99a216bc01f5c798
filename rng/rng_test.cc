// Single-process tests of the generator, tracker, fills, init and dropout.
#include <cmath>
#include <vector>

#include "core/autograd/engine.h"
#include "core/device_testutil.h"
#include "core/ops.h"
#include "gtest/gtest.h"
#include "rng/dropout.h"
#include "rng/generator.h"
#include "rng/init.h"
#include "rng/random.h"
#include "rng/tracker.h"

namespace tpx::rng {
namespace {

std::vector<float> Uniforms(const Shape& shape, Generator& gen, const ShardSpec* shard = nullptr) {
  Tensor t = *Tensor::Empty(shape);
  EXPECT_TRUE(FillUniform(t, gen, 0.f, 1.f, shard).ok());
  return t.ToVector<float>();
}

TEST(Tracker, DuplicateSeedOrNameIsAnError) {
  RngStatesTracker tracker;
  ASSERT_TRUE(tracker.Add("a", 1).ok());
  absl::Status dup_seed = tracker.Add("b", 1);
  EXPECT_EQ(dup_seed.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(dup_seed.message().find("seed 1 already exists"), absl::string_view::npos);
  absl::Status dup_name = tracker.Add("a", 2);
  EXPECT_EQ(dup_name.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(dup_name.message().find("\"a\" already exists"), absl::string_view::npos);
  EXPECT_EQ(tracker.Fork("nope").status().code(), absl::StatusCode::kNotFound);
  tracker.Reset();
  EXPECT_TRUE(tracker.Add("a", 1).ok());
}

TEST(Tracker, ModelParallelSeedsFollowTheReferenceOffsets) {
  ASSERT_TRUE(ModelParallelManualSeed(1000, /*tp_rank=*/3, /*ep_rank=*/2, /*etp_rank=*/1).ok());
  RngStates s = GetRngTracker().GetStates();
  EXPECT_EQ(s.at(kDataParallelRng).seed, 1000u);
  EXPECT_EQ(s.at(kModelParallelRng).seed, 1000u + 2718 + 3);
  EXPECT_EQ(s.at(kExpertParallelRng).seed, 1000u + 1024 + 200 + 1);
  EXPECT_EQ(DefaultGenerator().state(), (GeneratorState{1000, 0}));
  ASSERT_TRUE(ModelParallelManualSeed(1000, 3, 2, 1, SeedMode::kTpInvariant).ok());
  s = GetRngTracker().GetStates();
  EXPECT_EQ(s.at(kModelParallelRng).seed, 1000u + 2718);
  EXPECT_EQ(s.at(kExpertParallelRng).seed, 1000u + 1024 + 200);
  EXPECT_EQ(GetRngTracker().mode(), SeedMode::kTpInvariant);
}

TEST(Tracker, ForkSwitchesTheActiveStateAndRestoresTheOuterOne) {
  ASSERT_TRUE(ModelParallelManualSeed(7, 0).ok());
  const GeneratorState outer = DefaultGenerator().state();
  std::vector<float> in_fork;
  {
    auto fork = GetRngTracker().Fork();
    ASSERT_TRUE(fork.ok());
    EXPECT_EQ(ActiveGenerator().seed(), 7u + 2718);
    in_fork = Uniforms({16}, ActiveGenerator());
    {
      auto inner = GetRngTracker().Fork(kDataParallelRng);
      ASSERT_TRUE(inner.ok());
      EXPECT_EQ(ActiveGenerator().seed(), 7u);
      Uniforms({4}, ActiveGenerator());
    }
    EXPECT_EQ(ActiveGenerator().seed(), 7u + 2718);  // back to the outer fork
  }
  EXPECT_EQ(&ActiveGenerator(), &DefaultGenerator());
  EXPECT_EQ(DefaultGenerator().state(), outer);
  // The forked state advanced: a second fork continues the stream.
  RngStates s = GetRngTracker().GetStates();
  EXPECT_EQ(s.at(kModelParallelRng).offset, 1u);
  EXPECT_EQ(s.at(kDataParallelRng).offset, 1u);
  std::vector<float> again;
  {
    auto fork = GetRngTracker().Fork();
    again = Uniforms({16}, ActiveGenerator());
  }
  EXPECT_NE(again, in_fork);
  // SetStates rewinds: the same numbers again.
  s.at(kModelParallelRng).offset = 0;
  GetRngTracker().SetStates(s);
  {
    auto fork = GetRngTracker().Fork();
    EXPECT_EQ(Uniforms({16}, ActiveGenerator()), in_fork);
  }
}

// Megatron's double-fork case: a -> b -> a draws the same numbers from each
// state as forking each once and drawing in sequence.
TEST(Tracker, NestedForkOfTheSameStateContinuesItsStream) {
  RngStatesTracker tracker;
  ASSERT_TRUE(tracker.Add("state1", 1234).ok());
  ASSERT_TRUE(tracker.Add("state2", 5678).ok());
  const RngStates initial = tracker.GetStates();
  std::vector<std::vector<float>> nested1, nested2;
  {
    auto f1 = tracker.Fork("state1");
    ASSERT_TRUE(f1.ok());
    nested1.push_back(Uniforms({10}, ActiveGenerator()));
    {
      auto f2 = tracker.Fork("state2");
      ASSERT_TRUE(f2.ok());
      nested2.push_back(Uniforms({10}, ActiveGenerator()));
      {
        auto f1_again = tracker.Fork("state1");
        ASSERT_TRUE(f1_again.ok());
        nested1.push_back(Uniforms({10}, ActiveGenerator()));
      }
      nested2.push_back(Uniforms({10}, ActiveGenerator()));
    }
    nested1.push_back(Uniforms({10}, ActiveGenerator()));
  }
  const RngStates after_nested = tracker.GetStates();
  tracker.SetStates(initial);
  std::vector<std::vector<float>> single1, single2;
  {
    auto f1 = tracker.Fork("state1");
    for (int i = 0; i < 3; ++i) single1.push_back(Uniforms({10}, ActiveGenerator()));
  }
  {
    auto f2 = tracker.Fork("state2");
    for (int i = 0; i < 2; ++i) single2.push_back(Uniforms({10}, ActiveGenerator()));
  }
  EXPECT_EQ(nested1, single1);
  EXPECT_EQ(nested2, single2);
  // No draw repeats, and both orders leave the same states behind.
  EXPECT_NE(nested1[0], nested1[1]);
  EXPECT_EQ(after_nested, tracker.GetStates());
  EXPECT_EQ(&ActiveGenerator(), &DefaultGenerator());
}

TEST(Tracker, AllStatesCaptureTheActiveGenerator) {
  ASSERT_TRUE(ModelParallelManualSeed(11, 0).ok());
  auto fork = GetRngTracker().Fork();
  Uniforms({3}, ActiveGenerator());
  AllRngStates saved = GetAllRngStates();
  EXPECT_EQ(saved.active_state, (GeneratorState{11 + 2718, 1}));
  std::vector<float> a = Uniforms({8}, ActiveGenerator());
  SetAllRngStates(saved);
  EXPECT_EQ(Uniforms({8}, ActiveGenerator()), a);
}

TEST(Random, ShardsAreSlicesOfTheWholeTensorEvenAndUneven) {
  const Shape global = {5, 7, 3};
  for (int64_t dim = 0; dim < 3; ++dim) {
    for (int64_t world : {1, 2, 3, 4}) {
      Generator g(99);
      Tensor whole = *Tensor::Empty(global);
      ASSERT_TRUE(FillNormal(whole, g).ok());
      for (int64_t r = 0; r < world; ++r) {
        ShardSpec shard = *ShardOf(global, dim, r, world);
        Generator gr(99);
        Tensor part = *Tensor::Empty(shard.LocalShape());
        ASSERT_TRUE(FillNormal(part, gr, 0.f, 1.f, &shard).ok());
        Tensor want = *whole.Narrow(dim, shard.offset, shard.length);
        EXPECT_EQ(part.ToVector<float>(), want.ToVector<float>())
            << "dim " << dim << " rank " << r << " of " << world;
      }
    }
  }
}

TEST(Random, ShardMismatchIsAnError) {
  Generator g(1);
  ShardSpec shard = *ShardOf({4, 6}, 1, 0, 2);
  Tensor wrong = *Tensor::Empty({4, 4});
  absl::Status s = FillUniform(wrong, g, 0.f, 1.f, &shard);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("global shape [4, 6]"), absl::string_view::npos) << s;
  EXPECT_FALSE(ShardOf({4}, 0, 2, 2).ok());
}

TEST(Init, DistributionsAndFansFromTheGlobalShape) {
  Generator g(5);
  Tensor w = *Tensor::Empty({256, 512});
  ASSERT_TRUE(InitXavierUniform(w, g).ok());
  const float a = std::sqrt(6.f / (256 + 512));
  double sq = 0;
  for (float v : w.ToVector<float>()) {
    ASSERT_LE(std::fabs(v), a);
    sq += double(v) * v;
  }
  EXPECT_NEAR(sq / w.numel(), a * a / 3, 0.05 * a * a / 3);
  ASSERT_TRUE(InitKaimingNormal(w, g).ok());
  sq = 0;
  for (float v : w.ToVector<float>()) sq += double(v) * v;
  EXPECT_NEAR(sq / w.numel(), 2.0 / 512, 0.05 * 2.0 / 512);
  // A shard initialised with the same state is the slice of the whole weight.
  Generator g1(8), g2(8);
  ASSERT_TRUE(InitXavierNormal(w, g1).ok());
  ShardSpec shard = *ShardOf({256, 512}, 1, 1, 3);
  Tensor part = *Tensor::Empty(shard.LocalShape(), DType::kBF16);
  ASSERT_TRUE(InitXavierNormal(part, g2, &shard).ok());
  Tensor want = *(*w.Narrow(1, shard.offset, shard.length)).To(DType::kBF16);
  EXPECT_EQ(part.ToVector<float>(), want.ToVector<float>());
  EXPECT_FALSE(InitXavierUniform(*Tensor::Empty({3}), g).ok());
}

TEST(Dropout, MaskScaleAndBackwardUseTheSameMask) {
  ASSERT_TRUE(ModelParallelManualSeed(3, 0).ok());
  Variable x(*Tensor::Ones({64, 128}), /*requires_grad=*/true);
  const double p = 0.25;
  auto y = Dropout(x, p);
  ASSERT_TRUE(y.ok()) << y.status();
  std::vector<float> yv = y->value().ToVector<float>();
  int64_t kept = 0;
  for (float v : yv) {
    ASSERT_TRUE(v == 0.f || std::fabs(v - 1.f / 0.75f) < 1e-6f) << v;
    kept += v != 0.f;
  }
  EXPECT_NEAR(double(kept) / yv.size(), 0.75, 0.02);
  Tensor g = *Tensor::Full({64, 128}, 2.0);
  ASSERT_TRUE(Backward(*y, g).ok());
  std::vector<float> gx = x.grad().ToVector<float>();
  for (size_t i = 0; i < yv.size(); ++i) EXPECT_EQ(gx[i], 2.f * yv[i]);
  // The mask is the DropoutMask of the same generator state.
  Generator replay(3);
  Tensor mask = *DropoutMask({64, 128}, p, replay);
  std::vector<bool> m = mask.ToVector<bool>();
  for (size_t i = 0; i < yv.size(); ++i) EXPECT_EQ(m[i], yv[i] != 0.f);
}

TEST(Dropout, IdentityForZeroPAndEvalAndErrors) {
  Variable x(*Tensor::Full({4, 4}, 3.0));
  const GeneratorState before = DefaultGenerator().state();
  EXPECT_TRUE(Dropout(x, 0.0)->value().SharesStorageWith(x.value()));
  EXPECT_TRUE(Dropout(x, 0.5, /*training=*/false)->value().SharesStorageWith(x.value()));
  EXPECT_EQ(DefaultGenerator().state(), before);  // no draw
  EXPECT_FALSE(Dropout(x, 1.0).ok());
  EXPECT_FALSE(Dropout(x, -0.1).ok());
}

TEST(Dropout, Bf16KeepsDtype) {
  Variable x(*Tensor::Full({8, 8}, 1.0, DType::kBF16));
  auto y = Dropout(x, 0.5);
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(y->dtype(), DType::kBF16);
  for (float v : y->value().ToVector<float>()) EXPECT_TRUE(v == 0.f || v == 2.f);
}

TEST(Dropout, BiasDropoutAddIsResidualPlusDropoutOfBiasedInput) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (double p : {0.0, 0.2}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " p " << p);
      const Shape shape = {40, 130};
      Generator fill(21);
      Tensor xt = *Tensor::Empty(shape, dtype), rt = *Tensor::Empty(shape, dtype);
      Tensor bt = *Tensor::Empty({130}, dtype);
      ASSERT_TRUE(FillUniform(xt, fill, -1.f, 1.f).ok());
      ASSERT_TRUE(FillUniform(rt, fill, -1.f, 1.f).ok());
      ASSERT_TRUE(FillUniform(bt, fill, -1.f, 1.f).ok());
      Variable x(xt, true), r(rt, true), b(bt, true);
      ASSERT_TRUE(ModelParallelManualSeed(9, 0).ok());
      auto y = BiasDropoutAdd(x, b, r, p);
      ASSERT_TRUE(y.ok()) << y.status();
      ASSERT_EQ(y->dtype(), dtype);
      Tensor g = *Tensor::Full(shape, 0.5, dtype);
      ASSERT_TRUE(Backward(*y, g).ok());
      Generator replay(9);
      const std::vector<bool> keep =
          p > 0 ? DropoutMask(shape, p, replay)->ToVector<bool>() : std::vector<bool>(40 * 130, true);
      const double scale = 1.0 / (1.0 - p);
      const std::vector<double> xv = xt.ToVector<double>(), rv = rt.ToVector<double>();
      const std::vector<double> bv = bt.ToVector<double>(), yv = y->value().ToVector<double>();
      const std::vector<double> gx = x.grad().ToVector<double>(), gr = r.grad().ToVector<double>();
      const std::vector<double> gb = b.grad().ToVector<double>();
      const double tol = dtype == DType::kF32 ? 1e-6 : 1.6e-2;
      std::vector<double> db(130, 0.0);
      for (int64_t i = 0; i < 40 * 130; ++i) {
        const double want = rv[i] + (keep[i] ? (xv[i] + bv[i % 130]) * scale : 0.0);
        ASSERT_NEAR(yv[i], want, tol) << i;
        const double dxi = keep[i] ? 0.5 * scale : 0.0;
        ASSERT_NEAR(gx[i], dxi, tol * dxi) << i;
        ASSERT_EQ(gr[i], 0.5) << i;
        db[i % 130] += dxi;
      }
      for (int64_t j = 0; j < 130; ++j) EXPECT_NEAR(gb[j], db[j], 1e-2 * db[j]) << j;
    }
  }
  Variable x(*Tensor::Ones({2, 3}));
  EXPECT_FALSE(BiasDropoutAdd(x, Variable(), x, 1.0).ok());
  auto bad = BiasDropoutAdd(x, Variable(*Tensor::Ones({2})), x, 0.1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bias"), absl::string_view::npos) << bad.status();
}

// Fills and dropout give the same values on every device: the draws happen
// on the host and only the result (or the mask) moves.
TPX_DEVICE_TEST_SUITE(RngOnDevice);

TEST_P(RngOnDevice, FillsAndDropoutMatchTheHostDraws) {
  Generator host_gen(11), dev_gen(11);
  Tensor host = *Tensor::Empty({5, 7}, DType::kBF16);
  Tensor dev = *TestZeros({5, 7}, DType::kBF16);
  ASSERT_TRUE(FillNormal(host, host_gen).ok());
  ASSERT_TRUE(FillNormal(dev, dev_gen).ok());
  EXPECT_EQ(dev.device(), TestDevice());
  EXPECT_EQ(dev.ToVector<float>(), host.ToVector<float>());

  ASSERT_TRUE(ModelParallelManualSeed(5, 0).ok());
  const float scale = 1.0f / 0.7f;
  Tensor x_host = *Tensor::Empty({16, 32});
  ASSERT_TRUE(FillUniform(x_host, host_gen, -1.f, 1.f).ok());
  Variable x(*x_host.To(TestDevice()), /*requires_grad=*/true);
  auto y = Dropout(x, 0.3);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->value().device(), TestDevice());
  ASSERT_TRUE(Backward(*y, *TestFull({16, 32}, 2.0)).ok());
  Generator replay(5);
  const std::vector<bool> keep = DropoutMask({16, 32}, 0.3, replay)->ToVector<bool>();
  const std::vector<float> xv = x_host.ToVector<float>();
  const std::vector<float> yv = y->value().ToVector<float>();
  const std::vector<float> gv = x.grad().ToVector<float>();
  for (size_t i = 0; i < xv.size(); ++i) {
    EXPECT_EQ(yv[i], keep[i] ? xv[i] * scale : 0.f) << i;
    EXPECT_EQ(gv[i], keep[i] ? 2.f * scale : 0.f) << i;
  }
}

}  // namespace
}  // namespace tpx::rng
