// Multi-rank tests of the inference layers at TP = 1..4 over UCX: each
// layer's output equals the training layer's forward (sequence parallel, on
// the same shared weights) and a single-process reference on the full
// weights; the fused reduce-scatter/add/norm/all-gather equals the unfused
// sequence, on the CPU kernel and on the core-op path, across calls with
// other row counts (the buffers are reused); bf16 runs the core-op path.
#include <vector>

#include "core/autograd/functional.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/ops.h"
#include "core/compare_testutil.h"
#include "core/ops.h"
#include "gtest/gtest.h"
#include "layers/inference_layernorm_column_parallel_linear.h"
#include "layers/inference_norm.h"
#include "layers/inference_row_parallel_linear.h"
#include "layers/init.h"
#include "layers/parallel_linear.h"
#include "parallel/shard_comm.h"
#include "testing/multiprocess.h"

namespace tpx::layers {
namespace {

using Sizes = std::vector<int64_t>;
using tpx::testing::RankContext;
using tpx::testing::RunOnRanks;

constexpr double kTol = 1e-4;
constexpr uint64_t kSeed = 91;
constexpr int64_t kBatch = 2;

Tensor Piece(const Tensor& t, int64_t dim, int64_t parts, int r) {
  return *parallel::PieceAlongDim(t, dim, Sizes(static_cast<size_t>(parts), t.size(dim) / parts),
                                  r);
}
Tensor Master(const Shape& shape, uint64_t seed) {
  Tensor m;
  EXPECT_TRUE(
      InitMasterWeightAndSplit(shape, 0, 1, 0, 1, NormalInit(0.5), seed, DType::kF32, &m).ok());
  return m;
}

// The norm written independently of the layers' kernels (ag / core ops).
Tensor ReferenceNorm(const InferenceNorm& norm, const Tensor& x) {
  if (norm.kind == NormKind::kLayerNorm) {
    return *ag::LayerNormForward(x, norm.weight, norm.bias, norm.eps, nullptr);
  }
  Tensor ms = *ops::Mean(*ops::Mul(x, x), -1, true);
  Tensor rms = *ops::Sqrt(*ops::AddScalar(ms, norm.eps));
  return *ops::Mul(*ops::Div(x, rms), norm.weight);
}

std::vector<InferenceNorm> Norms(int64_t h) {
  InferenceNorm rms{.kind = NormKind::kRmsNorm, .weight = RandomTensor({h}, DType::kF32, 3, 0.5f,
                                                                       1.5f)};
  InferenceNorm ln{.kind = NormKind::kLayerNorm,
                   .weight = RandomTensor({h}, DType::kF32, 4, 0.5f, 1.5f),
                   .bias = RandomTensor({h}, DType::kF32, 5)};
  InferenceNorm ln_ops = ln;
  ln_ops.cpu_kernel = false;
  InferenceNorm rms_ops = rms;
  rms_ops.cpu_kernel = false;
  return {rms, ln, rms_ops, ln_ops};
}

void ColumnBody(RankContext& ctx) {
  comm::Communicator& tp = ctx.comm;
  const int n = ctx.size, r = ctx.rank;
  const int64_t in = 8, out = 24;
  const Tensor W = Master({out, in}, kSeed);
  const Tensor B = RandomTensor({out}, DType::kF32, 9);
  ColumnParallelLinearOptions o{.sequence_parallel = true,
                                .init_method = NormalInit(0.5),
                                .seed = kSeed};
  auto trained = ColumnParallelLinear::Create(tp, in, out, o);
  ASSERT_TRUE(trained.ok()) << trained.status();
  ASSERT_TRUE(trained->bias().value().CopyFrom(Piece(B, 0, n, r)).ok());

  for (const InferenceNorm& norm : Norms(in)) {
    SCOPED_TRACE(::testing::Message() << "layernorm " << (norm.kind == NormKind::kLayerNorm)
                                      << " cpu_kernel " << norm.cpu_kernel);
    auto layer = InferenceLayerNormColumnParallelLinear::Create(tp, *trained, norm);
    ASSERT_TRUE(layer.ok()) << layer.status();
    // Two row counts: the gather buffer is reused and regrown.
    for (int64_t T : {12, 24}) {
      const Tensor X = RandomTensor({T, kBatch, in}, DType::kF32, 10 + T);
      const Tensor local = Piece(X, 0, n, r);
      auto y = layer->Forward(local);
      ASSERT_TRUE(y.ok()) << y.status();
      // Single-process reference: norm then the full GEMM, this rank's columns.
      const Tensor ref = *ops::Linear(ReferenceNorm(norm, X), W, B);
      EXPECT_TRUE(TensorsClose(*y, Piece(ref, 2, n, r), kTol, kTol));
      // The training layer's forward on the normalised local rows.
      NoGradGuard no_grad;
      auto train_y = trained->Forward(Variable(ReferenceNorm(norm, local)));
      ASSERT_TRUE(train_y.ok()) << train_y.status();
      EXPECT_TRUE(TensorsClose(*y, train_y->output.value(), kTol, kTol));
      // The fused mode's entry: already normalised and gathered.
      auto y2 = layer->ForwardNormalized(ReferenceNorm(norm, X));
      ASSERT_TRUE(y2.ok()) << y2.status();
      EXPECT_TRUE(TensorsClose(*y2, *y, kTol, kTol));
    }
  }
  // Weights are shared, not copied: an update of the trained weight shows.
  auto layer = InferenceLayerNormColumnParallelLinear::Create(tp, *trained, Norms(in)[0]);
  ASSERT_TRUE(layer.ok());
  const Tensor X = RandomTensor({4 * 3, kBatch, in}, DType::kF32, 50);
  ASSERT_TRUE(ops::ScaleInPlace(trained->weight().value(), 2.0).ok());
  const Tensor ref = *ops::Linear(ReferenceNorm(Norms(in)[0], X), *ops::Scale(W, 2.0), B);
  auto y = layer->Forward(Piece(X, 0, n, r));
  ASSERT_TRUE(y.ok());
  EXPECT_TRUE(TensorsClose(*y, Piece(ref, 2, n, r), kTol, kTol));
}

void RowBody(RankContext& ctx) {
  comm::Communicator& tp = ctx.comm;
  const int n = ctx.size, r = ctx.rank;
  const int64_t in = 24, out = 8;
  // Row-parallel weights split the master's columns.
  Tensor W;
  ASSERT_TRUE(InitMasterWeightAndSplit({out, in}, 1, 1, 0, 1, NormalInit(0.5), kSeed,
                                       DType::kF32, &W)
                  .ok());
  const Tensor B = RandomTensor({out}, DType::kF32, 19);
  RowParallelLinearOptions o{.input_is_parallel = true,
                             .sequence_parallel = true,
                             .init_method = NormalInit(0.5),
                             .seed = kSeed};
  auto trained = RowParallelLinear::Create(tp, in, out, o);
  ASSERT_TRUE(trained.ok()) << trained.status();
  ASSERT_TRUE(trained->bias().value().CopyFrom(B).ok());
  auto layer = InferenceRowParallelLinear::Create(tp, *trained);
  ASSERT_TRUE(layer.ok()) << layer.status();

  for (int64_t T : {12, 24}) {
    SCOPED_TRACE(::testing::Message() << "rows " << T);
    const Tensor X = RandomTensor({T, kBatch, in}, DType::kF32, 20 + T);
    const Tensor x_local = Piece(X, 2, n, r);
    const Tensor ref = *ops::Linear(X, W, B);  // [T, B, out]
    auto y = layer->Forward(x_local);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(TensorsClose(*y, Piece(ref, 0, n, r), kTol, kTol));
    {
      NoGradGuard no_grad;
      auto train_y = trained->Forward(Variable(x_local));
      ASSERT_TRUE(train_y.ok()) << train_y.status();
      EXPECT_TRUE(TensorsClose(*y, train_y->output.value(), kTol, kTol));
    }

    const Tensor R = RandomTensor({T, kBatch, out}, DType::kF32, 30 + T);
    for (const InferenceNorm& norm : Norms(out)) {
      SCOPED_TRACE(::testing::Message() << "layernorm " << (norm.kind == NormKind::kLayerNorm)
                                        << " cpu_kernel " << norm.cpu_kernel);
      // Fused.
      Tensor residual = *Piece(R, 0, n, r).Clone();
      auto gathered = layer->ForwardAddNormGather(x_local, residual, norm);
      ASSERT_TRUE(gathered.ok()) << gathered.status();
      // Unfused: the layer's own Forward, add, norm, all-gather, one op each.
      Tensor residual2 = *ops::Add(Piece(R, 0, n, r), *layer->Forward(x_local));
      Tensor normed = ReferenceNorm(norm, residual2);
      Tensor all = *Tensor::Empty({T, kBatch, out});
      ASSERT_TRUE(tp.AllGather(normed, all).Wait().ok());
      EXPECT_TRUE(TensorsClose(residual, residual2, kTol, kTol));
      EXPECT_TRUE(TensorsClose(*gathered, all, kTol, kTol));
      // Single-process reference.
      const Tensor full_res = *ops::Add(R, ref);
      EXPECT_TRUE(TensorsClose(*gathered, ReferenceNorm(norm, full_res), kTol, kTol));
      EXPECT_TRUE(TensorsClose(residual, Piece(full_res, 0, n, r), kTol, kTol));
    }
  }
}

// bf16 weights and activations take the core-op path (the CPU kernel is
// f32-only); they match the f32 computation on the same (bf16) values.
void Bf16Body(RankContext& ctx) {
  comm::Communicator& tp = ctx.comm;
  const int n = ctx.size, r = ctx.rank;
  const int64_t h = 8, wide = 24, T = 8;
  auto col = ColumnParallelLinear::Create(tp, h, wide,
                                          {.sequence_parallel = true,
                                           .init_method = NormalInit(0.5),
                                           .seed = kSeed,
                                           .params_dtype = DType::kBF16});
  auto row = RowParallelLinear::Create(tp, wide, h,
                                       {.input_is_parallel = true,
                                        .sequence_parallel = true,
                                        .init_method = NormalInit(0.5),
                                        .seed = kSeed + 1,
                                        .params_dtype = DType::kBF16});
  ASSERT_TRUE(col.ok() && row.ok());
  InferenceNorm norm{.kind = NormKind::kLayerNorm,
                     .weight = RandomTensor({h}, DType::kBF16, 4, 0.5f, 1.5f),
                     .bias = RandomTensor({h}, DType::kBF16, 5)};
  auto cl = InferenceLayerNormColumnParallelLinear::Create(tp, *col, norm);
  auto rl = InferenceRowParallelLinear::Create(tp, *row);
  ASSERT_TRUE(cl.ok() && rl.ok());
  const Tensor X = RandomTensor({T, h}, DType::kBF16, 70);
  auto f32 = [](const Tensor& t) { return *t.To(DType::kF32); };
  InferenceNorm norm32{.kind = NormKind::kLayerNorm, .weight = f32(norm.weight),
                       .bias = f32(norm.bias)};
  auto y = cl->Forward(Piece(X, 0, n, r));
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), DType::kBF16);
  const Tensor ref = *ops::Linear(ReferenceNorm(norm32, f32(X)), f32(col->weight().value()),
                                  f32(col->bias().value()));
  EXPECT_TRUE(TensorsClose(f32(*y), ref, 3e-2, 3e-2));

