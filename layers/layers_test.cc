// Multi-rank tests of the parallel layers at TP = 1..4: outputs and every
// gradient (input, weight, bias, main_grad over two micro-batches) against a
// single-process reference built from tpx::ag ops on the full (TP=1) weights;
// a bf16 Column -> Row MLP with f32 main_grad against the f32 reference on
// the same bf16-rounded values.
#include <vector>

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

void ColumnBody(RankContext& ctx) {
  comm::Communicator& tp = ctx.comm;
  const int n = ctx.size, r = ctx.rank;
  const int64_t T = 12, in = 6, out = 24;
  const Tensor W = Master({out, in});
  const Tensor B = RandomTensor({out}, DType::kF32, 9);

  for (int64_t stride : {1, 2}) {
    for (bool sp : {false, true}) {
      for (bool gather : {false, true}) {
        // Gathering interleaved (stride > 1) shards gives a permuted output;
        // gather_output is meant for stride 1.
        if ((sp || stride > 1) && gather) continue;
        for (bool skip_bias_add : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "stride " << stride << " sp " << sp
                                            << " gather " << gather << " skip_bias_add "
                                            << skip_bias_add);
          ColumnParallelLinearOptions o;
          o.sequence_parallel = sp;
          o.gather_output = gather;
          o.skip_bias_add = skip_bias_add;
          o.stride = stride;
          o.init_method = NormalInit(0.5);
          o.seed = kSeed;
          auto layer = ColumnParallelLinear::Create(tp, in, out, o);
          ASSERT_TRUE(layer.ok()) << layer.status();
          const Tensor b_shard = StridedShard(B, 0, n, stride, r);
          ASSERT_TRUE(layer->bias().value().CopyFrom(b_shard).ok());
          EXPECT_TRUE(TensorsClose(layer->weight().value(), StridedShard(W, 0, n, stride, r), 0,
                                   0));
          const Tensor X = RandomTensor({T, in}, DType::kF32, 10);
          const Tensor DY = RandomTensor({T, out}, DType::kF32, 11);
          const Tensor b_ref = skip_bias_add ? *Tensor::Zeros({out}) : B;
          Ref ref = Reference(X, W, b_ref, DY);
          Variable x(sp ? Piece(X, 0, n, r) : X, true);
          auto y = layer->Forward(x);
          ASSERT_TRUE(y.ok()) << y.status();
          Tensor expect_y = gather ? ref.y : StridedShard(ref.y, 1, n, stride, r);
          EXPECT_TRUE(TensorsClose(y->output.value(), expect_y, kTol, kTol));
          EXPECT_EQ(y->output_bias.defined(), skip_bias_add);
          Tensor dy = gather ? DY : StridedShard(DY, 1, n, stride, r);
          ASSERT_TRUE(Backward(y->output, dy).ok());
          EXPECT_TRUE(TensorsClose(x.grad(), sp ? Piece(ref.dx, 0, n, r) : ref.dx, kTol, kTol));
          EXPECT_TRUE(TensorsClose(layer->weight().grad(), StridedShard(ref.dw, 0, n, stride, r),
                                   kTol, kTol));
          if (skip_bias_add) {
            EXPECT_FALSE(layer->bias().grad().defined());
          } else {
            EXPECT_TRUE(TensorsClose(layer->bias().grad(), StridedShard(ref.db, 0, n, stride, r),
                                     kTol, kTol));
          }
        }
      }
    }
  }

  // main_grad fusion over two micro-batches, SP with and without re-gather,
  // and the frozen-weight path.
  for (bool sp : {false, true}) {
    for (bool regather : {true, false}) {
      if (!sp && !regather) continue;
      SCOPED_TRACE(::testing::Message() << "fusion sp " << sp << " regather " << regather);
      ColumnParallelLinearOptions o;
      o.sequence_parallel = sp;
      o.regather_input_in_backward = regather;
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
    }
  }
  {
    SCOPED_TRACE("frozen weight, weight given at call time, disable_grad_reduce");
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
    // Per-call gather_output override.
    auto y = layer->Forward(x, frozen, /*gather_output=*/true);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(TensorsClose(y->output.value(), ref.y, kTol, kTol));
    ASSERT_TRUE(Backward(y->output, DY).ok());
    EXPECT_TRUE(TensorsClose(x.grad(), ref.dx, kTol, kTol));
    EXPECT_FALSE(frozen.grad().defined());
    EXPECT_FALSE(layer->Forward(x, Variable(*Tensor::Zeros({out + 1, in}), true)).ok());

    ColumnParallelLinearOptions o2;
    o2.disable_grad_reduce = true;
    o2.init_method = NormalInit(0.5);
    o2.seed = kSeed;
    auto local = ColumnParallelLinear::Create(tp, in, out, o2);
    ASSERT_TRUE(local.ok());
    Variable x2(X, true);
    auto y2 = local->Forward(x2);
    ASSERT_TRUE(y2.ok());
    ASSERT_TRUE(Backward(y2->output, Piece(DY, 1, n, r)).ok());
    // Each rank keeps its partial input gradient; their sum is the full one.
    Tensor partial = *ops::Matmul(Piece(DY, 1, n, r), Piece(W, 0, n, r));
    EXPECT_TRUE(TensorsClose(x2.grad(), partial, kTol, kTol));
    EXPECT_TRUE(TensorsClose(SumOverRanks(tp, x2.grad()), ref.dx, kTol, kTol));
  }
  if (n > 1) {
    // The dgrad collective is posted before the wgrad GEMM and waited after it.
    for (bool sp : {false, true}) {
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
    }
  }
  {
    // nanotron's modes on the bare linear function, uneven token split (7).
    const int64_t T7 = 7;
    const Sizes tokens = ops::SplitSizes(T7, n);
    const Tensor X = RandomTensor({T7, in}, DType::kF32, 80);
    const Tensor DY = RandomTensor({T7, out}, DType::kF32, 81);
    Ref ref = Reference(X, W, B, DY);
    for (TpMode mode : {TpMode::kAllReduce, TpMode::kReduceScatter}) {
      for (bool regather : {true, false}) {
        SCOPED_TRACE(::testing::Message() << "mode " << static_cast<int>(mode) << " regather "
                                          << regather);
        const bool rs = mode == TpMode::kReduceScatter;
        LinearCommOptions o;
        o.tp = &tp;
        o.mode = mode;
        o.sequence_split_sizes = rs ? tokens : Sizes{};
        o.regather_input_in_backward = regather;
        Variable x(rs ? *parallel::PieceAlongDim(X, 0, tokens, r) : X, true);
        Variable w(Piece(W, 0, n, r), true), b(Piece(B, 0, n, r), true);
        auto y = LinearWithAsyncCommunication(x, w, b, o);
        ASSERT_TRUE(y.ok()) << y.status();
        EXPECT_TRUE(TensorsClose(y->value(), Piece(ref.y, 1, n, r), kTol, kTol));
        ASSERT_TRUE(Backward(*y, Piece(DY, 1, n, r)).ok());
        EXPECT_TRUE(TensorsClose(x.grad(), rs ? *parallel::PieceAlongDim(ref.dx, 0, tokens, r)
                                              : ref.dx,
                                 kTol, kTol));
        EXPECT_TRUE(TensorsClose(w.grad(), Piece(ref.dw, 0, n, r), kTol, kTol));
        EXPECT_TRUE(TensorsClose(b.grad(), Piece(ref.db, 0, n, r), kTol, kTol));
      }
    }
  }
  if (n > 1 && (out / 5) * 5 != out) {
    EXPECT_FALSE(ColumnParallelLinear::Create(tp, in, 5, {}).ok());
  }
}

