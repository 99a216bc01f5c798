// Multi-rank tests of the parallel layers at TP = 1..4: outputs and every
// gradient (input, weight, bias, main_grad over two micro-batches) against a
// single-process reference built from tpx::ag ops on the full (TP=1) weights;
// a bf16 Column -> Row MLP with f32 main_grad against the f32 reference on
// the same bf16-rounded values.
//
// Each case is one layer configuration at one TP size, named after it
// (e.g. Layers/ColumnParallelLinearTest.MatchesTheFullLinear/Tp2_Stride1_SequenceParallel),
// and reads as a usage example: build the layer with those options, feed it
// this rank's shard, compare with the matching slice of the full result.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/autograd/engine.h"
#include "core/autograd/ops.h"
#include "core/compare_testutil.h"
#include "core/ops.h"
#include "gtest/gtest.h"
#include "layers/init.h"
#include "layers/parallel_linear.h"
#include "layers/vocab_parallel_embedding.h"
#include "parallel/shard_comm.h"
#include "testing/multiprocess.h"

namespace tpx::layers {
namespace {

using Sizes = std::vector<int64_t>;
using tpx::testing::RankContext;
using tpx::testing::RunOnRanks;

constexpr double kTol = 1e-4;
constexpr uint64_t kSeed = 77;

struct Ref {
  Tensor y, dx, dw, db;
};

// y = x W^T + b and its gradients for upstream dy, from tpx::ag ops.
Ref Reference(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy) {
  Variable xv(x, true), wv(w, true), bv(b, true);
  Variable y = *ag::Linear(xv, wv, bv);
  EXPECT_TRUE(Backward(y, dy).ok());
  return Ref{y.value(), xv.grad(), wv.grad(), bv.grad()};
}

Tensor Piece(const Tensor& t, int64_t dim, int64_t parts, int r) {
  return *parallel::PieceAlongDim(t, dim, Sizes(static_cast<size_t>(parts), t.size(dim) / parts),
                                  r);
}
// Rows of a stride-s shard: pieces r, r + n, ... of size extent / (n s).
Tensor StridedShard(const Tensor& t, int64_t dim, int n, int64_t stride, int r) {
  std::vector<Tensor> pieces;
  const int64_t p = t.size(dim) / (n * stride);
  for (int64_t k = 0; k < stride; ++k) pieces.push_back(*t.Narrow(dim, (k * n + r) * p, p));
  return *ops::Concat(pieces, dim);
}
Tensor Master(const Shape& shape) {
  Tensor m;
  EXPECT_TRUE(InitMasterWeightAndSplit(shape, 0, 1, 0, 1, NormalInit(0.5), kSeed, DType::kF32, &m)
                  .ok());
  return m;
}
Tensor SumOverRanks(comm::Communicator& c, const Tensor& t) {
  return *parallel::AllReduceSum(c, t);
}

// Test names read as the configuration, e.g. "Tp3_Stride2_SequenceParallel".
std::string Flag(bool on, absl::string_view name) { return on ? absl::StrCat("_", name) : ""; }
std::string TpName(const ::testing::TestParamInfo<int>& info) {
  return absl::StrCat("Tp", info.param);
}
struct CaseName {
  template <typename Case>
  std::string operator()(const ::testing::TestParamInfo<Case>& info) const {
    return info.param.Name();
  }
};

// A TP size with or without sequence parallelism.
struct TpSpCase {
  int tp = 1;
  bool sequence_parallel = false;
  std::string Name() const {
    return absl::StrCat("Tp", tp, Flag(sequence_parallel, "SequenceParallel"));
  }
};
std::vector<TpSpCase> TpSpCases(std::vector<int> tps) {
  std::vector<TpSpCase> cases;
  for (int tp : tps) {
    for (bool sp : {false, true}) cases.push_back({tp, sp});
  }
  return cases;
}

// ColumnParallelLinear: 12 tokens, 6 -> 24 features (24 divides by every TP
// size and stride here), weights from the TP=1 master weight of kSeed.
constexpr int64_t kColumnTokens = 12, kColumnIn = 6, kColumnOut = 24;
Tensor ColumnMaster() { return Master({kColumnOut, kColumnIn}); }
Tensor ColumnBias() { return RandomTensor({kColumnOut}, DType::kF32, 9); }

struct ColumnCase {
  int tp = 1;
  int64_t stride = 1;
  bool sequence_parallel = false;
  bool gather_output = false;
  bool skip_bias_add = false;
  std::string Name() const {
    return absl::StrCat("Tp", tp, "_Stride", stride, Flag(sequence_parallel, "SequenceParallel"),
                        Flag(gather_output, "GatherOutput"), Flag(skip_bias_add, "SkipBiasAdd"));
  }
};
std::vector<ColumnCase> ColumnCases() {
  std::vector<ColumnCase> cases;
  for (int tp : {1, 2, 3, 4}) {
    for (int64_t stride : {1, 2}) {
      for (bool sp : {false, true}) {
        for (bool gather : {false, true}) {
          // Gathering interleaved (stride > 1) shards gives a permuted output;
          // gather_output is meant for stride 1.
          if ((sp || stride > 1) && gather) continue;
          for (bool skip_bias_add : {false, true}) {
            cases.push_back({tp, stride, sp, gather, skip_bias_add});
          }
        }
      }
    }
  }
  return cases;
}

class ColumnParallelLinearTest : public ::testing::TestWithParam<ColumnCase> {};

// Output and input, weight and bias gradients against the full linear:
// rank r holds the output-feature blocks r, r + n, ... (`stride` blocks of
// out / (n * stride) rows of W), and under sequence parallelism its block of
// the input's tokens.
TEST_P(ColumnParallelLinearTest, MatchesTheFullLinear) {
  const ColumnCase c = GetParam();
  RunOnRanks(c.tp, [c](RankContext& ctx) {
    comm::Communicator& tp = ctx.comm;
    const int n = ctx.size, r = ctx.rank;
    const int64_t T = kColumnTokens, in = kColumnIn, out = kColumnOut;
    const Tensor W = ColumnMaster();
    const Tensor B = ColumnBias();
    const bool sp = c.sequence_parallel, gather = c.gather_output;
    const int64_t stride = c.stride;
    ColumnParallelLinearOptions o;
    o.sequence_parallel = sp;
    o.gather_output = gather;
    o.skip_bias_add = c.skip_bias_add;
    o.stride = stride;
    o.init_method = NormalInit(0.5);
    o.seed = kSeed;
    auto layer = ColumnParallelLinear::Create(tp, in, out, o);
    ASSERT_TRUE(layer.ok()) << layer.status();
    const Tensor b_shard = StridedShard(B, 0, n, stride, r);
    ASSERT_TRUE(layer->bias().value().CopyFrom(b_shard).ok());
    EXPECT_TRUE(TensorsClose(layer->weight().value(), StridedShard(W, 0, n, stride, r), 0, 0));
    const Tensor X = RandomTensor({T, in}, DType::kF32, 10);
    const Tensor DY = RandomTensor({T, out}, DType::kF32, 11);
    const Tensor b_ref = c.skip_bias_add ? *Tensor::Zeros({out}) : B;
    Ref ref = Reference(X, W, b_ref, DY);
    Variable x(sp ? Piece(X, 0, n, r) : X, true);
    auto y = layer->Forward(x);
    ASSERT_TRUE(y.ok()) << y.status();
    Tensor expect_y = gather ? ref.y : StridedShard(ref.y, 1, n, stride, r);
    EXPECT_TRUE(TensorsClose(y->output.value(), expect_y, kTol, kTol));
    EXPECT_EQ(y->output_bias.defined(), c.skip_bias_add);
    Tensor dy = gather ? DY : StridedShard(DY, 1, n, stride, r);
    ASSERT_TRUE(Backward(y->output, dy).ok());
    EXPECT_TRUE(TensorsClose(x.grad(), sp ? Piece(ref.dx, 0, n, r) : ref.dx, kTol, kTol));
    EXPECT_TRUE(TensorsClose(layer->weight().grad(), StridedShard(ref.dw, 0, n, stride, r), kTol,
                             kTol));
    if (c.skip_bias_add) {
      EXPECT_FALSE(layer->bias().grad().defined());
    } else {
      EXPECT_TRUE(
          TensorsClose(layer->bias().grad(), StridedShard(ref.db, 0, n, stride, r), kTol, kTol));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Layers, ColumnParallelLinearTest, ::testing::ValuesIn(ColumnCases()),
                         CaseName());

// main_grad fusion: weight gradients of two micro-batches accumulate into
// the weight's main_grad buffer (none into grad), with sequence parallelism
// re-gathering the input in backward or saving the gathered copy.
struct ColumnFusionCase {
  int tp = 1;
  bool sequence_parallel = false;
  bool regather_input_in_backward = true;
  std::string Name() const {
    return absl::StrCat("Tp", tp, Flag(sequence_parallel, "SequenceParallel"),
                        Flag(!regather_input_in_backward, "SaveGatheredInput"));
  }
};
std::vector<ColumnFusionCase> ColumnFusionCases() {
  std::vector<ColumnFusionCase> cases;
  for (int tp : {1, 2, 3, 4}) {
    cases.push_back({tp, false, true});
    cases.push_back({tp, true, true});
    cases.push_back({tp, true, false});
  }
  return cases;
}

class ColumnParallelLinearFusionTest : public ::testing::TestWithParam<ColumnFusionCase> {};

TEST_P(ColumnParallelLinearFusionTest, TwoMicroBatchesAccumulateIntoMainGrad) {
  const ColumnFusionCase c = GetParam();
  RunOnRanks(c.tp, [c](RankContext& ctx) {
    comm::Communicator& tp = ctx.comm;
    const int n = ctx.size, r = ctx.rank;
    const int64_t T = kColumnTokens, in = kColumnIn, out = kColumnOut;
    const Tensor W = ColumnMaster();
    const bool sp = c.sequence_parallel;
    ColumnParallelLinearOptions o;
    o.sequence_parallel = sp;
    o.regather_input_in_backward = c.regather_input_in_backward;
    o.gradient_accumulation_fusion = true;
    o.init_method = NormalInit(0.5);
    o.seed = kSeed;
    auto layer = ColumnParallelLinear::Create(tp, in, out, o);
    ASSERT_TRUE(layer.ok());
    Variable w = layer->weight();
    // Without a main_grad buffer the fusion is refused up front.
    EXPECT_FALSE(layer->Forward(Variable(*Tensor::Zeros({T / n, in}), true)).ok());
    w.set_main_grad(*Tensor::Zeros(w.shape()));
    Tensor expect_main = *Tensor::Zeros({out, in});
    Tensor expect_db = *Tensor::Zeros({out});
    for (int mb = 0; mb < 2; ++mb) {
      const Tensor X = RandomTensor({T, in}, DType::kF32, 20 + mb);
      const Tensor DY = RandomTensor({T, out}, DType::kF32, 30 + mb);
      Ref ref = Reference(X, W, *Tensor::Zeros({out}), DY);
      ASSERT_TRUE(ops::AddInPlace(expect_main, ref.dw).ok());
      ASSERT_TRUE(ops::AddInPlace(expect_db, ref.db).ok());
      Variable x(sp ? Piece(X, 0, n, r) : X, true);
      auto y = layer->Forward(x);
      ASSERT_TRUE(y.ok()) << y.status();
      ASSERT_TRUE(Backward(y->output, Piece(DY, 1, n, r)).ok());
      EXPECT_TRUE(TensorsClose(x.grad(), sp ? Piece(ref.dx, 0, n, r) : ref.dx, kTol, kTol));
    }
    EXPECT_FALSE(w.grad().defined());
    EXPECT_TRUE(TensorsClose(w.main_grad(), Piece(expect_main, 0, n, r), kTol, kTol));
    EXPECT_TRUE(TensorsClose(layer->bias().grad(), Piece(expect_db, 0, n, r), kTol, kTol));
  });
}

INSTANTIATE_TEST_SUITE_P(Layers, ColumnParallelLinearFusionTest,
                         ::testing::ValuesIn(ColumnFusionCases()), CaseName());

class ColumnParallelLinearAtTp : public ::testing::TestWithParam<int> {};

// A frozen weight given at call time (no weight parameter, no bias), with a
// per-call gather_output override: no gradient reaches the frozen weight.
TEST_P(ColumnParallelLinearAtTp, FrozenWeightGivenAtCallTime) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    comm::Communicator& tp = ctx.comm;
    const int n = ctx.size, r = ctx.rank;
    const int64_t T = kColumnTokens, in = kColumnIn, out = kColumnOut;
    const Tensor W = ColumnMaster();
    ColumnParallelLinearOptions o;
    o.skip_weight_param_allocation = true;
    o.bias = false;
    auto layer = ColumnParallelLinear::Create(tp, in, out, o);
    ASSERT_TRUE(layer.ok());
    EXPECT_FALSE(layer->weight().defined());
    EXPECT_FALSE(layer->Forward(Variable(*Tensor::Zeros({T, in}), true)).ok());
    Variable frozen(Piece(W, 0, n, r), false);
    const Tensor X = RandomTensor({T, in}, DType::kF32, 40);
    const Tensor DY = RandomTensor({T, out}, DType::kF32, 41);
    Ref ref = Reference(X, W, *Tensor::Zeros({out}), DY);
    Variable x(X, true);
    auto y = layer->Forward(x, frozen, /*gather_output=*/true);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(TensorsClose(y->output.value(), ref.y, kTol, kTol));
    ASSERT_TRUE(Backward(y->output, DY).ok());
    EXPECT_TRUE(TensorsClose(x.grad(), ref.dx, kTol, kTol));
    EXPECT_FALSE(frozen.grad().defined());
    EXPECT_FALSE(layer->Forward(x, Variable(*Tensor::Zeros({out + 1, in}), true)).ok());
  });
}

// disable_grad_reduce: each rank keeps its partial input gradient; their
// sum is the full one.
TEST_P(ColumnParallelLinearAtTp, DisableGradReduceKeepsPartialInputGradients) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    comm::Communicator& tp = ctx.comm;
    const int n = ctx.size, r = ctx.rank;
    const int64_t T = kColumnTokens, in = kColumnIn, out = kColumnOut;
    const Tensor W = ColumnMaster();
    const Tensor X = RandomTensor({T, in}, DType::kF32, 40);
    const Tensor DY = RandomTensor({T, out}, DType::kF32, 41);
    Ref ref = Reference(X, W, *Tensor::Zeros({out}), DY);
    ColumnParallelLinearOptions o;
    o.disable_grad_reduce = true;
    o.init_method = NormalInit(0.5);
    o.seed = kSeed;
    auto local = ColumnParallelLinear::Create(tp, in, out, o);
    ASSERT_TRUE(local.ok());
    Variable x(X, true);
    auto y = local->Forward(x);
    ASSERT_TRUE(y.ok());
    ASSERT_TRUE(Backward(y->output, Piece(DY, 1, n, r)).ok());
    Tensor partial = *ops::Matmul(Piece(DY, 1, n, r), Piece(W, 0, n, r));
    EXPECT_TRUE(TensorsClose(x.grad(), partial, kTol, kTol));
    EXPECT_TRUE(TensorsClose(SumOverRanks(tp, x.grad()), ref.dx, kTol, kTol));
  });
}