  const Tensor H = RandomTensor({T, wide}, DType::kBF16, 71);
  const Tensor R = RandomTensor({T, h}, DType::kBF16, 72);
  Tensor residual = *Piece(R, 0, n, r).Clone();
  auto gathered = rl->ForwardAddNormGather(Piece(H, 1, n, r), residual, norm);
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  EXPECT_EQ(gathered->dtype(), DType::kBF16);
  Tensor w_full = *Tensor::Empty({h, wide}, DType::kBF16);
  Tensor w_parts = *Tensor::Empty({h * n, wide / n}, DType::kBF16);
  ASSERT_TRUE(tp.AllGather(*row->weight().value().Contiguous(), w_parts).Wait().ok());
  for (int k = 0; k < n; ++k) {
    ASSERT_TRUE(w_full.Narrow(1, k * (wide / n), wide / n)
                    ->CopyFrom(*w_parts.Narrow(0, k * h, h))
                    .ok());
  }
  const Tensor full_res = *ops::Add(f32(R), *ops::Linear(f32(H), f32(w_full)));
  EXPECT_TRUE(TensorsClose(f32(residual), Piece(full_res, 0, n, r), 3e-2, 3e-2));
  EXPECT_TRUE(TensorsClose(f32(*gathered), ReferenceNorm(norm32, full_res), 5e-2, 5e-2));
}

