// Generation at TP = 1, 2 and 4 over UCX (one 4-rank job; sub-communicators
// give the smaller groups): the KV-cache decode gives the full-sequence
// (no cache) logits of the training graph, fused and unfused decode agree,
// the same weights and seed give identical tokens at every TP size (greedy
// and sampled, across a context restart), stop bytes and streaming work,
// and bad input gives errors.
#include "examples/gpt/generator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/autograd/grad_mode.h"
#include "core/compare_testutil.h"
#include "core/ops.h"
#include "examples/gpt/dataset.h"
#include "examples/gpt/model.h"
#include "examples/gpt/tiny_gpt_testutil.h"
#include "examples/gpt/trainer.h"
#include "gtest/gtest.h"
#include "parallel/mappings.h"
#include "rng/tracker.h"
#include "testing/multiprocess.h"

namespace tpx::gpt {
namespace {

// Logits reach |x| ~ 10; f32 sums in other orders differ by ~1e-6 of that.
constexpr double kLogitTol = 2e-4;

// The seeded initial model with its weights scaled up (the same factor on
// every shard, so still the same model at every TP size): attention and MLP
// then move the logits by O(1), so a wrong cache entry shows, and logits
// spread (no near-ties for argmax to flip on).
std::unique_ptr<GptModel> TinyModel(comm::Communicator& tp, DType dtype = DType::kF32) {
  EXPECT_TRUE(rng::ModelParallelManualSeed(5, tp.rank(), 0, 0, rng::SeedMode::kTpInvariant).ok());
  GptConfig config = TinyGptConfig();
  config.dtype = dtype;
  auto model = GptModel::Create(tp, config);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  const GptModel& m = **model;
  auto scale = [](const Variable& v, double s) {
    EXPECT_TRUE(ops::ScaleInPlace(v.value(), s).ok());
  };
  scale(m.embedding().weight(), 5.0);
  scale(m.positions(), 5.0);
  for (const GptModel::Block& b : m.blocks()) {
    scale(b.qkv->weight(), 15.0);
    scale(b.attn_out->weight(), 20.0);
    scale(b.fc1->weight(), 15.0);
    scale(b.fc2->weight(), 20.0);
  }
  scale(m.final_norm_weight(), 3.0);
  return std::move(*model);
}

// Full-vocabulary logits of the last position from the training graph.
Tensor FullSequenceLogits(const GptModel& model, const std::vector<std::vector<int64_t>>& seqs) {
  NoGradGuard no_grad;
  const int64_t t = static_cast<int64_t>(seqs[0].size()), b = static_cast<int64_t>(seqs.size());
  std::vector<int64_t> flat(t * b);
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < b; ++j) flat[i * b + j] = seqs[j][i];
  }
  Variable logits = *model.Logits(*Tensor::FromVector<int64_t>(flat, {t, b}), false);
  Variable full = *parallel::GatherFromTensorParallelRegion(model.tp(), logits);
  Tensor last = *full.value().Narrow(0, t - 1, 1)->Reshape({b, model.config().vocab_size});
  return *last.To(DType::kF32);
}

struct Outputs {
  std::vector<std::vector<int64_t>> greedy, sampled;
};