INSTANTIATE_TEST_SUITE_P(Layers, ColumnParallelLinearAtTp, ::testing::Values(1, 2, 3, 4), TpName);

// With communication (TP > 1): the dgrad collective is posted before the
// wgrad GEMM and waited after it.
class ColumnParallelLinearOverlapTest : public ::testing::TestWithParam<TpSpCase> {};

TEST_P(ColumnParallelLinearOverlapTest, DgradCommunicationSpansTheWgradGemm) {
  const TpSpCase c = GetParam();
  RunOnRanks(c.tp, [c](RankContext& ctx) {
    comm::Communicator& tp = ctx.comm;
    const int n = ctx.size;
    const int64_t T = kColumnTokens, in = kColumnIn, out = kColumnOut;
    const bool sp = c.sequence_parallel;
    LinearBackwardTimeline tl;
    ColumnParallelLinearOptions o;
    o.sequence_parallel = sp;
    o.timeline = &tl;
    auto layer = ColumnParallelLinear::Create(tp, in, out, o);
    ASSERT_TRUE(layer.ok());
    Variable x(RandomTensor({sp ? T / n : T, in}, DType::kF32, 45), true);
    auto y = layer->Forward(x);
    ASSERT_TRUE(y.ok());
    ASSERT_TRUE(Backward(y->output, RandomTensor({T, out / n}, DType::kF32, 46)).ok());
    EXPECT_GT(tl.dgrad_comm_posted_ns, 0);
    EXPECT_LE(tl.dgrad_comm_posted_ns, tl.wgrad_gemm_start_ns);
    EXPECT_LE(tl.wgrad_gemm_start_ns, tl.wgrad_gemm_end_ns);
    EXPECT_LE(tl.wgrad_gemm_end_ns, tl.dgrad_comm_waited_ns);
  });
}

