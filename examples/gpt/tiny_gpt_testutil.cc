#include "examples/gpt/tiny_gpt_testutil.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace tpx::gpt {

GptConfig TinyGptConfig() {
  return GptConfig{.vocab_size = ByteDataset::kVocabSize, .seq_len = 16, .d_model = 32,
                   .n_heads = 4, .n_layers = 2, .d_ff = 64, .seed = 77};
}

TrainOptions TinyTrainOptions(int tp, int64_t steps, int64_t warmup_steps) {
  TrainOptions o;
  o.model = TinyGptConfig();
  o.model.dropout = 0.1;
  o.tp = tp;
  o.batch = 4;
  o.steps = steps;
  o.warmup_steps = warmup_steps;
  o.lr = 1e-2;
  o.min_lr = 1e-3;
  o.log_interval = 0;
  o.eval_interval = 0;
  o.eval_batches = 1;
  o.sample_tokens = 0;
  return o;
}

absl::StatusOr<ByteDataset> LoadBundledText() {
  return ByteDataset::Load("examples/gpt/data/kjv_genesis_exodus.txt", 0.1);
}

std::string TestTmpPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TrainRun TrainOnNewRanks(int world, const TrainOptions& options, const std::string& out,
                         testing::RunOptions run_options) {
  run_options.comm_timeout = std::max(run_options.comm_timeout, absl::Seconds(60));
  std::remove(out.c_str());  // a run that fails must not leave an earlier run's result
  testing::RunOnRanks(world, [&](testing::RankContext& ctx) {
    auto data = LoadBundledText();
    ASSERT_TRUE(data.ok()) << data.status();
    auto r = Train(ctx.comm, *data, options);
    ASSERT_TRUE(r.ok()) << r.status();
    if (ctx.rank != 0) return;
    FILE* f = std::fopen(out.c_str(), "w");
    ASSERT_NE(f, nullptr) << out;
    std::fprintf(f, "%lld\n", static_cast<long long>(r->first_step));
    for (double l : r->losses) std::fprintf(f, "%a\n", l);
    ASSERT_EQ(std::fclose(f), 0) << out;
  }, run_options);
  TrainRun run;
  std::ifstream in(out);
  std::string line;
  if (std::getline(in, line)) run.first_step = std::stoll(line);
  while (std::getline(in, line)) run.losses.push_back(std::strtod(line.c_str(), nullptr));
  return run;
}

}  // namespace tpx::gpt