Outputs RunGroup(comm::Communicator& tp) {
  Outputs out;
  std::unique_ptr<GptModel> model = TinyModel(tp);
  if (model == nullptr) return out;
  auto gen = Generator::Create(*model, {.max_batch = 2});
  auto unfused = Generator::Create(*model, {.max_batch = 2, .fused = false});
  EXPECT_TRUE(gen.ok() && unfused.ok());
  if (!gen.ok() || !unfused.ok()) return out;

  // KV-cache decode against the full sequence, for every decoded position.
  std::vector<std::vector<int64_t>> seqs = {Encode("In the beginning God"),
                                            Encode("And Moses said unto")};
  const int64_t prompt = 5;
  std::vector<int64_t> first;
  for (int64_t i = 0; i < prompt; ++i) {
    for (const auto& s : seqs) first.push_back(s[i]);
  }
  Tensor prompt_t = *Tensor::FromVector<int64_t>(first, {prompt, 2});
  auto logits = (*gen)->Prefill(prompt_t);
  auto logits_unfused = (*unfused)->Prefill(prompt_t);
  EXPECT_TRUE(logits.ok()) << logits.status();
  EXPECT_TRUE(logits_unfused.ok()) << logits_unfused.status();
  if (!logits.ok() || !logits_unfused.ok()) return out;
  for (int64_t pos = prompt;; ++pos) {
    SCOPED_TRACE(::testing::Message() << "positions " << pos);
    std::vector<std::vector<int64_t>> upto = {
        std::vector<int64_t>(seqs[0].begin(), seqs[0].begin() + pos),
        std::vector<int64_t>(seqs[1].begin(), seqs[1].begin() + pos)};
    EXPECT_TRUE(TensorsClose(*logits, FullSequenceLogits(*model, upto), kLogitTol, kLogitTol));
    EXPECT_TRUE(TensorsClose(*logits_unfused, *logits, 1e-5, 1e-5));
    if (pos == model->config().seq_len) break;
    Tensor next = *Tensor::FromVector<int64_t>({seqs[0][pos % seqs[0].size()],
                                                seqs[1][pos % seqs[1].size()]},
                                               {2});
    if (pos >= static_cast<int64_t>(seqs[0].size())) {
      next = *Tensor::FromVector<int64_t>({int64_t{'x'}, int64_t{'y'}}, {2});
      seqs[0].push_back('x');
      seqs[1].push_back('y');
    }
    logits = (*gen)->Decode(next);
    logits_unfused = (*unfused)->Decode(next);
    EXPECT_TRUE(logits.ok()) << logits.status();
    EXPECT_TRUE(logits_unfused.ok()) << logits_unfused.status();
    if (!logits.ok() || !logits_unfused.ok()) return out;
  }
  EXPECT_EQ((*gen)->position(), model->config().seq_len);
  auto full = (*gen)->Decode(*Tensor::FromVector<int64_t>({1, 2}, {2}));
  EXPECT_EQ(full.status().code(), absl::StatusCode::kOutOfRange) << full.status();

  // Generation, run past seq_len (one context restart), batch 2; streamed
  // tokens are the continuation.
  const std::vector<std::vector<int64_t>> prompts = {Encode("In the "), Encode("And the")};
  GenerateOptions greedy{.max_new_tokens = 24, .sampling = {.temperature = 0}};
  std::vector<std::vector<int64_t>> streamed(2);
  auto g = (*gen)->Generate(prompts, greedy,
                            [&](int64_t s, int64_t tok) { streamed[s].push_back(tok); });
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return out;
  out.greedy = *g;
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(out.greedy[s].size(), prompts[s].size() + 24);
    EXPECT_EQ(std::vector<int64_t>(out.greedy[s].begin() + prompts[s].size(), out.greedy[s].end()),
              streamed[s]);
  }
  EXPECT_TRUE(rng::ModelParallelManualSeed(11, tp.rank(), 0, 0, rng::SeedMode::kTpInvariant).ok());
  GenerateOptions sampled{.max_new_tokens = 24,
                          .sampling = {.temperature = 1.5, .top_k = 50, .top_p = 0.95}};
  auto s1 = (*gen)->Generate(prompts, sampled);
  EXPECT_TRUE(s1.ok()) << s1.status();
  if (!s1.ok()) return out;
  out.sampled = *s1;
  EXPECT_NE(out.sampled, out.greedy) << "sampling at temperature 1.5 should leave the argmax";
  // Reseeding repeats the sample; the unfused path gives the same tokens.
  EXPECT_TRUE(rng::ModelParallelManualSeed(11, tp.rank(), 0, 0, rng::SeedMode::kTpInvariant).ok());
  auto s2 = (*unfused)->Generate(prompts, sampled);
  EXPECT_TRUE(s2.ok());
  if (s2.ok()) {
    EXPECT_EQ(*s2, out.sampled);
  }

  // A stop byte ends a sequence after it (kept); the other runs on.
  const int64_t stop = out.greedy[0][prompts[0].size() + 2];
  auto stopped = (*gen)->Generate(prompts, {.max_new_tokens = 24, .stop_byte = stop,
                                            .sampling = {.temperature = 0}});
  EXPECT_TRUE(stopped.ok());
  if (stopped.ok()) {
    const auto& s0 = (*stopped)[0];
    EXPECT_EQ(s0.empty() ? -1 : s0.back(), stop);
    EXPECT_LE(s0.size(), prompts[0].size() + 3);
    EXPECT_EQ(s0, std::vector<int64_t>(out.greedy[0].begin(), out.greedy[0].begin() + s0.size()));
  }
  return out;
}