void RowBody(RankContext& ctx) {
  comm::Communicator& tp = ctx.comm;
  const int n = ctx.size, r = ctx.rank;
  const int64_t T = 12, in = 24, out = 6;
  const Tensor W = Master({out, in});
  const Tensor B = RandomTensor({out}, DType::kF32, 12);
  for (bool input_is_parallel : {false, true}) {
    for (bool sp : {false, true}) {
      if (sp && !input_is_parallel) continue;
      for (bool skip_bias_add : {false, true}) {
        for (bool fusion : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "input_is_parallel " << input_is_parallel
                                            << " sp " << sp << " skip_bias_add "
                                            << skip_bias_add << " fusion " << fusion);
          RowParallelLinearOptions o;
          o.input_is_parallel = input_is_parallel;
          o.sequence_parallel = sp;
          o.skip_bias_add = skip_bias_add;
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
            Ref ref = Reference(X, W, skip_bias_add ? *Tensor::Zeros({out}) : B, DY);
            ASSERT_TRUE(ops::AddInPlace(sum_dw, ref.dw).ok());
            Variable x(input_is_parallel ? Piece(X, 1, n, r) : X, true);
            auto y = layer->Forward(x);
            ASSERT_TRUE(y.ok()) << y.status();
            EXPECT_TRUE(TensorsClose(y->output.value(), sp ? Piece(ref.y, 0, n, r) : ref.y, kTol,
                                     kTol));
            EXPECT_EQ(y->output_bias.defined(), skip_bias_add);
            ASSERT_TRUE(Backward(y->output, sp ? Piece(DY, 0, n, r) : DY).ok());
            EXPECT_TRUE(TensorsClose(x.grad(), input_is_parallel ? Piece(ref.dx, 1, n, r) : ref.dx,
                                     kTol, kTol));
            if (!skip_bias_add) {
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
        }
      }
    }
  }
  RowParallelLinearOptions bad;
  bad.sequence_parallel = true;
  EXPECT_FALSE(RowParallelLinear::Create(tp, in, out, bad).ok());
}