INSTANTIATE_TEST_SUITE_P(Layers, ColumnParallelLinearOverlapTest,
                         ::testing::ValuesIn(TpSpCases({2, 3, 4})), CaseName());

// Output features that do not divide by the TP size are refused.
class ColumnParallelLinearMultiRank : public ::testing::TestWithParam<int> {};

TEST_P(ColumnParallelLinearMultiRank, OutputSizeNotDivisibleByTpIsRefused) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    EXPECT_FALSE(ColumnParallelLinear::Create(ctx.comm, kColumnIn, 5, {}).ok());
  });
}

INSTANTIATE_TEST_SUITE_P(Layers, ColumnParallelLinearMultiRank, ::testing::Values(2, 3, 4),
                         TpName);

// nanotron's modes on the bare linear function (LinearWithAsyncCommunication
// on shards the caller holds), with an uneven token split (7 tokens).
struct LinearCommCase {
  int tp = 1;
  TpMode mode = TpMode::kAllReduce;
  bool regather_input_in_backward = true;
  std::string Name() const {
    return absl::StrCat("Tp", tp, mode == TpMode::kAllReduce ? "_AllReduce" : "_ReduceScatter",
                        Flag(!regather_input_in_backward, "SaveGatheredInput"));
  }
};
std::vector<LinearCommCase> LinearCommCases() {
  std::vector<LinearCommCase> cases;
  for (int tp : {1, 2, 3, 4}) {
    for (TpMode mode : {TpMode::kAllReduce, TpMode::kReduceScatter}) {
      for (bool regather : {true, false}) cases.push_back({tp, mode, regather});
    }
  }
  return cases;
}