void ErrorBody(RankContext& ctx) {
  comm::Communicator& tp = ctx.comm;
  const int n = ctx.size;
  auto col = ColumnParallelLinear::Create(tp, 8, 24, {.sequence_parallel = true});
  auto row = RowParallelLinear::Create(tp, 24, 8, {.input_is_parallel = true,
                                                   .sequence_parallel = true});
  ASSERT_TRUE(col.ok() && row.ok());
  InferenceNorm good{.weight = *Tensor::Ones({8})};
  // A norm that does not fit, an RMSNorm with a bias, a bad eps.
  auto bad = InferenceLayerNormColumnParallelLinear::Create(tp, *col, {.weight = *Tensor::Ones({7})});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("norm weight must be [8]"), std::string::npos)
      << bad.status();
  EXPECT_FALSE(InferenceLayerNormColumnParallelLinear::Create(
                   tp, *col, {.weight = *Tensor::Ones({8}), .bias = *Tensor::Zeros({8})})
                   .ok());
  EXPECT_FALSE(InferenceLayerNormColumnParallelLinear::Create(
                   tp, *col, {.weight = *Tensor::Ones({8}), .eps = 0})
                   .ok());
  auto cl = InferenceLayerNormColumnParallelLinear::Create(tp, *col, good);
  auto rl = InferenceRowParallelLinear::Create(tp, *row);
  ASSERT_TRUE(cl.ok() && rl.ok());
  // Wrong feature sizes.
  EXPECT_FALSE(cl->Forward(*Tensor::Zeros({4, 9})).ok());
  EXPECT_FALSE(cl->ForwardNormalized(*Tensor::Zeros({4, 9})).ok());
  EXPECT_FALSE(rl->Forward(*Tensor::Zeros({4 * n, 25})).ok());
  // Rows that do not divide over TP (checked before any collective).
  if (n > 1) {
    auto s = rl->Forward(*Tensor::Zeros({n + 1, 24 / n}));
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("do not divide over tensor-parallel size"),
              std::string::npos)
        << s.status();
  }
  // A residual that is not this rank's rows; a next norm of the wrong size.
  EXPECT_FALSE(rl->ForwardAddNormGather(*Tensor::Zeros({2 * n, 24 / n}), *Tensor::Zeros({3, 8}),
                                        good)
                   .ok());
  EXPECT_FALSE(rl->ForwardAddNormGather(*Tensor::Zeros({2 * n, 24 / n}), *Tensor::Zeros({2, 8}),
                                        {.weight = *Tensor::Ones({5})})
                   .ok());
  // The calls that failed issued nothing: a real one still completes.
  Tensor residual = *Tensor::Zeros({2, 8});
  EXPECT_TRUE(rl->ForwardAddNormGather(*Tensor::Zeros({2 * n, 24 / n}), residual, good).ok());
}

