// Vocab-parallel cross entropy at TP = 1..4 against a full-vocabulary
// reference computed here in double precision.
#include "loss/cross_entropy.h"

#include <cmath>
#include <random>
#include <vector>

#include "core/autograd/engine.h"
#include "core/ops.h"
#include "gtest/gtest.h"
#include "testing/multiprocess.h"

namespace tpx::loss {
namespace {

struct Case {
  int64_t tokens;  // s * b, laid out as [s=tokens/2, b=2]
  int64_t vocab;
  double smoothing;
  DType dtype;
  float logit_scale;
  bool even_split_default;  // pass vocab_size = 0 (needs vocab % tp == 0)
};

struct Reference {
  std::vector<double> loss;  // per token
  std::vector<double> grad;  // [tokens, vocab]
};

// The per-token loss of the header's formula and its gradient, from full logits.
Reference ComputeReference(const std::vector<float>& logits, const std::vector<int64_t>& target,
                           const std::vector<float>& gout, int64_t vocab, double eps,
                           int64_t ignore) {
  const int64_t n = target.size();
  Reference ref{std::vector<double>(n, 0.0), std::vector<double>(n * vocab, 0.0)};
  const double s = eps > 0 ? eps * vocab / (vocab - 1) : 0.0;
  for (int64_t r = 0; r < n; ++r) {
    if (target[r] == ignore) continue;
    const float* x = logits.data() + r * vocab;
    double m = -INFINITY;
    for (int64_t i = 0; i < vocab; ++i) m = std::max(m, double(x[i]));
    double z = 0;
    for (int64_t i = 0; i < vocab; ++i) z += std::exp(double(x[i]) - m);
    double mean_logp = 0;
    for (int64_t i = 0; i < vocab; ++i) mean_logp += (double(x[i]) - m) - std::log(z);
    mean_logp /= vocab;
    const double logp_t = (double(x[target[r]]) - m) - std::log(z);
    ref.loss[r] = -(1 - s) * logp_t - s * mean_logp;
    for (int64_t i = 0; i < vocab; ++i) {
      const double p = std::exp(double(x[i]) - m) / z;
      ref.grad[r * vocab + i] = gout[r] * (p - s / vocab - (i == target[r] ? 1 - s : 0));
    }
  }
  return ref;
}

// Runs every case on one rank of a TP group of ctx.size ranks, through the
// fused CPU loops or the core-op path (the one other devices take).
void RunCases(testing::RankContext& ctx, bool fused) {
  const int tp = ctx.size, rank = ctx.rank;
  const int64_t ignore = -100;
  std::vector<Case> cases = {
      {8, 37, 0.0, DType::kF32, 3.f, false},   {8, 37, 0.1, DType::kF32, 3.f, false},
      {8, 37, 0.1, DType::kBF16, 3.f, false},  {8, 37, 0.0, DType::kBF16, 3.f, false},
      {8, 37, 0.1, DType::kF16, 3.f, false},
      {6, 3000, 0.2, DType::kF32, 5.f, false},  // several online-softmax chunks per shard
      {4, 24, 0.1, DType::kF32, 2.f, true},
      {4, 37, 0.1, DType::kF32, 3e4f, false},  // huge logits: finite with smoothing
  };
  for (const Case& c : cases) {
    if (c.even_split_default && c.vocab % tp != 0) continue;
    SCOPED_TRACE(::testing::Message() << (fused ? "fused" : "core ops") << " tp " << tp
                                    << " vocab " << c.vocab << " eps "
                                    << c.smoothing << " dtype " << DTypeName(c.dtype)
                                    << " scale " << c.logit_scale);
    std::mt19937 rng(static_cast<uint32_t>(c.vocab * 31 + c.tokens));
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> full(c.tokens * c.vocab);
    for (float& v : full) v = c.logit_scale * nd(rng);
    if (c.dtype == DType::kBF16) {
      for (float& v : full) v = BF16ToFloat(FloatToBF16(v));
    } else if (c.dtype == DType::kF16) {
      for (float& v : full) v = F16ToFloat(FloatToF16(v));
    }
    std::vector<int64_t> target(c.tokens);
    for (int64_t r = 0; r < c.tokens; ++r) target[r] = (r * 7 + 3) % c.vocab;
    target[1] = ignore;
    std::vector<float> gout(c.tokens);
    for (float& g : gout) g = 0.5f + std::abs(nd(rng));
    const Reference ref = ComputeReference(full, target, gout, c.vocab, c.smoothing, ignore);

    const std::vector<int64_t> sizes = ops::SplitSizes(c.vocab, tp);
    int64_t start = 0;
    for (int r = 0; r < rank; ++r) start += sizes[r];
    const int64_t v_local = sizes[rank];
    std::vector<float> local(c.tokens * v_local);
    for (int64_t r = 0; r < c.tokens; ++r) {
      for (int64_t i = 0; i < v_local; ++i) local[r * v_local + i] = full[r * c.vocab + start + i];
    }
    Tensor logits_t = *Tensor::FromVector(local, {c.tokens / 2, 2, v_local}, c.dtype);
    const std::vector<float> logits_before = logits_t.ToVector<float>();
    Variable logits(logits_t, /*requires_grad=*/true);
    Tensor target_t = *Tensor::FromVector(target, {c.tokens / 2, 2});
    CrossEntropyOptions opts;
    opts.label_smoothing = c.smoothing;
    opts.ignore_index = ignore;
    opts.vocab_size = c.even_split_default ? 0 : c.vocab;
    opts.fused = fused;
    auto loss = VocabParallelCrossEntropy(logits, target_t, &ctx.comm, opts);
    ASSERT_TRUE(loss.ok()) << loss.status();
    ASSERT_EQ(loss->shape(), (Shape{c.tokens / 2, 2}));
    std::vector<float> lv = loss->value().ToVector<float>();
    const double rtol = 1e-5;
    for (int64_t r = 0; r < c.tokens; ++r) {
      ASSERT_TRUE(std::isfinite(lv[r])) << "token " << r;
      EXPECT_NEAR(lv[r], ref.loss[r], 1e-4 + rtol * std::abs(ref.loss[r])) << "token " << r;
    }
    EXPECT_EQ(lv[1], 0.f);
    Tensor gout_t = *Tensor::FromVector(gout, {c.tokens / 2, 2});
    ASSERT_TRUE(Backward(*loss, gout_t).ok());
    ASSERT_EQ(logits.grad().dtype(), c.dtype);
    std::vector<float> gv = logits.grad().ToVector<float>();
    const double gtol = c.dtype == DType::kF32 ? 1e-5 : 1e-2;
    for (int64_t r = 0; r < c.tokens; ++r) {
      for (int64_t i = 0; i < v_local; ++i) {
        const double want = ref.grad[r * c.vocab + start + i];
        ASSERT_NEAR(gv[r * v_local + i], want, gtol * (1e-2 + std::abs(want)))
            << "token " << r << " class " << start + i;
      }
    }
    // The caller's logits are untouched.
    EXPECT_EQ(logits_t.ToVector<float>(), logits_before);
  }
}

TEST(VocabParallelCrossEntropy, MatchesFullVocabularyAtTp1To4) {
  for (int tp : {1, 2, 3, 4}) {
    testing::RunOnRanks(tp, [](testing::RankContext& ctx) {
      RunCases(ctx, /*fused=*/true);
      RunCases(ctx, /*fused=*/false);
    });
  }
}

TEST(VocabParallelCrossEntropy, InPlaceGradAndMeanOverNonIgnored) {
  const std::vector<float> x = {1, 2, 3, 0, 0, 0, 5, -1, 2};
  Tensor logits_t = *Tensor::FromVector(x, {3, 3});
  Tensor copy = *logits_t.Clone();
  Variable logits(logits_t, true), ref_logits(copy, true);
  Tensor target = *Tensor::FromVector<int64_t>({2, -100, 0}, {3});
  CrossEntropyOptions in_place;
  in_place.in_place_grad = true;
  auto a = VocabParallelCrossEntropy(logits, target, nullptr, in_place);
  auto b = VocabParallelCrossEntropy(ref_logits, target, nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  auto ma = MeanOverNonIgnored(*a, target);
  auto mb = MeanOverNonIgnored(*b, target);
  ASSERT_TRUE(ma.ok() && mb.ok());
  const std::vector<float> la = a->value().ToVector<float>();
  EXPECT_NEAR(ma->value().Item(), (la[0] + la[2]) / 2, 1e-6);
  ASSERT_TRUE(Backward(*ma).ok());
  ASSERT_TRUE(Backward(*mb).ok());
  EXPECT_EQ(logits.grad().ToVector<float>(), ref_logits.grad().ToVector<float>());
  // The gradient was written into the logits' storage.
  EXPECT_EQ(logits_t.ToVector<float>(), ref_logits.grad().ToVector<float>());
  std::vector<float> g = logits.grad().ToVector<float>();
  for (int i = 3; i < 6; ++i) EXPECT_EQ(g[i], 0.f);  // ignored token
}

TEST(VocabParallelCrossEntropy, BadTargetNamesThePosition) {
  Variable logits(*Tensor::Zeros({2, 3, 5}), true);
  Tensor target = *Tensor::FromVector<int64_t>({0, 1, 2, 3, 9, -100}, {2, 3});
  auto loss = VocabParallelCrossEntropy(logits, target, nullptr);
  ASSERT_FALSE(loss.ok());
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(loss.status().message().find("target[1, 1] = 9 is outside [0, 5)"),
            absl::string_view::npos)
      << loss.status();
  Tensor wrong_shape = *Tensor::FromVector<int64_t>({0, 1}, {2});
  EXPECT_FALSE(VocabParallelCrossEntropy(logits, wrong_shape, nullptr).ok());
  CrossEntropyOptions bad_vocab;
  bad_vocab.vocab_size = 7;
  EXPECT_FALSE(VocabParallelCrossEntropy(logits, *Tensor::Zeros({2, 3}, DType::kI64), nullptr,
                                         bad_vocab)
                   .ok());
}

}  // namespace
}  // namespace tpx::loss