class LinearWithAsyncCommunicationTest : public ::testing::TestWithParam<LinearCommCase> {};

TEST_P(LinearWithAsyncCommunicationTest, UnevenTokensMatchTheFullLinear) {
  const LinearCommCase c = GetParam();
  RunOnRanks(c.tp, [c](RankContext& ctx) {
    comm::Communicator& tp = ctx.comm;
    const int n = ctx.size, r = ctx.rank;
    const int64_t in = kColumnIn, out = kColumnOut;
    const Tensor W = ColumnMaster();
    const Tensor B = ColumnBias();
    const int64_t T7 = 7;
    const Sizes tokens = ops::SplitSizes(T7, n);
    const Tensor X = RandomTensor({T7, in}, DType::kF32, 80);
    const Tensor DY = RandomTensor({T7, out}, DType::kF32, 81);
    Ref ref = Reference(X, W, B, DY);
    const bool rs = c.mode == TpMode::kReduceScatter;
    LinearCommOptions o;
    o.tp = &tp;
    o.mode = c.mode;
    o.sequence_split_sizes = rs ? tokens : Sizes{};
    o.regather_input_in_backward = c.regather_input_in_backward;
    Variable x(rs ? *parallel::PieceAlongDim(X, 0, tokens, r) : X, true);
    Variable w(Piece(W, 0, n, r), true), b(Piece(B, 0, n, r), true);
    auto y = LinearWithAsyncCommunication(x, w, b, o);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(TensorsClose(y->value(), Piece(ref.y, 1, n, r), kTol, kTol));
    ASSERT_TRUE(Backward(*y, Piece(DY, 1, n, r)).ok());
    EXPECT_TRUE(TensorsClose(x.grad(), rs ? *parallel::PieceAlongDim(ref.dx, 0, tokens, r) : ref.dx,
                             kTol, kTol));
    EXPECT_TRUE(TensorsClose(w.grad(), Piece(ref.dw, 0, n, r), kTol, kTol));
    EXPECT_TRUE(TensorsClose(b.grad(), Piece(ref.db, 0, n, r), kTol, kTol));
  });
}

