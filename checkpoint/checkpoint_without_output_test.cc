#include "checkpoint/checkpoint_without_output.h"

#include <vector>

#include "checkpoint/checkpoint_testutil.h"

namespace tpx::checkpoint {
namespace {

struct Grads {
  std::vector<float> y, dx, dw1, dw2, dw3;
};

// x -> [block: Linear(w1) -> Gelu -> Dropout] -> Linear(w3) = y; loss = sum(y).
Grads RunConsumerChain(const Mlp& mlp, const Variable& w3, const Tensor& x_value,
                       bool without_output, bool* released_zeros) {
  Variable w1 = mlp.w1, w2 = mlp.w2, w3c = w3;
  w1.ClearGrad();
  w3c.ClearGrad();
  Variable x(*x_value.Clone(), true);
  ag::RecomputeFn block = [&](absl::Span<const Variable> in)
      -> absl::StatusOr<std::vector<Variable>> {
    TPX_ASSIGN_OR_RETURN(Variable h, ag::Linear(in[0], w1));
    TPX_ASSIGN_OR_RETURN(Variable a, ag::Gelu(h));
    TPX_ASSIGN_OR_RETURN(Variable d, rng::Dropout(a, 0.2));
    return std::vector<Variable>{d};
  };
  CheckpointWithoutOutput ckpt;
  absl::StatusOr<std::vector<Variable>> a =
      without_output ? ckpt.Checkpoint(block, {x}) : block({x});
  EXPECT_TRUE(a.ok()) << a.status();
  Variable y = *ag::Linear((*a)[0], w3c);
  if (without_output) {
    EXPECT_TRUE(ckpt.DiscardOutputAndRegisterRecompute(y).ok());
    // The released pages read as zeros until the recomputation refills them.
    const Tensor& out = (*a)[0].value();
    const float* p = out.data<float>();
    *released_zeros = p[out.numel() / 2] == 0.f && p[out.numel() / 2 + 1] == 0.f;
  }
  EXPECT_TRUE(Backward(*ag::Sum(y)).ok());
  return Grads{y.value().ToVector<float>(), x.grad().ToVector<float>(),
               w1.grad().ToVector<float>(), {}, w3c.grad().ToVector<float>()};
}

TEST(CheckpointWithoutOutput, SameGradientsAndOutputMemoryReleased) {
  const Mlp mlp = MakeMlp(64, 512, 3, rng::kModelParallelRng);
  Variable w3(RandomTensor({32, 512}, DType::kF32, 7), true);
  const Tensor x = RandomTensor({64, 64}, DType::kF32, 5);  // block output: 128 KiB
  ASSERT_TRUE(rng::ModelParallelManualSeed(3, 0).ok());
  bool unused = false;
  const Grads plain = RunConsumerChain(mlp, w3, x, false, &unused);
  ASSERT_TRUE(rng::ModelParallelManualSeed(3, 0).ok());
  bool released = false;
  const Grads ckpt = RunConsumerChain(mlp, w3, x, true, &released);
  EXPECT_TRUE(released);
  EXPECT_EQ(plain.y, ckpt.y);
  EXPECT_EQ(plain.dx, ckpt.dx);
  EXPECT_EQ(plain.dw1, ckpt.dw1);
  EXPECT_EQ(plain.dw3, ckpt.dw3);
}

TEST(CheckpointWithoutOutput, MisuseIsAnError) {
  CheckpointWithoutOutput ckpt;
  Variable v(RandomTensor({2, 2}), true);
  EXPECT_FALSE(ckpt.DiscardOutputAndRegisterRecompute(v).ok());
}

}  // namespace
}  // namespace tpx::checkpoint
