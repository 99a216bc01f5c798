// Vocab-parallel cross entropy, forward + backward, on logits [tokens, vocab] f32.
//
//   bazel run -c opt //bench:cross_entropy -- [--tokens=2048] [--vocab=32000] [--reps=7]
//
// Configurations: TP=1 (this process, --threads threads over tokens) and TP=2
// (two forked ranks over the UCX plugin, one thread each), each with the
// gradient written to a new buffer and in place into the logits. One JSON line
// per configuration:
//   {"bench":"cross_entropy","tp":2,"in_place":false,"tokens":2048,"vocab":32000,"step_ms":..}
// step_ms: median over --reps timed steps (after one warm-up) of
// forward + backward; with TP=2 the maximum over the ranks of their medians.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "comm/init.h"
#include "core/autograd/engine.h"
#include "core/gemm.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "launch/local_job.h"
#include "loss/cross_entropy.h"

ABSL_FLAG(int64_t, tokens, 2048, "tokens (s * b)");
ABSL_FLAG(int64_t, vocab, 32000, "global vocabulary size");
ABSL_FLAG(int, reps, 7, "timed steps per configuration");
ABSL_FLAG(int, threads, 2, "threads over tokens at TP=1");
ABSL_FLAG(int, only_tp, 0, "run only this TP size (1 or 2); 0 runs both");

namespace tpx {
namespace {

// Median seconds of forward + backward on this rank's logits shard.
absl::StatusOr<double> TimeSteps(comm::Communicator* tp, int64_t tokens, int64_t vocab,
                                 bool in_place, int threads, int reps) {
  const int rank = tp != nullptr ? tp->rank() : 0;
  const int size = tp != nullptr ? tp->size() : 1;
  const int64_t v_local = ops::SplitSizes(vocab, size)[rank];
  std::mt19937 gen(1234 + rank);
  std::normal_distribution<float> nd(0.f, 2.f);
  TPX_ASSIGN_OR_RETURN(Tensor pristine, Tensor::Empty({tokens, v_local}));
  float* p = pristine.data<float>();
  for (int64_t i = 0; i < pristine.numel(); ++i) p[i] = nd(gen);
  std::vector<int64_t> target(tokens);
  std::mt19937 tgen(99);  // same targets on every rank
  for (int64_t& t : target) t = static_cast<int64_t>(tgen() % vocab);
  TPX_ASSIGN_OR_RETURN(Tensor target_t, Tensor::FromVector(target, {tokens}));
  TPX_ASSIGN_OR_RETURN(Tensor ones, Tensor::Ones({tokens}));
  TPX_ASSIGN_OR_RETURN(Tensor work, pristine.Clone());
  loss::CrossEntropyOptions opts;
  opts.vocab_size = vocab;
  opts.in_place_grad = in_place;
  SetGemmThreads(threads);  // the loss kernels split tokens over these
  std::vector<double> times, fwd;
  for (int r = 0; r <= reps; ++r) {
    if (in_place) std::memcpy(work.raw_data(), pristine.raw_data(), pristine.nbytes());
    if (tp != nullptr) TPX_RETURN_IF_ERROR(tp->Barrier().Wait());
    const auto start = std::chrono::steady_clock::now();
    {
      Variable logits(work, /*requires_grad=*/true);
      TPX_ASSIGN_OR_RETURN(Variable loss, loss::VocabParallelCrossEntropy(logits, target_t, tp, opts));
      fwd.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      TPX_ASSIGN_OR_RETURN(std::vector<Tensor> g, Grad({loss}, {ones}, {logits}));
      if (!g[0].defined()) return absl::InternalError("no logits gradient");
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r > 0) times.push_back(s);  // r == 0 warms up
  }
  std::sort(times.begin(), times.end());
  std::sort(fwd.begin(), fwd.end());
  if (std::getenv("TPX_BENCH_VERBOSE") != nullptr) {
    std::fprintf(stderr, "rank %d: forward median %.2f ms\n", rank, fwd[fwd.size() / 2] * 1e3);
  }
  return times[times.size() / 2];
}

void Print(int tp, bool in_place, int64_t tokens, int64_t vocab, double seconds) {
  std::printf(
      "{\"bench\":\"cross_entropy\",\"tp\":%d,\"in_place\":%s,\"tokens\":%lld,\"vocab\":%lld,"
      "\"step_ms\":%.2f}\n",
      tp, in_place ? "true" : "false", static_cast<long long>(tokens),
      static_cast<long long>(vocab), seconds * 1e3);
  std::fflush(stdout);
}

// A rank of the TP=2 run (launch::RunLocalRanks forks them); 0 on success.
int RunRank(int64_t tokens, int64_t vocab, int reps) {
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "cross_entropy bench: %s\n", s.ToString().c_str());
    return 1;
  };
  comm::InitOptions init;
  init.backend = "ucx";
  absl::StatusOr<std::unique_ptr<comm::Communicator>> tp = comm::Init(init);
  if (!tp.ok()) return fail(tp.status());
  for (bool in_place : {false, true}) {
    auto t = TimeSteps(tp->get(), tokens, vocab, in_place, /*threads=*/1, reps);
    if (!t.ok()) return fail(t.status());
    float w = static_cast<float>(*t);
    absl::Status s = (*tp)->AllReduce(&w, 1, DType::kF32, comm::ReduceOp::kMax).Wait();
    if (!s.ok()) return fail(s);
    if ((*tp)->rank() == 0) Print((*tp)->size(), in_place, tokens, vocab, w);
  }
  return 0;
}

int Main() {
  const int64_t tokens = absl::GetFlag(FLAGS_tokens), vocab = absl::GetFlag(FLAGS_vocab);
  const int reps = std::max(1, absl::GetFlag(FLAGS_reps));
  const int only_tp = absl::GetFlag(FLAGS_only_tp);
  // TP=2 first: the ranks fork before this process starts any thread.
  if (only_tp != 1 &&
      launch::RunLocalRanks(2, [&] { return RunRank(tokens, vocab, reps); }) != 0) {
    return 1;
  }
  for (bool in_place : {false, true}) {
    if (only_tp == 2) break;
    auto t = TimeSteps(nullptr, tokens, vocab, in_place, absl::GetFlag(FLAGS_threads), reps);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
      return 1;
    }
    Print(1, in_place, tokens, vocab, *t);
  }
  return 0;
}

}  // namespace
}  // namespace tpx

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tpx::Main();
}