INSTANTIATE_TEST_SUITE_P(Layers, LinearWithAsyncCommunicationTest,
                         ::testing::ValuesIn(LinearCommCases()), CaseName());

// RowParallelLinear: 12 tokens, 24 -> 6 features; rank r holds the r-th
// block of input features. The input comes split by the caller
// (input_is_parallel) or is split by the layer; under sequence parallelism
// the output is reduce-scattered into blocks of tokens.
constexpr int64_t kRowTokens = 12, kRowIn = 24, kRowOut = 6;

struct RowCase {
  int tp = 1;
  bool input_is_parallel = false;
  bool sequence_parallel = false;
  bool skip_bias_add = false;
  bool gradient_accumulation_fusion = false;
  std::string Name() const {
    return absl::StrCat("Tp", tp, Flag(input_is_parallel, "InputIsParallel"),
                        Flag(sequence_parallel, "SequenceParallel"),
                        Flag(skip_bias_add, "SkipBiasAdd"),
                        Flag(gradient_accumulation_fusion, "MainGradFusion"));
  }
};
std::vector<RowCase> RowCases() {
  std::vector<RowCase> cases;
  for (int tp : {1, 2, 3, 4}) {
    for (bool input_is_parallel : {false, true}) {
      for (bool sp : {false, true}) {
        if (sp && !input_is_parallel) continue;
        for (bool skip_bias_add : {false, true}) {
          for (bool fusion : {false, true}) {
            cases.push_back({tp, input_is_parallel, sp, skip_bias_add, fusion});
          }
        }
      }
    }
  }
  return cases;
}

