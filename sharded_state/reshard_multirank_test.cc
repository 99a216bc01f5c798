// Save at every TP size 1..4 (and TP 2 x DP 2), load at every TP size 1..4
// (and with data-parallel replicas): the loaded shards are bit-equal to the
// slices of the saved model's full weights, and the forward output equals
// the single-process (TP=1) output of the saved model (bit for bit at TP=1).
// Real ranks over UCX; one 4-rank job, sub-communicators from Split give the
// smaller groups.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/compare_testutil.h"
#include "gtest/gtest.h"
#include "parallel/parallel_state.h"
#include "sharded_state/load.h"
#include "sharded_state/save.h"
#include "sharded_state/tiny_net_testutil.h"
#include "testing/multiprocess.h"

namespace tpx::sharded_state {
namespace {

constexpr uint64_t kSavedSeed = 11;
constexpr uint64_t kOtherSeed = 500;
// Outputs reach |30|; TP > 1 sums the row-parallel partials in another
// order (f32, ~1e-7 relative per add). Weights themselves are checked bit for bit.
constexpr double kOutAtol = 1e-4;

bool BitEqual(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

std::string Root() { return std::string(std::getenv("TEST_TMPDIR")) + "/reshard"; }

TEST(Reshard, SaveAtEveryTpLoadAtEveryOther) {
  testing::RunOptions options;
  options.comm_timeout = absl::Seconds(60);
  testing::RunOnRanks(4, [](testing::RankContext& ctx) {
    // Reference: the saved model at TP=1 in this process, its full weights
    // (TP=1 shards are the full tensors) and output.
    auto solo = ctx.comm.Split(ctx.rank, 0);
    ASSERT_TRUE(solo.ok()) << solo.status();
    auto ref = TinyNet::Create(**solo, kSavedSeed);
    ASSERT_TRUE(ref.ok()) << ref.status();
    auto ref_state = (*ref)->ShardedState();
    ASSERT_TRUE(ref_state.ok());
    std::map<std::string, Tensor> full;
    for (const ShardedTensor& t : *ref_state) full[t.name] = t.local;
    auto ref_out = (*ref)->Forward();
    ASSERT_TRUE(ref_out.ok()) << ref_out.status();

    // Saves: TP a = 1..4 on ranks [0, a), and TP 2 x DP 2 on all four.
    struct Saved { std::string name; int tp; int world; };
    std::vector<Saved> saves = {{"tp1", 1, 1}, {"tp2", 2, 2}, {"tp3", 3, 3}, {"tp4", 4, 4},
                                {"tp2dp2", 2, 4}};
    for (const Saved& s : saves) {
      auto group = ctx.comm.Split(ctx.rank < s.world ? 0 : -1, ctx.rank);
      ASSERT_TRUE(group.ok()) << group.status();
      if (*group == nullptr) continue;
      auto ps = parallel::ParallelState::Create(**group, s.tp);
      ASSERT_TRUE(ps.ok()) << ps.status();
      auto net = TinyNet::Create((*ps)->tp(), kSavedSeed);
      ASSERT_TRUE(net.ok()) << net.status();
      auto out = (*net)->Forward();
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_TRUE(TensorsClose(*out, *ref_out, 1e-5, kOutAtol)) << s.name;
      auto state = (*net)->ShardedState();
      ASSERT_TRUE(state.ok());
      auto dir = SaveShardedState(**ps, Root() + "/" + s.name, *state, {.step = s.tp});
      ASSERT_TRUE(dir.ok()) << dir.status();
      EXPECT_EQ(*dir, Root() + "/" + s.name + "/step-0000000" + std::to_string(s.tp));
    }
    // Loads: every save into TP b = 1..4 (and TP 2 x DP 2, TP 1 x DP 4), from another seed.
    const std::vector<std::pair<int, int>> loads = {{1, 1}, {2, 2}, {3, 3}, {4, 4}, {2, 4}, {1, 4}};
    for (const auto& [b, world] : loads) {
      auto group = ctx.comm.Split(ctx.rank < world ? 0 : -1, ctx.rank);
      ASSERT_TRUE(group.ok()) << group.status();
      if (*group == nullptr) continue;
      auto ps = parallel::ParallelState::Create(**group, b);
      ASSERT_TRUE(ps.ok()) << ps.status();
      for (const Saved& s : saves) {
        SCOPED_TRACE(::testing::Message() << "saved " << s.name << ", loaded at TP " << b
                                          << " x DP " << world / b);
        auto net = TinyNet::Create((*ps)->tp(), kOtherSeed);
        ASSERT_TRUE(net.ok()) << net.status();
        auto state = (*net)->ShardedState();
        ASSERT_TRUE(state.ok());
        auto before = (*net)->Forward();
        ASSERT_TRUE(before.ok());
        ASSERT_FALSE(TensorsClose(*before, *ref_out, 1e-3, 1e-3)) << "seeds must differ";
        // Both load modes: straight into the model, and staged in host memory.
        const LoadOptions load{.stage_in_host_memory = s.tp % 2 == 1};
        auto meta = LoadShardedState((*ps)->world(), Root() + "/" + s.name, *state, load);
        ASSERT_TRUE(meta.ok()) << meta.status();
        EXPECT_EQ(meta->tp_size, s.tp);
        EXPECT_EQ(meta->step, s.tp);
        for (const ShardedTensor& t : *state) {
          auto expected = ExtractShard(t, full.at(t.name));
          ASSERT_TRUE(expected.ok()) << expected.status();
          EXPECT_TRUE(BitEqual(t.local, *expected)) << t.name;
        }
        auto out = (*net)->Forward();
        ASSERT_TRUE(out.ok()) << out.status();
        EXPECT_TRUE(TensorsClose(*out, *ref_out, 1e-5, kOutAtol));
        // At TP=1 the math is the reference's: bit-equal.
        if (b == 1) {
          EXPECT_TRUE(BitEqual(*out, *ref_out));
        }
      }
    }
  }, options);
}

// The fused QKV weight (stride 3): a TP=2 save holds, in rank r's file, the q,
// k and v rows of r's heads; loaded at TP=1 it is the global [q | k | v]
// weight of a TP=1 model, and at TP=4 each rank again gets its heads' rows.
TEST(Reshard, StridedQkvRoundTrip) {
  testing::RunOnRanks(2, [](testing::RankContext& ctx) {
    const int64_t h = 8;  // 4 heads of 2 at TP 1, 2, 4
    Tensor full = RandomTensor({3 * h, 4}, DType::kF32, 3);
    auto qkv =
        layers::ColumnParallelLinear::Create(ctx.comm, 4, 3 * h, {.bias = false, .stride = 3});
    ASSERT_TRUE(qkv.ok());
    ASSERT_TRUE(qkv->SetFullWeights(full).ok());
    // Rank r's rows: q rows [r*h/2, +h/2), then k, then v.
    const Tensor& w = qkv->weight().value();
    for (int part = 0; part < 3; ++part) {
      auto mine = w.Narrow(0, part * h / 2, h / 2);
      auto global = full.Narrow(0, part * h + ctx.rank * h / 2, h / 2);
      ASSERT_TRUE(mine.ok() && global.ok());
      EXPECT_TRUE(BitEqual(*mine->Contiguous(), *global->Contiguous())) << "part " << part;
    }
    auto ps = parallel::ParallelState::Create(ctx.comm, 2);
    ASSERT_TRUE(ps.ok());
    auto state = qkv->ShardedState("qkv.");
    ASSERT_TRUE(state.ok());
    const std::string root = std::string(std::getenv("TEST_TMPDIR")) + "/qkv";
    ASSERT_TRUE(SaveShardedState(**ps, root, *state).ok());
    auto solo = ctx.comm.Split(ctx.rank, 0);
    ASSERT_TRUE(solo.ok());
    auto one = layers::ColumnParallelLinear::Create(**solo, 4, 3 * h, {.bias = false, .stride = 3});
    ASSERT_TRUE(one.ok());
    auto one_state = one->ShardedState("qkv.");
    ASSERT_TRUE(one_state.ok());
    ASSERT_TRUE(LoadShardedStateLocal(root, *one_state).ok());
    EXPECT_TRUE(BitEqual(one->weight().value(), full));
  });
}

}  // namespace
}  // namespace tpx::sharded_state
