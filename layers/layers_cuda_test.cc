// The parallel layers on CUDA tensors over the NCCL backend: a column ->
// GeLU -> row MLP at TP = 1 and 2 (one GPU per rank) against a CPU reference
// with the full weights. Skipped, with the reason, where fewer GPUs than
// ranks are visible.
#include <string>
#include <vector>

#include "comm_nccl/device_probe.h"
#include "core/autograd/engine.h"
#include "core/autograd/ops.h"
#include "core/compare_testutil.h"
#include "gtest/gtest.h"
#include "layers/init.h"
#include "layers/parallel_linear.h"
#include "parallel/shard_comm.h"
#include "testing/multiprocess.h"

namespace tpx::layers {
namespace {

using tpx::testing::RankContext;
using tpx::testing::RunOnRanks;
using tpx::testing::RunOptions;

constexpr double kTol = 1e-4;
constexpr uint64_t kSeed = 5;

Tensor Master(const Shape& shape) {
  Tensor m;
  EXPECT_TRUE(InitMasterWeightAndSplit(shape, 0, 1, 0, 1, NormalInit(0.5), kSeed, DType::kF32, &m)
                  .ok());
  return m;
}

Tensor Piece(const Tensor& t, int64_t dim, int parts, int r) {
  return *parallel::PieceAlongDim(
      t, dim, std::vector<int64_t>(static_cast<size_t>(parts), t.size(dim) / parts), r);
}

void MlpOnCuda(RankContext& ctx) {
  const int n = ctx.size, r = ctx.rank;
  const Device gpu = Device::CUDA(r);
  const int64_t tokens = 8, hidden = 6, ffn = 12;
  ColumnParallelLinearOptions co;
  co.init_method = NormalInit(0.5);
  co.seed = kSeed;
  co.device = gpu;
  RowParallelLinearOptions ro;
  ro.input_is_parallel = true;
  ro.init_method = NormalInit(0.5);
  ro.seed = kSeed;
  ro.device = gpu;
  auto fc1 = ColumnParallelLinear::Create(ctx.comm, hidden, ffn, co);
  ASSERT_TRUE(fc1.ok()) << fc1.status();
  auto fc2 = RowParallelLinear::Create(ctx.comm, ffn, hidden, ro);
  ASSERT_TRUE(fc2.ok()) << fc2.status();
  ASSERT_EQ(fc1->weight().value().device(), gpu);

  const Tensor X = RandomTensor({tokens, hidden}, DType::kF32, 10);
  const Tensor DY = RandomTensor({tokens, hidden}, DType::kF32, 11);
  Variable x(*X.To(gpu), true);
  auto a = fc1->Forward(x);
  ASSERT_TRUE(a.ok()) << a.status();
  auto g = ag::Gelu(a->output);
  ASSERT_TRUE(g.ok()) << g.status();
  auto y = fc2->Forward(*g);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_TRUE(Backward(y->output, *DY.To(gpu)).ok());

  // CPU reference with the full weights (biases start at zero).
  const Tensor W1 = Master({ffn, hidden}), W2 = Master({hidden, ffn});
  Variable xr(X, true), w1(W1, true), w2(W2, true);
  Variable yr = *ag::Linear(*ag::Gelu(*ag::Linear(xr, w1)), w2);
  ASSERT_TRUE(Backward(yr, DY).ok());

  EXPECT_TRUE(TensorsClose(y->output.value(), yr.value(), kTol, kTol));
  EXPECT_TRUE(TensorsClose(x.grad(), xr.grad(), kTol, kTol));
  EXPECT_TRUE(TensorsClose(fc1->weight().grad(), Piece(w1.grad(), 0, n, r), kTol, kTol));
  EXPECT_TRUE(TensorsClose(fc2->weight().grad(), Piece(w2.grad(), 1, n, r), kTol, kTol));
}

class LayersOnCuda : public ::testing::TestWithParam<int> {};

TEST_P(LayersOnCuda, ColumnGeluRowMatchesCpuReference) {
  const int n = GetParam();
  std::string why;
  const int gpus = nccl::VisibleCudaDevices(&why);
  if (gpus < n) {
    GTEST_SKIP() << n << " ranks need " << n << " CUDA devices; " << gpus << " visible"
                 << (why.empty() ? "" : ": " + why);
  }
  RunOptions options;
  options.backend = "nccl";
  RunOnRanks(n, MlpOnCuda, options);
}

INSTANTIATE_TEST_SUITE_P(TensorParallel, LayersOnCuda, ::testing::Values(1, 2));

}  // namespace
}  // namespace tpx::layers