class RowParallelLinearTest : public ::testing::TestWithParam<RowCase> {};

// Output and gradients against the full linear; with main_grad fusion over
// two micro-batches whose weight gradients accumulate in main_grad.
TEST_P(RowParallelLinearTest, MatchesTheFullLinear) {
  const RowCase c = GetParam();
  RunOnRanks(c.tp, [c](RankContext& ctx) {
    comm::Communicator& tp = ctx.comm;
    const int n = ctx.size, r = ctx.rank;
    const int64_t T = kRowTokens, in = kRowIn, out = kRowOut;
    const Tensor W = Master({out, in});
    const Tensor B = RandomTensor({out}, DType::kF32, 12);
    const bool sp = c.sequence_parallel, fusion = c.gradient_accumulation_fusion;
    RowParallelLinearOptions o;
    o.input_is_parallel = c.input_is_parallel;
    o.sequence_parallel = sp;
    o.skip_bias_add = c.skip_bias_add;
    o.gradient_accumulation_fusion = fusion;
    o.init_method = NormalInit(0.5);
    o.seed = kSeed;
    auto layer = RowParallelLinear::Create(tp, in, out, o);
    ASSERT_TRUE(layer.ok()) << layer.status();
    ASSERT_TRUE(layer->bias().value().CopyFrom(B).ok());
    EXPECT_TRUE(TensorsClose(layer->weight().value(), Piece(W, 1, n, r), 0, 0));
    Variable w = layer->weight();
    if (fusion) w.set_main_grad(*Tensor::Zeros(w.shape()));
    Tensor sum_dw = *Tensor::Zeros({out, in});
    for (int mb = 0; mb < (fusion ? 2 : 1); ++mb) {
      const Tensor X = RandomTensor({T, in}, DType::kF32, 50 + mb);
      const Tensor DY = RandomTensor({T, out}, DType::kF32, 60 + mb);
      Ref ref = Reference(X, W, c.skip_bias_add ? *Tensor::Zeros({out}) : B, DY);
      ASSERT_TRUE(ops::AddInPlace(sum_dw, ref.dw).ok());
      Variable x(c.input_is_parallel ? Piece(X, 1, n, r) : X, true);
      auto y = layer->Forward(x);
      ASSERT_TRUE(y.ok()) << y.status();
      EXPECT_TRUE(
          TensorsClose(y->output.value(), sp ? Piece(ref.y, 0, n, r) : ref.y, kTol, kTol));
      EXPECT_EQ(y->output_bias.defined(), c.skip_bias_add);
      ASSERT_TRUE(Backward(y->output, sp ? Piece(DY, 0, n, r) : DY).ok());
      EXPECT_TRUE(TensorsClose(x.grad(), c.input_is_parallel ? Piece(ref.dx, 1, n, r) : ref.dx,
                               kTol, kTol));
      if (!c.skip_bias_add) {
        // Under SP the replicated bias gets this rank's tokens' share.
        Tensor db = sp ? SumOverRanks(tp, layer->bias().grad()) : layer->bias().grad();
        EXPECT_TRUE(TensorsClose(db, ref.db, kTol, kTol));
        Variable bias = layer->bias();
        bias.ClearGrad();
      }
    }
    if (fusion) {
      EXPECT_FALSE(w.grad().defined());
      EXPECT_TRUE(TensorsClose(w.main_grad(), Piece(sum_dw, 1, n, r), kTol, kTol));
    } else {
      EXPECT_TRUE(TensorsClose(w.grad(), Piece(sum_dw, 1, n, r), kTol, kTol));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Layers, RowParallelLinearTest, ::testing::ValuesIn(RowCases()),
                         CaseName());

class RowParallelLinearAtTp : public ::testing::TestWithParam<int> {};

// Sequence parallelism scatters the layer's output: its input must already
// be split (input_is_parallel).
TEST_P(RowParallelLinearAtTp, SequenceParallelNeedsParallelInput) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    RowParallelLinearOptions bad;
    bad.sequence_parallel = true;
    EXPECT_FALSE(RowParallelLinear::Create(ctx.comm, kRowIn, kRowOut, bad).ok());
  });
}

INSTANTIATE_TEST_SUITE_P(Layers, RowParallelLinearAtTp, ::testing::Values(1, 2, 3, 4), TpName);

// VocabParallelEmbedding: a 12 x 5 table, rank r holding its block of the
// vocabulary; 2 x 12 ids.
constexpr int64_t kVocab = 12, kEmbeddingDim = 5;

