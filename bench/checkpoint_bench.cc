// Sharded checkpoint save and load bandwidth (sharded_state/) of a model of
// --layers x (ColumnParallelLinear h->4h + RowParallelLinear 4h->h), f32, at
// TP=1 and TP=2 (forked ranks over UCX), beside the raw bandwidth of the same
// directory: one file of the same size written (with fsync) and read back
// (best of three, measured before each TP size).
// One JSON line per (op, tp):
//   {"bench":"checkpoint","op":"save","tp":2,"staged":false,"bytes":...,"seconds":...,"gbps":...,
//    "raw_gbps":...}
// Loads run twice: straight into the model, and staged in host memory
// (LoadOptions::stage_in_host_memory, "staged":true).
// seconds: slowest rank, from a barrier to the end of the collective call
// (save: files fsynced and committed; load: every byte in the model). The
// files are read right after being written, so loads and the raw read come
// mostly from the page cache, alike.
//
//   bazel run -c opt //bench:checkpoint -- [--dir=/tmp/tpx_ckpt_bench] [--layers=7] [--hidden=1024]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "layers/parallel_linear.h"
#include "parallel/parallel_state.h"
#include "sharded_state/load.h"
#include "sharded_state/safetensors.h"
#include "sharded_state/save.h"
#include "testing/multiprocess.h"

ABSL_FLAG(std::string, dir, "/tmp/tpx_checkpoint_bench", "Directory to write into (emptied).");
ABSL_FLAG(int64_t, layers, 7, "Column + row layer pairs (7 x 32 MB at hidden 1024).");
ABSL_FLAG(int64_t, hidden, 1024, "Hidden size h (the MLP is h -> 4h -> h).");

namespace tpx {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Raw {
  double write_gbps = 0, read_gbps = 0;
};

// One file of `bytes` written with fsync and read back with pread.
Raw MeasureRawOnce(const std::string& dir, uint64_t bytes) {
  const std::string path = dir + "/raw.bin";
  std::vector<char> buffer(bytes, 1);
  Raw raw;
  auto t0 = Clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || !sharded_state::WriteAll(fd, buffer.data(), bytes, path).ok() || ::fsync(fd) != 0) {
    std::fprintf(stderr, "checkpoint bench: cannot write %s\n", path.c_str());
    std::exit(1);
  }
  ::close(fd);
  raw.write_gbps = static_cast<double>(bytes) / Since(t0) / 1e9;
  t0 = Clock::now();
  fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0 || !sharded_state::PreadAll(fd, buffer.data(), bytes, 0, path).ok()) {
    std::fprintf(stderr, "checkpoint bench: cannot read %s\n", path.c_str());
    std::exit(1);
  }
  ::close(fd);
  raw.read_gbps = static_cast<double>(bytes) / Since(t0) / 1e9;
  std::filesystem::remove(path);
  return raw;
}

// Best of three: the machine may be busy with other work.
Raw MeasureRaw(const std::string& dir, uint64_t bytes) {
  Raw best;
  for (int i = 0; i < 3; ++i) {
    const Raw r = MeasureRawOnce(dir, bytes);
    best.write_gbps = std::max(best.write_gbps, r.write_gbps);
    best.read_gbps = std::max(best.read_gbps, r.read_gbps);
  }
  return best;
}

struct Model {
  std::vector<std::unique_ptr<layers::ColumnParallelLinear>> up;
  std::vector<std::unique_ptr<layers::RowParallelLinear>> down;
  std::vector<sharded_state::ShardedTensor> state;
};

Model Build(comm::Communicator& tp, int64_t n, int64_t h, double value) {
  Model m;
  for (int64_t l = 0; l < n; ++l) {
    auto up = layers::ColumnParallelLinear::Create(tp, h, 4 * h,
                                                   {.init_method = layers::ConstantInit(value)});
    auto down = layers::RowParallelLinear::Create(tp, 4 * h, h,
                                                  {.input_is_parallel = true,
                                                   .init_method = layers::ConstantInit(value)});
    if (!up.ok() || !down.ok()) std::exit(1);
    m.up.push_back(std::make_unique<layers::ColumnParallelLinear>(std::move(*up)));
    m.down.push_back(std::make_unique<layers::RowParallelLinear>(std::move(*down)));
    for (auto s : {m.up.back()->ShardedState(absl::StrCat("l", l, ".up.")),
                   m.down.back()->ShardedState(absl::StrCat("l", l, ".down."))}) {
      if (!s.ok()) std::exit(1);
      for (auto& t : *s) m.state.push_back(std::move(t));
    }
  }
  return m;
}

