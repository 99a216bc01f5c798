// Runs examples/gpt/train with bad flag values: each must be refused before
// any rank starts, with exit code 2 and a message naming the flag (not a
// SIGFPE, a heap overflow or a "final validation loss -nan").
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace {

struct TrainRun {
  int exit_code;
  std::string output;
};

TrainRun Train(const std::string& flags) {
  const std::string cmd = absl::StrCat(std::getenv("TEST_SRCDIR"), "/tpx/examples/gpt/train ",
                                       flags, " 2>&1");
  FILE* pipe = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

struct BadFlag {
  const char* flags;
  const char* names;  // what the message must mention
};

class TrainFlags : public ::testing::TestWithParam<BadFlag> {};

TEST_P(TrainFlags, AreRefusedNamingTheFlag) {
  TrainRun r = Train(GetParam().flags);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(GetParam().names), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step "), std::string::npos) << "training started:\n" << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    Bad, TrainFlags,
    ::testing::Values(BadFlag{"--n_heads=0", "--n_heads must be at least 1"},
                      BadFlag{"--d_model=100 --n_heads=3", "--n_heads (3) must divide --d_model"},
                      BadFlag{"--batch=0", "--batch must be at least 1"},
                      BadFlag{"--batch=4611686018427387904", "--seq_len * --batch"},
                      BadFlag{"--seq_len=4294967296 --batch=4294967296", "--seq_len * --batch"},
                      BadFlag{"--seq_len=33554432 --n_heads=1 --d_model=8 --batch=1",
                              "--seq_len * --seq_len * --batch * --n_heads"},
                      BadFlag{"--d_model=1073741824 --n_heads=1", "--d_model * --d_model"},
                      BadFlag{"--seq_len=-5", "--seq_len must be at least 1"},
                      BadFlag{"--d_ff=0", "--d_ff must be at least 1"},
                      BadFlag{"--dtype=f16", "--dtype must be f32 or bf16, got 'f16'"},
                      BadFlag{"--n_layers=-1", "--n_layers must be at least 1"},
                      BadFlag{"--nproc=0", "--nproc must be at least 1"},
                      BadFlag{"--nproc=100000", "--nproc must be at most 1024"},
                      BadFlag{"--tp=0", "--tp must be at least 1"},
                      BadFlag{"--steps=0", "--steps must be at least 1"},
                      BadFlag{"--warmup=-1", "--warmup must be at least 0"},
                      BadFlag{"--eval_batches=0", "--eval_batches must be at least 1"},
                      BadFlag{"--eval_interval=0", "--eval_interval must be at least 1"},
                      BadFlag{"--log_interval=0", "--log_interval must be at least 1"},
                      BadFlag{"--sample_tokens=-1", "--sample_tokens must be at least 0"},
                      BadFlag{"--dropout=1", "--dropout must be in [0, 1)"},
                      BadFlag{"--dropout=-0.1", "--dropout must be in [0, 1)"},
                      BadFlag{"--dropout=nan", "--dropout must be in [0, 1)"},
                      BadFlag{"--lr=nan", "--lr must be a finite number > 0"},
                      BadFlag{"--lr=inf", "--lr must be a finite number > 0"},
                      BadFlag{"--lr=0", "--lr must be a finite number > 0"},
                      BadFlag{"--min_lr=-1", "--min_lr must be a finite number >= 0"},
                      BadFlag{"--weight_decay=inf", "--weight_decay must be a finite number"},
                      BadFlag{"--clip=-1", "--clip must be a finite number > 0"}));

TEST(TrainFlags, SmallValidRunTrains) {
  // One tiny step on one rank: valid values pass the checks.
  TrainRun r = Train(absl::StrCat(
      "--nproc=1 --tp=1 --steps=1 --n_layers=1 --d_model=16 --n_heads=2 --d_ff=32 --seq_len=16 "
      "--batch=2 --eval_interval=1 --eval_batches=1 --sample_tokens=4 --prompt=In --csv=",
      std::getenv("TEST_TMPDIR"), "/loss.csv"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("final validation loss"), std::string::npos) << r.output;
}

}  // namespace