class VocabParallelEmbeddingTest : public ::testing::TestWithParam<TpSpCase> {};

// Output and table gradient against IndexSelect on the full table; under
// sequence parallelism the output is [seq, batch, dim], split along seq.
TEST_P(VocabParallelEmbeddingTest, MatchesIndexSelectOnTheFullTable) {
  const TpSpCase c = GetParam();
  RunOnRanks(c.tp, [c](RankContext& ctx) {
    comm::Communicator& tp = ctx.comm;
    const int n = ctx.size, r = ctx.rank;
    const int64_t vocab = kVocab, dim = kEmbeddingDim, batch = 2, seq = 12;
    const Tensor W = Master({vocab, dim});
    std::vector<int64_t> id_values;
    for (int64_t i = 0; i < batch * seq; ++i) id_values.push_back((i * 7 + 3) % vocab);
    const Tensor ids = *Tensor::FromVector<int64_t>(id_values, {batch, seq});
    const Tensor DY = RandomTensor({batch, seq, dim}, DType::kF32, 70);
    Variable wref(W, true);
    Variable yref = *ag::Reshape(*ag::IndexSelect(wref, 0, *ids.Reshape({batch * seq})),
                                 {batch, seq, dim});
    ASSERT_TRUE(Backward(yref, DY).ok());
    const bool sp = c.sequence_parallel;
    VocabParallelEmbeddingOptions o;
    o.sequence_parallel = sp;
    o.init_method = NormalInit(0.5);
    o.seed = kSeed;
    auto emb = VocabParallelEmbedding::Create(tp, vocab, dim, o);
    ASSERT_TRUE(emb.ok()) << emb.status();
    EXPECT_EQ(emb->vocab_range().first, r * vocab / n);
    auto y = emb->Forward(ids);
    ASSERT_TRUE(y.ok()) << y.status();
    Tensor expect = yref.value(), dy = DY;
    if (sp) {
      expect = Piece(*yref.value().Transpose(0, 1), 0, n, r);
      dy = Piece(*DY.Transpose(0, 1), 0, n, r);
    }
    EXPECT_TRUE(TensorsClose(y->value(), expect, kTol, kTol));
    ASSERT_TRUE(Backward(*y, dy).ok());
    EXPECT_TRUE(TensorsClose(emb->weight().grad(), Piece(wref.grad(), 0, n, r), kTol, kTol));
  });
}

INSTANTIATE_TEST_SUITE_P(Layers, VocabParallelEmbeddingTest,
                         ::testing::ValuesIn(TpSpCases({1, 2, 3, 4})), CaseName());

class VocabParallelEmbeddingAtTp : public ::testing::TestWithParam<int> {};

