// Every bad checkpoint gives an error on every rank that names the file or
// tensor, and leaves the model exactly as it was: a missing directory or
// shard file, a truncated file, a bad header length, a header that is not
// JSON, a tensor missing, a shape or dtype that differs, another format
// version. Both load modes (straight into the model, staged in host memory).
// Two real ranks (TP=2) over UCX.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/parallel_state.h"
#include "sharded_state/load.h"
#include "sharded_state/save.h"
#include "sharded_state/tiny_net_testutil.h"
#include "testing/multiprocess.h"

namespace tpx::sharded_state {
namespace {

namespace fs = std::filesystem;

bool BitEqual(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

void Overwrite(const std::string& path, uint64_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void Replace(const std::string& path, const std::string& from, const std::string& to) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  std::ofstream(path, std::ios::trunc) << text;
}

struct Case {
  const char* name;
  // Damages a copy of the good checkpoint directory.
  std::function<void(const std::string& dir)> damage;
  absl::StatusCode code;
  std::vector<std::string> message_parts;  // each must appear in the error
  // Loads a state that differs from the model instead (missing tensor...).
  std::function<void(std::vector<ShardedTensor>&)> change_targets = nullptr;
};

TEST(LoadErrors, EveryRankReportsAndTheModelIsUnchanged) {
  testing::RunOptions options;
  options.comm_timeout = absl::Seconds(30);
  testing::RunOnRanks(2, [](testing::RankContext& ctx) {
    const std::string root = std::string(std::getenv("TEST_TMPDIR")) + "/errors";
    auto ps = parallel::ParallelState::Create(ctx.comm, 2);
    ASSERT_TRUE(ps.ok());
    auto saved = TinyNet::Create(ctx.comm, 1);
    ASSERT_TRUE(saved.ok());
    auto saved_state = (*saved)->ShardedState();
    ASSERT_TRUE(saved_state.ok());
    auto good = SaveShardedState(**ps, root + "/good", *saved_state, {.tag = "ckpt"});
    ASSERT_TRUE(good.ok()) << good.status();

    const std::string f1 = "tp01-of-02.safetensors";
    Tensor bf16_bias = *Tensor::Zeros({TinyNet::kHidden}, DType::kBF16);
    const std::vector<Case> cases = {
        {"missing directory",
         [](const std::string& d) { fs::remove_all(d); },
         absl::StatusCode::kNotFound,
         {"no checkpoint at"}},
        {"missing shard file",
         [&](const std::string& d) { fs::remove(d + "/" + f1); },
         absl::StatusCode::kNotFound,
         {f1, "does not exist"}},
        {"truncated file",
         [&](const std::string& d) {
           fs::resize_file(d + "/" + f1, fs::file_size(d + "/" + f1) - 40);
         },
         absl::StatusCode::kDataLoss,
         {f1, "truncated"}},
        {"bad header length",
         [&](const std::string& d) { Overwrite(d + "/" + f1, 0, std::string(8, '\x7f')); },
         absl::StatusCode::kDataLoss,
         {f1, "header length"}},
        {"header not JSON",
         [&](const std::string& d) { Overwrite(d + "/" + f1, 8, "]]"); },
         absl::StatusCode::kDataLoss,
         {f1, "not a JSON object"}},
        {"metadata not JSON",
         [&](const std::string& d) { Overwrite(d + "/tpx_checkpoint.json", 0, "]"); },
         absl::StatusCode::kDataLoss,
         {"tpx_checkpoint.json"}},
        {"format version",
         [&](const std::string& d) {
           Replace(d + "/tpx_checkpoint.json", "\"format_version\":1", "\"format_version\":99");
         },
         absl::StatusCode::kFailedPrecondition,
         {"tpx_checkpoint.json", "format_version 99"}},
        {"tensor missing from a file",
         [&](const std::string& d) { Replace(d + "/" + f1, "\"fc2.weight\"", "\"fc9.weight\""); },
         absl::StatusCode::kNotFound,
         {f1, "fc2.weight"}},
        {"tensor missing from the checkpoint",
         nullptr,
         absl::StatusCode::kNotFound,
         {"no tensor 'extra.weight'"},
         [](std::vector<ShardedTensor>& t) {
           t.push_back(*ShardedTensor::Replicated("extra.weight", *Tensor::Zeros({2}), 0));
         }},
        {"shape differs",
         nullptr,
         absl::StatusCode::kInvalidArgument,
         {"'emb.weight'", "F32[24, 12]", "F32[48, 12]"},
         [](std::vector<ShardedTensor>& t) { t[0].global_shape[0] = 48; }},
        {"dtype differs",
         nullptr,
         absl::StatusCode::kInvalidArgument,
         {"'fc2.bias'", "BF16[12]"},
         [&](std::vector<ShardedTensor>& t) {
           t.back() = *ShardedTensor::Replicated("fc2.bias", bf16_bias, ctx.rank);
         }},
    };
    for (size_t k = 0; k < 2 * cases.size(); ++k) {
      const size_t i = k % cases.size();
      const Case& c = cases[i];
      const LoadOptions load{.stage_in_host_memory = k >= cases.size()};
      SCOPED_TRACE(::testing::Message() << c.name << (load.stage_in_host_memory ? ", staged" : ""));
      const std::string dir = root + "/case" + std::to_string(k);
      if (ctx.rank == 0) {
        fs::copy(*good, dir, fs::copy_options::recursive);
        if (c.damage) c.damage(dir);
      }
      ASSERT_TRUE(ctx.comm.Barrier().Wait().ok());
      auto net = TinyNet::Create(ctx.comm, 2);
      ASSERT_TRUE(net.ok());
      auto targets = (*net)->ShardedState();
      ASSERT_TRUE(targets.ok());
      const std::vector<Tensor> before = Snapshot(*targets);
      if (c.change_targets) c.change_targets(*targets);
      auto loaded = LoadShardedState(ctx.comm, dir, *targets, load);
      ASSERT_FALSE(loaded.ok());
      EXPECT_EQ(loaded.status().code(), c.code) << loaded.status();
      for (const std::string& part : c.message_parts) {
        EXPECT_NE(loaded.status().message().find(part), std::string::npos)
            << "'" << part << "' not in: " << loaded.status();
      }
      auto after = (*net)->ShardedState();
      ASSERT_TRUE(after.ok());
      for (size_t t = 0; t < before.size(); ++t) {
        EXPECT_TRUE(BitEqual((*after)[t].local, before[t])) << (*after)[t].name << " changed";
      }
    }
  }, options);
}

}  // namespace
}  // namespace tpx::sharded_state