// A bf16 model's KV-cache logits (its decoding products run on the bf16
// kernels of core/few_rows_gemm.h where the CPU has them) against its
// full-sequence ones, at every position of its context; returns the
// largest difference.
double Bf16CacheAgainstFullSequence(comm::Communicator& tp) {
  std::unique_ptr<GptModel> model = TinyModel(tp, DType::kBF16);
  if (model == nullptr) return -1;
  auto gen = Generator::Create(*model, {.max_batch = 2});
  EXPECT_TRUE(gen.ok()) << gen.status();
  if (!gen.ok()) return -1;
  std::vector<std::vector<int64_t>> seqs = {Encode("In the beginning God"),
                                            Encode("And Moses said unto")};
  const int64_t prompt = 3, context = model->config().seq_len;
  std::vector<int64_t> first;
  for (int64_t i = 0; i < prompt; ++i) {
    for (const auto& s : seqs) first.push_back(s[i]);
  }
  auto logits = (*gen)->Prefill(*Tensor::FromVector<int64_t>(first, {prompt, 2}));
  double worst = 0;
  for (int64_t pos = prompt;; ++pos) {
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (!logits.ok()) return -1;
    std::vector<std::vector<int64_t>> upto = {
        std::vector<int64_t>(seqs[0].begin(), seqs[0].begin() + pos),
        std::vector<int64_t>(seqs[1].begin(), seqs[1].begin() + pos)};
    const std::vector<float> got = logits->ToVector<float>();
    const std::vector<float> want = FullSequenceLogits(*model, upto).ToVector<float>();
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(got[i] - want[i])));
    }
    if (pos == context) break;
    logits = (*gen)->Decode(*Tensor::FromVector<int64_t>({seqs[0][pos], seqs[1][pos]}, {2}));
  }
  return worst;
}

void BadInput(comm::Communicator& tp) {
  std::unique_ptr<GptModel> model = TinyModel(tp);
  ASSERT_NE(model, nullptr);
  auto gen = Generator::Create(*model, {.max_batch = 2});
  ASSERT_TRUE(gen.ok());
  GenerateOptions o{.max_new_tokens = 3, .sampling = {.temperature = 0}};
  auto expect_error = [&](const std::vector<std::vector<int64_t>>& prompts,
                          const GenerateOptions& opts, const std::string& says) {
    auto r = (*gen)->Generate(prompts, opts);
    ASSERT_FALSE(r.ok()) << says;
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status();
  };
  expect_error({{}}, o, "prompt 0: Generator: the prompt is empty");
  expect_error({std::vector<int64_t>(17, 'a')}, o, "17 bytes, more than the model's context (seq_len 16)");
  expect_error({{'a'}, {'a', 300}}, o, "prompt 1: Generator: byte 1 of the prompt is 300, outside the model's vocabulary");
  expect_error({{'a', -1}}, o, "is -1, outside");
  expect_error({{'a'}, {'a', 'b'}}, o, "one length");
  expect_error({{'a'}, {'b'}, {'c'}}, o, "max_batch 2");
  expect_error({}, o, "0 prompts");
  expect_error({{'a'}}, {.stop_byte = 256}, "stop_byte 256");
  expect_error({{'a'}}, {.sampling = {.top_p = 0}}, "top_p");
  expect_error({{'a'}}, {.max_new_tokens = -1}, "max_new_tokens");
  EXPECT_FALSE((*gen)->Prefill(*Tensor::Zeros({17, 1}, DType::kI64)).ok());
  EXPECT_FALSE((*gen)->Prefill(*Tensor::Zeros({2, 3}, DType::kI64)).ok());
  EXPECT_FALSE((*gen)->Prefill(*Tensor::Full({2, 1}, 256, DType::kI64)).ok());
  EXPECT_FALSE(Generator::Create(*model, {.max_batch = 0}).ok());
  // Sampling needs the seeded tracker.
  rng::GetRngTracker().Reset();
  auto unseeded = (*gen)->Generate({{'a'}}, {.max_new_tokens = 2});
  EXPECT_EQ(unseeded.status().code(), absl::StatusCode::kFailedPrecondition) << unseeded.status();
  // A TP size that does not divide the heads.
  if (tp.size() > 1) {
    GptConfig c = TinyGptConfig();
    c.n_heads = 2 * tp.size() + 1;
    c.d_model = 4 * c.n_heads;
    auto bad = GptModel::Create(tp, c);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("n_heads"), std::string::npos) << bad.status();
  }
  // Training refuses a sample it could not take before it trains.
  auto data = ByteDataset::FromText(std::string(4096, 'a'), 0.1);
  ASSERT_TRUE(data.ok());
  TrainOptions train{.model = TinyGptConfig(), .tp = tp.size(), .steps = 1,
                     .prompt = std::string(17, 'a')};
  auto trained = Train(tp, *data, train);
  ASSERT_FALSE(trained.ok());
  EXPECT_NE(trained.status().message().find("more than the model's context"), std::string::npos)
      << trained.status();
  train.prompt = "ok";
  train.sampling.top_p = 0;
  EXPECT_FALSE(Train(tp, *data, train).ok());
  // After all those errors the group is still in step.
  auto ok = (*gen)->Generate({{'a'}}, o);
  EXPECT_TRUE(ok.ok()) << ok.status();
}