// An id outside the vocabulary is an error naming its position; a
// vocabulary that does not divide by TP=4 is refused.
TEST_P(VocabParallelEmbeddingAtTp, BadIdsAndVocabSizesAreErrors) {
  RunOnRanks(GetParam(), [](RankContext& ctx) {
    auto emb = VocabParallelEmbedding::Create(ctx.comm, kVocab, kEmbeddingDim, {});
    ASSERT_TRUE(emb.ok());
    Tensor bad = *Tensor::FromVector<int64_t>({0, 1, 2, 3, kVocab, 4}, {2, 3});
    auto y = emb->Forward(bad);
    ASSERT_FALSE(y.ok());
    EXPECT_NE(y.status().message().find("position [1, 1]"), absl::string_view::npos)
        << y.status();
    if (ctx.size == 4) {
      EXPECT_FALSE(VocabParallelEmbedding::Create(ctx.comm, 10, kEmbeddingDim, {}).ok());
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Layers, VocabParallelEmbeddingAtTp, ::testing::Values(1, 2, 3, 4),
                         TpName);

// bf16 parameters and activations (mixed precision): GEMMs accumulate in
// f32, weight gradients go into f32 main_grad. Tolerance: a few bf16 ulps
// (2^-8 relative) of values of order 1, after two GEMMs and a bf16 reduction.
class Bf16MlpTest : public ::testing::TestWithParam<TpSpCase> {};

TEST_P(Bf16MlpTest, ColumnRowMlpWithF32MainGradMatchesF32Reference) {
  const TpSpCase c = GetParam();
  RunOnRanks(c.tp, [c](RankContext& ctx) {
    comm::Communicator& tp = ctx.comm;
    const int n = ctx.size, r = ctx.rank;
    const int64_t T = 12, h = 8, f = 16;
    constexpr double kBf16Tol = 3e-2;
    auto bf16_valued = [](const Tensor& t) { return *t.To(DType::kBF16)->To(DType::kF32); };
    const Tensor W1 = bf16_valued(Master({f, h})), W2 = bf16_valued(Master({h, f}));
    const Tensor X = RandomTensor({T, h}, DType::kBF16, 20);
    const Tensor DY = RandomTensor({T, h}, DType::kBF16, 21);
    Variable xr(*X.To(DType::kF32), true), w1r(W1, true), w2r(W2, true);
    Variable yr = *ag::Linear(*ag::Linear(xr, w1r), w2r);
    ASSERT_TRUE(Backward(yr, *DY.To(DType::kF32)).ok());
    const bool sp = c.sequence_parallel;
    auto fc1 = ColumnParallelLinear::Create(
        tp, h, f,
        {.sequence_parallel = sp, .gradient_accumulation_fusion = true,
         .params_dtype = DType::kBF16});
    auto fc2 = RowParallelLinear::Create(
        tp, f, h,
        {.input_is_parallel = true, .sequence_parallel = sp, .gradient_accumulation_fusion = true,
         .params_dtype = DType::kBF16});
    ASSERT_TRUE(fc1.ok() && fc2.ok());
    ASSERT_TRUE(fc1->SetFullWeights(*W1.To(DType::kBF16)).ok());
    ASSERT_TRUE(fc2->SetFullWeights(*W2.To(DType::kBF16)).ok());
    for (const Variable* w : {&fc1->weight(), &fc2->weight()}) {
      ASSERT_EQ(w->dtype(), DType::kBF16);
      Variable handle = *w;
      handle.set_main_grad(*Tensor::Zeros(w->shape(), DType::kF32));
    }
    Variable x(sp ? Piece(X, 0, n, r) : X, true);
    auto a = fc1->Forward(x);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->output.dtype(), DType::kBF16);
    auto y = fc2->Forward(a->output);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(y->output.dtype(), DType::kBF16);
    EXPECT_TRUE(TensorsClose(*y->output.value().To(DType::kF32),
                             sp ? Piece(yr.value(), 0, n, r) : yr.value(), kBf16Tol, kBf16Tol));
    ASSERT_TRUE(Backward(y->output, sp ? Piece(DY, 0, n, r) : DY).ok());
    EXPECT_EQ(x.grad().dtype(), DType::kBF16);
    EXPECT_TRUE(TensorsClose(*x.grad().To(DType::kF32), sp ? Piece(xr.grad(), 0, n, r) : xr.grad(),
                             kBf16Tol, kBf16Tol));
    EXPECT_EQ(fc1->weight().main_grad().dtype(), DType::kF32);
    EXPECT_TRUE(TensorsClose(fc1->weight().main_grad(), Piece(w1r.grad(), 0, n, r), kBf16Tol,
                             kBf16Tol));
    EXPECT_TRUE(TensorsClose(fc2->weight().main_grad(), Piece(w2r.grad(), 1, n, r), kBf16Tol,
                             kBf16Tol));
  });
}

INSTANTIATE_TEST_SUITE_P(Layers, Bf16MlpTest, ::testing::ValuesIn(TpSpCases({1, 2, 4})),
                         CaseName());

TEST(Layers, MasterWeightShardsAreSlicesOfTheTp1Weight) {
  Tensor master;
  ASSERT_TRUE(InitMasterWeightAndSplit({8, 3}, 0, 1, 0, 1, NormalInit(1.0), 5, DType::kF32,
                                       &master)
                  .ok());
  for (int n : {1, 2, 4}) {
    for (int64_t stride : {1, 2}) {
      for (int r = 0; r < n; ++r) {
        auto shard = InitMasterWeightAndSplit({8, 3}, 0, stride, r, n, NormalInit(1.0), 5,
                                              DType::kF32);
        ASSERT_TRUE(shard.ok());
        EXPECT_TRUE(TensorsClose(*shard, StridedShard(master, 0, n, stride, r), 0, 0));
      }
    }
  }
  auto bad = InitMasterWeightAndSplit({8, 3}, 1, 1, 0, 2, NormalInit(1.0), 5, DType::kF32);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not divisible"), absl::string_view::npos);
  ParamAttributes sharded{true, 0, 1, false}, replicated;
  EXPECT_TRUE(ParamIsNotTensorParallelDuplicate(sharded, 3));
  EXPECT_TRUE(ParamIsNotTensorParallelDuplicate(replicated, 0));
  EXPECT_FALSE(ParamIsNotTensorParallelDuplicate(replicated, 1));
}

}  // namespace
}  // namespace tpx::layers
