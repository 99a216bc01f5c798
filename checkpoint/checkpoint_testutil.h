// Test helpers shared by the checkpoint tests: an MLP block with dropout and a
// runner that records outputs, gradients and the next random draw.
#ifndef TPX_CHECKPOINT_CHECKPOINT_TESTUTIL_H_
#define TPX_CHECKPOINT_CHECKPOINT_TESTUTIL_H_

#include <vector>

#include "checkpoint/checkpoint.h"
#include "core/autograd/engine.h"
#include "core/autograd/ops.h"
#include "core/compare_testutil.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "rng/dropout.h"
#include "rng/tracker.h"

namespace tpx::checkpoint {

struct Mlp {
  Variable w1, w2;
  const char* fork_state;  // tracker state for the inner dropout
  // x -> Linear -> Gelu -> Dropout(fork_state) -> Linear -> Dropout(active generator)
  absl::StatusOr<std::vector<Variable>> operator()(absl::Span<const Variable> in) const {
    TPX_ASSIGN_OR_RETURN(Variable h, ag::Linear(in[0], w1));
    TPX_ASSIGN_OR_RETURN(Variable a, ag::Gelu(h));
    Variable d;
    {
      TPX_ASSIGN_OR_RETURN(rng::RngFork fork, rng::GetRngTracker().Fork(fork_state));
      TPX_ASSIGN_OR_RETURN(d, rng::Dropout(a, 0.3));
    }
    TPX_ASSIGN_OR_RETURN(Variable y, ag::Linear(d, w2));
    TPX_ASSIGN_OR_RETURN(Variable out, rng::Dropout(y, 0.1));
    return std::vector<Variable>{out};
  }
};

inline Mlp MakeMlp(int64_t width, int64_t hidden, uint32_t seed, const char* fork_state) {
  return Mlp{Variable(RandomTensor({hidden, width}, DType::kF32, seed), true),
             Variable(RandomTensor({width, hidden}, DType::kF32, seed + 1), true), fork_state};
}

struct Result {
  std::vector<float> out, dx, dw1, dw2, next_draw;
};

// Runs the block (checkpointed or not), back-propagates sum(out) and then
// draws once more from the active generator (to see the outer stream).
inline Result RunBlock(const Mlp& mlp, const Tensor& x_value, int mode, comm::Communicator* tp) {
  Variable w1 = mlp.w1, w2 = mlp.w2;  // handles: clearing clears the shared leaves
  w1.ClearGrad();
  w2.ClearGrad();
  Variable x(*x_value.Clone(), true);
  absl::StatusOr<std::vector<Variable>> out =
      mode == 0 ? mlp({x}) : Checkpoint(mlp, /*distribute_saved_activations=*/mode == 2, {x}, tp);
  EXPECT_TRUE(out.ok()) << out.status();
  Variable loss = *ag::Sum((*out)[0]);
  absl::Status s = Backward(loss);
  EXPECT_TRUE(s.ok()) << s;
  Tensor draw = *rng::DropoutMask({64}, 0.5, rng::ActiveGenerator());
  std::vector<float> next;
  for (bool b : draw.ToVector<bool>()) next.push_back(b);
  return Result{(*out)[0].value().ToVector<float>(), x.grad().ToVector<float>(),
                mlp.w1.grad().ToVector<float>(), mlp.w2.grad().ToVector<float>(), next};
}

inline void ExpectIdentical(const Result& a, const Result& b) {
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.dx, b.dx);
  EXPECT_EQ(a.dw1, b.dw1);
  EXPECT_EQ(a.dw2, b.dw2);
  EXPECT_EQ(a.next_draw, b.next_draw);
}

}  // namespace tpx::checkpoint

#endif  // TPX_CHECKPOINT_CHECKPOINT_TESTUTIL_H_