TEST(Generator, KvCacheMatchesFullSequenceAndTokensAreTpInvariant) {
  setenv("TPX_NUM_THREADS", "1", 0);
  testing::RunOptions options;
  options.comm_timeout = absl::Seconds(60);
  options.deadline = absl::Seconds(240);
  testing::RunOnRanks(4, [](testing::RankContext& ctx) {
    auto solo = ctx.comm.Split(ctx.rank == 0 ? 0 : -1, 0);
    auto pair = ctx.comm.Split(ctx.rank < 2 ? 0 : -1, ctx.rank);
    ASSERT_TRUE(solo.ok() && pair.ok());
    Outputs tp1, tp2, tp4;
    if (*solo) tp1 = RunGroup(**solo);
    if (*pair) tp2 = RunGroup(**pair);
    tp4 = RunGroup(ctx.comm);
    if (ctx.rank > 1) return;
    // Every rank of a group holds the same tokens, and every TP size too.
    EXPECT_FALSE(tp2.greedy.empty());
    if (ctx.rank == 0) {
      EXPECT_FALSE(tp1.greedy.empty());
      EXPECT_EQ(tp2.greedy, tp1.greedy);
      EXPECT_EQ(tp2.sampled, tp1.sampled);
    }
    EXPECT_EQ(tp4.greedy, tp2.greedy);
    EXPECT_EQ(tp4.sampled, tp2.sampled);
  }, options);
}

TEST(Generator, BadInputGivesErrors) {
  for (int n : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << "world " << n);
    testing::RunOnRanks(n, [](testing::RankContext& ctx) { BadInput(ctx.comm); });
  }
}

// Logits reach |x| ~ 10 and the model rounds every activation to bf16
// (8 bits of mantissa): the cache and the full sequence, whose sums run in
// other orders, differ by about 0.1 here, while a wrong cache entry
// moves logits by O(1) (TinyModel's scaled weights).
constexpr double kBf16LogitTol = 0.4;

TEST(Generator, Bf16KvCacheMatchesFullSequence) {
  setenv("TPX_NUM_THREADS", "1", 0);
  testing::RunOptions options;
  options.comm_timeout = absl::Seconds(60);
  options.deadline = absl::Seconds(120);
  testing::RunOnRanks(
      2,
      [](testing::RankContext& ctx) {
        auto solo = ctx.comm.Split(ctx.rank == 0 ? 0 : -1, 0);
        ASSERT_TRUE(solo.ok());
        if (*solo) {
          const double tp1 = Bf16CacheAgainstFullSequence(**solo);
          EXPECT_GE(tp1, 0);
          EXPECT_LE(tp1, kBf16LogitTol) << "TP=1";
          std::printf("bf16 decode vs full sequence, TP=1: largest difference %.4f\n", tp1);
        }
        const double tp2 = Bf16CacheAgainstFullSequence(ctx.comm);
        EXPECT_GE(tp2, 0);
        EXPECT_LE(tp2, kBf16LogitTol) << "TP=2";
        if (ctx.rank == 0) {
          std::printf("bf16 decode vs full sequence, TP=2: largest difference %.4f\n", tp2);
        }
      },
      options);
}

}  // namespace
}  // namespace tpx::gpt