void RunTp(testing::RankContext& ctx, const std::string& root, uint64_t bytes, const Raw& raw) {
  const int64_t n = absl::GetFlag(FLAGS_layers), h = absl::GetFlag(FLAGS_hidden);
  auto ps = parallel::ParallelState::Create(ctx.comm, ctx.size);
  if (!ps.ok()) std::exit(1);
  auto timed = [&](const char* op, bool staged, double raw_gbps,
                   const std::function<absl::Status()>& f) {
    if (!ctx.comm.Barrier().Wait().ok()) std::exit(1);
    const auto t0 = Clock::now();
    const absl::Status s = f();
    if (!s.ok()) {
      std::fprintf(stderr, "checkpoint bench: %s\n", s.ToString().c_str());
      std::exit(1);
    }
    float seconds = static_cast<float>(Since(t0));
    if (!ctx.comm.AllReduce(&seconds, 1, DType::kF32, comm::ReduceOp::kMax).Wait().ok()) {
      std::exit(1);
    }
    if (ctx.rank == 0) {
      std::printf("{\"bench\":\"checkpoint\",\"op\":\"%s\",\"tp\":%d,\"staged\":%s,"
                  "\"bytes\":%llu,\"seconds\":%.4f,\"gbps\":%.3f,\"raw_gbps\":%.3f}\n",
                  op, ctx.size, staged ? "true" : "false", static_cast<unsigned long long>(bytes),
                  seconds,
                  static_cast<double>(bytes) / seconds / 1e9, raw_gbps);
      std::fflush(stdout);
    }
  };
  {
    Model saved = Build(ctx.comm, n, h, 0.5);
    timed("save", false, raw.write_gbps, [&] {
      return sharded_state::SaveShardedState(**ps, root, saved.state).status();
    });
  }
  for (bool staged : {false, true}) {
    Model loaded = Build(ctx.comm, n, h, 0.0);
    timed("load", staged, raw.read_gbps, [&] {
      return sharded_state::LoadShardedState(ctx.comm, root, loaded.state,
                                             {.stage_in_host_memory = staged})
          .status();
    });
    if (loaded.state[0].local.ToVector<float>()[0] != 0.5f) {
      std::fprintf(stderr, "checkpoint bench: loaded values are wrong\n");
      std::exit(1);
    }
  }
}

}  // namespace
}  // namespace tpx

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string dir = absl::GetFlag(FLAGS_dir);
  const int64_t n = absl::GetFlag(FLAGS_layers), h = absl::GetFlag(FLAGS_hidden);
  // Weights and biases of every layer pair, f32.
  const uint64_t bytes = static_cast<uint64_t>(n * (2 * 4 * h * h + 4 * h + h)) * 4;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  tpx::testing::RunOptions options;
  options.comm_timeout = absl::Seconds(120);
  options.deadline = absl::Seconds(600);
  for (int tp : {1, 2}) {
    const tpx::Raw raw = tpx::MeasureRaw(dir, bytes);
    const std::string root = absl::StrCat(dir, "/tp", tp);
    auto outcomes = tpx::testing::RunOnRanks(
        tp, [&](tpx::testing::RankContext& ctx) { tpx::RunTp(ctx, root, bytes, raw); }, options);
    std::filesystem::remove_all(root);
    for (const auto& o : outcomes) {
      if (o.exit_code != 0 || o.signal != 0 || o.timed_out) {
        std::fprintf(stderr, "checkpoint bench: a rank failed (exit %d, signal %d)\n",
                     o.exit_code, o.signal);
        return 1;
      }
    }
  }
  return 0;
}
