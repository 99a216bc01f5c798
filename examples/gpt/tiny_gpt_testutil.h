// Test-only (target //examples/gpt:tiny_gpt_testutil): the tiny GPT the
// example's multi-rank tests train, and a way to train it on new processes.
//
//   TrainOptions o = TinyTrainOptions(/*tp=*/2, /*steps=*/8, /*warmup_steps=*/3);
//   TrainRun run = TrainOnNewRanks(/*world=*/2, o, TestTmpPath("losses"));
//   EXPECT_EQ(run.losses.size(), 8u);
//
// The model (2 layers, d_model 32, 16-byte context, seed 77; dropout 0.1
// when trained here) learns visibly in 20 steps of 4 sequences yet trains in
// well under a second per step on a loaded 2-core machine; every size
// divides by TP 1, 2 and 4.
#ifndef TPX_EXAMPLES_GPT_TINY_GPT_TESTUTIL_H_
#define TPX_EXAMPLES_GPT_TINY_GPT_TESTUTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "examples/gpt/dataset.h"
#include "examples/gpt/model.h"
#include "examples/gpt/trainer.h"
#include "testing/multiprocess.h"

namespace tpx::gpt {

// The tiny model: bytes, 16-byte context, d_model 32, 4 heads, 2 layers,
// d_ff 64, seed 77, no dropout.
GptConfig TinyGptConfig();

// The tiny model with dropout 0.1 at `tp`, trained `steps` AdamW steps (4
// sequences per replica, learning rate 1e-2 after `warmup_steps`, cosine to
// 1e-3), with no logging, evaluation or sampling.
TrainOptions TinyTrainOptions(int tp, int64_t steps, int64_t warmup_steps);

// The text the example bundles (test data of every GPT test), 10% held out.
absl::StatusOr<ByteDataset> LoadBundledText();

// `name` under the test's private temporary directory (TEST_TMPDIR).
std::string TestTmpPath(const std::string& name);

// What rank 0 of a training run reports.
struct TrainRun {
  int64_t first_step = -1;  // steps done before (a resumed run's start)
  std::vector<double> losses;
};

// Trains `options` on the bundled text on `world` new processes
// (testing::RunOnRanks with `run_options`, e.g. placed on emulated hosts;
// the communicator timeout is raised to 60 s for slow shared cores). Rank 0
// writes the result to `out` exactly (hex floats), read back here; a failed
// rank fails the calling test and leaves the result short.
TrainRun TrainOnNewRanks(int world, const TrainOptions& options, const std::string& out,
                         testing::RunOptions run_options = {});

}  // namespace tpx::gpt

#endif  // TPX_EXAMPLES_GPT_TINY_GPT_TESTUTIL_H_
