// The consolidated file of a checkpoint saved at TP=2 is an ordinary
// safetensors file: a few lines of Python (standard library only) find each
// tensor of the TP=1 model in it, with its dtype, global shape and exactly
// the bytes of the TP=1 model's parameter (the fused QKV weight included).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "parallel/parallel_state.h"
#include "sharded_state/save.h"
#include "sharded_state/tiny_net_testutil.h"
#include "testing/multiprocess.h"

namespace tpx::sharded_state {
namespace {

std::string Tmp(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}
std::string Runfile(const std::string& path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/tpx/", path);
}

TEST(ConsolidateCheckpoint, PythonReadsTheTp1Parameters) {
  // Save at TP=2.
  testing::RunOnRanks(2, [](testing::RankContext& ctx) {
    auto ps = parallel::ParallelState::Create(ctx.comm, 2);
    auto net = TinyNet::Create(ctx.comm, 5);
    ASSERT_TRUE(ps.ok() && net.ok());
    auto saved = SaveShardedState(**ps, Tmp("ckpt"), *(*net)->ShardedState(), {.step = 7});
    ASSERT_TRUE(saved.ok()) << saved.status();
  });
  // The TP=1 model's parameters, as raw bytes.
  testing::RunOnRanks(1, [](testing::RankContext& ctx) {
    auto net = TinyNet::Create(ctx.comm, 5);
    ASSERT_TRUE(net.ok());
    auto state = (*net)->ShardedState();
    ASSERT_TRUE(state.ok());
    for (const ShardedTensor& t : *state) {
      FILE* f = std::fopen(Tmp(t.name + ".bin").c_str(), "wb");
      ASSERT_NE(f, nullptr);
      ASSERT_EQ(std::fwrite(t.local.raw_data(), 1, t.local.nbytes(), f), t.local.nbytes());
      std::fclose(f);
    }
  });
  const std::string out = Tmp("full.safetensors");
  ASSERT_EQ(std::system(absl::StrCat(Runfile("tools/consolidate_checkpoint"), " --checkpoint=",
                                     Tmp("ckpt"), " --output=", out).c_str()),
            0);
  const std::map<std::string, std::vector<int64_t>> checks = {
      {"qkv.weight", {36, 12}}, {"qkv.bias", {36}}, {"proj.weight", {12, 36}},
      {"proj.bias", {12}},      {"emb.weight", {24, 12}}, {"fc2.weight", {12, 24}}};
  for (const auto& [name, shape] : checks) {
    const std::string cmd =
        absl::StrCat("/usr/bin/python3 ", Runfile("tools/read_safetensors.py"), " ", out, " ", name,
                     " F32 ", absl::StrJoin(shape, ","), " ", Tmp(name + ".bin"));
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
}

}  // namespace
}  // namespace tpx::sharded_state