TEST(InferenceLayers, ColumnMatchesTrainingLayerAndReference) {
  for (int n : {1, 2, 3, 4}) {
    SCOPED_TRACE(::testing::Message() << "world " << n);
    RunOnRanks(n, ColumnBody);
  }
}

TEST(InferenceLayers, RowAndFusedTailMatchUnfusedAndReference) {
  for (int n : {1, 2, 3, 4}) {
    SCOPED_TRACE(::testing::Message() << "world " << n);
    RunOnRanks(n, RowBody);
  }
}

TEST(InferenceLayers, Bf16TakesTheCoreOpPath) {
  for (int n : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << "world " << n);
    RunOnRanks(n, Bf16Body);
  }
}

TEST(InferenceLayers, BadInputGivesErrors) {
  for (int n : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << "world " << n);
    RunOnRanks(n, ErrorBody);
  }
}

TEST(InferenceNorm, SingleProcessKernelsMatchCoreOps) {
  for (const InferenceNorm& norm : Norms(16)) {
    const Tensor x = RandomTensor({5, 3, 16}, DType::kF32, 60, -3.0f, 3.0f);
    Tensor out = *Tensor::Empty(x.shape());
    ASSERT_TRUE(NormInto(norm, x, out).ok());
    EXPECT_TRUE(TensorsClose(out, ReferenceNorm(norm, x), 1e-5, 1e-5));
    Tensor residual = *x.Clone();
    const Tensor add = RandomTensor(x.shape(), DType::kF32, 61);
    const Tensor bias = RandomTensor({16}, DType::kF32, 62);
    ASSERT_TRUE(AddNormInto(norm, residual, add, bias, out).ok());
    const Tensor sum = *ops::Add(*ops::Add(x, add), bias);
    EXPECT_TRUE(TensorsClose(residual, sum, 1e-6, 1e-6));
    EXPECT_TRUE(TensorsClose(out, ReferenceNorm(norm, sum), 1e-5, 1e-5));
  }
  // Output of another shape.
  InferenceNorm norm{.weight = *Tensor::Ones({4})};
  EXPECT_FALSE(NormInto(norm, *Tensor::Zeros({2, 4}), *Tensor::Zeros({3, 4})).ok());
  // A reused buffer grows and keeps older views alive.
  RowBuffer buf;
  Tensor a = *buf.View(2, 3, DType::kF32, Device::CPU());
  ASSERT_TRUE(ops::Fill(a, 1.0).ok());
  Tensor b = *buf.View(1, 3, DType::kF32, Device::CPU());
  EXPECT_TRUE(b.SharesStorageWith(a));
  Tensor c = *buf.View(4, 3, DType::kF32, Device::CPU());
  EXPECT_FALSE(c.SharesStorageWith(a));
  EXPECT_EQ(a.ToVector<float>(), std::vector<float>(6, 1.0f));
}

}  // namespace
}  // namespace tpx::layers