void EmbeddingBody(RankContext& ctx) {
  comm::Communicator& tp = ctx.comm;
  const int n = ctx.size, r = ctx.rank;
  const int64_t vocab = 12, dim = 5, batch = 2, seq = 12;
  const Tensor W = Master({vocab, dim});
  std::vector<int64_t> id_values;
  for (int64_t i = 0; i < batch * seq; ++i) id_values.push_back((i * 7 + 3) % vocab);
  const Tensor ids = *Tensor::FromVector<int64_t>(id_values, {batch, seq});
  const Tensor DY = RandomTensor({batch, seq, dim}, DType::kF32, 70);
  // Reference: IndexSelect on the full table.
  Variable wref(W, true);
  Variable yref = *ag::Reshape(*ag::IndexSelect(wref, 0, *ids.Reshape({batch * seq})),
                               {batch, seq, dim});
  ASSERT_TRUE(Backward(yref, DY).ok());
  for (bool sp : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "sp " << sp);
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
  }
  auto emb = VocabParallelEmbedding::Create(tp, vocab, dim, {});
  ASSERT_TRUE(emb.ok());
  Tensor bad = *Tensor::FromVector<int64_t>({0, 1, 2, 3, vocab, 4}, {2, 3});
  auto y = emb->Forward(bad);
  ASSERT_FALSE(y.ok());
  EXPECT_NE(y.status().message().find("position [1, 1]"), absl::string_view::npos)
      << y.status();
  if (n == 4) {
    EXPECT_FALSE(VocabParallelEmbedding::Create(tp, 10, dim, {}).ok());
  }
}

// bf16 parameters and activations (mixed precision): GEMMs accumulate in
// f32, weight gradients go into f32 main_grad. Tolerance: a few bf16 ulps
// (2^-8 relative) of values of order 1, after two GEMMs and a bf16 reduction.
void Bf16MlpBody(RankContext& ctx) {
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
  for (bool sp : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "sp " << sp);
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
  }
}

TEST(Layers, ColumnParallelLinearMatchesReference) {
  for (int n : {1, 2, 3, 4}) {
    SCOPED_TRACE(n);
    RunOnRanks(n, ColumnBody);
  }
}

TEST(Layers, RowParallelLinearMatchesReference) {
  for (int n : {1, 2, 3, 4}) {
    SCOPED_TRACE(n);
    RunOnRanks(n, RowBody);
  }
}

TEST(Layers, Bf16ColumnRowMlpWithF32MainGradMatchesF32Reference) {
  for (int n : {1, 2, 4}) {
    SCOPED_TRACE(n);
    RunOnRanks(n, Bf16MlpBody);
  }
}

TEST(Layers, VocabParallelEmbeddingMatchesReference) {
  for (int n : {1, 2, 3, 4}) {
    SCOPED_TRACE(n);
    RunOnRanks(n, EmbeddingBody);
  }
}

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
