// Recompute gives the same gradients as the plain graph while keeping fewer
// activations alive between forward and backward.
#include "core/autograd/recompute.h"

#include <vector>

#include "core/allocator.h"
#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/ops.h"
#include "core/compare_testutil.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "testing/gradcheck.h"

namespace tpx {
namespace {

// Two Linear+Gelu layers with captured weights.
ag::RecomputeFn MakeBlock(const Variable& w1, const Variable& w2, int* runs) {
  return [w1, w2, runs](absl::Span<const Variable> in) -> absl::StatusOr<std::vector<Variable>> {
    ++*runs;
    TPX_ASSIGN_OR_RETURN(Variable h, ag::Linear(in[0], w1));
    TPX_ASSIGN_OR_RETURN(Variable a, ag::Gelu(h));
    TPX_ASSIGN_OR_RETURN(Variable y, ag::Linear(a, w2));
    TPX_ASSIGN_OR_RETURN(Variable z, ag::Gelu(y));
    return std::vector<Variable>{z, a};
  };
}

TEST(RecomputeTest, SameGradientsAsThePlainGraph) {
  Tensor x0 = RandomUniform({3, 4}, 1).value();
  Tensor w10 = RandomUniform({5, 4}, 2).value();
  Tensor w20 = RandomUniform({4, 5}, 3).value();

  auto run = [&](bool recompute, int* runs) {
    Variable x(x0, true), w1(w10, true), w2(w20, true);
    ag::RecomputeFn block = MakeBlock(w1, w2, runs);
    std::vector<Variable> out = recompute ? ag::Recompute(block, {x}).value() : block({x}).value();
    // Both outputs used downstream.
    Variable loss =
        ag::Add(ag::Sum(out[0]).value(), ag::Sum(ag::Mul(out[1], out[1]).value()).value()).value();
    EXPECT_TRUE(Backward(loss).ok());
    return std::vector<Tensor>{x.grad(), w1.grad(), w2.grad()};
  };
  int plain_runs = 0, recompute_runs = 0;
  std::vector<Tensor> plain = run(false, &plain_runs);
  std::vector<Tensor> recomputed = run(true, &recompute_runs);
  EXPECT_EQ(plain_runs, 1);
  EXPECT_EQ(recompute_runs, 2);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(recomputed[i].defined()) << i;
    EXPECT_TRUE(TensorsClose(recomputed[i], plain[i], 1e-6, 1e-6)) << i;
  }
}

TEST(RecomputeTest, CapturedWeightsGetGradientsWhenNoInputRequiresGrad) {
  Tensor x0 = RandomUniform({3, 4}, 12).value();
  Variable w1(RandomUniform({5, 4}, 13).value(), true), w2(RandomUniform({4, 5}, 14).value(), true);
  int runs = 0;
  ag::RecomputeFn block = MakeBlock(w1, w2, &runs);
  std::vector<Variable> out = ag::Recompute(block, {Variable(x0)}).value();
  ASSERT_TRUE(out[0].requires_grad());
  ASSERT_TRUE(Backward(ag::Sum(out[0]).value()).ok());
  Tensor dw1 = w1.grad(), dw2 = w2.grad();
  ASSERT_TRUE(dw1.defined());
  ASSERT_TRUE(dw2.defined());
  w1.ClearGrad();
  w2.ClearGrad();
  ASSERT_TRUE(Backward(ag::Sum(block({Variable(x0)}).value()[0]).value()).ok());
  EXPECT_TRUE(TensorsClose(dw1, w1.grad(), 1e-6, 1e-6));
  EXPECT_TRUE(TensorsClose(dw2, w2.grad(), 1e-6, 1e-6));
}

TEST(RecomputeTest, OutputsOfForwardDoNotKeepIntermediates) {
  CpuAllocator& alloc = GetCpuAllocator();
  Variable w1(RandomUniform({256, 256}, 4).value(), true);
  Variable w2(RandomUniform({256, 256}, 5).value(), true);
  Variable x(RandomUniform({64, 256}, 6).value(), true);
  int runs = 0;
  auto live_after_forward = [&](bool recompute) {
    int64_t before = alloc.CurrentBytes();
    std::vector<Variable> out = recompute ? ag::Recompute(MakeBlock(w1, w2, &runs), {x}).value()
                                          : MakeBlock(w1, w2, &runs)({x}).value();
    // Count only what the graph keeps besides the outputs themselves.
    int64_t kept = alloc.CurrentBytes() - before;
    for (const Variable& v : out) kept -= static_cast<int64_t>(v.value().nbytes());
    return kept;
  };
  int64_t plain = live_after_forward(false);
  int64_t recompute = live_after_forward(true);
  // The plain graph keeps h and y (two [64, 256] f32 tensors) for the Gelus;
  // Recompute keeps only a few bytes of its own.
  EXPECT_GE(plain - recompute, 2 * 64 * 256 * 4 - 64);
}

TEST(RecomputeTest, GradcheckThroughRecompute) {
  Variable w(RandomUniform({3, 3}, 7).value(), true);
  absl::StatusOr<GradcheckResult> r = Gradcheck(
      [](absl::Span<const Variable> in) -> absl::StatusOr<Variable> {
        Variable w = in[1];
        TPX_ASSIGN_OR_RETURN(
            std::vector<Variable> out,
            ag::Recompute(
                [w](absl::Span<const Variable> x) -> absl::StatusOr<std::vector<Variable>> {
                  TPX_ASSIGN_OR_RETURN(Variable h, ag::Matmul(x[0], w));
                  TPX_ASSIGN_OR_RETURN(Variable t, ag::Tanh(h));
                  return std::vector<Variable>{t};
                },
                {in[0]}));
        return out[0];
      },
      {Variable(RandomUniform({2, 3}, 8).value(), true), w});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok) << r->message;
}

TEST(RecomputeTest, HooksAroundRecomputation) {
  Variable x(RandomUniform({2, 2}, 9).value(), true);
  std::vector<std::string> events;
  ag::RecomputeOptions options;
  options.before_recompute = [&events] {
    events.push_back("before");
    return absl::OkStatus();
  };
  options.after_recompute = [&events] {
    events.push_back("after");
    return absl::OkStatus();
  };
  auto block = [&events](absl::Span<const Variable> in) -> absl::StatusOr<std::vector<Variable>> {
    events.push_back("run");
    TPX_ASSIGN_OR_RETURN(Variable y, ag::Exp(in[0]));
    return std::vector<Variable>{y};
  };
  std::vector<Variable> out = ag::Recompute(block, {x}, options).value();
  ASSERT_TRUE(Backward(ag::Sum(out[0]).value()).ok());
  EXPECT_EQ(events, (std::vector<std::string>{"run", "before", "run", "after"}));
  EXPECT_TRUE(TensorsClose(x.grad(), out[0].value(), 1e-6, 1e-6));  // d exp = exp
}

TEST(RecomputeTest, ErrorDuringRecomputationPropagates) {
  Variable x(RandomUniform({2}, 10).value(), true);
  int calls = 0;
  auto block = [&calls](absl::Span<const Variable> in) -> absl::StatusOr<std::vector<Variable>> {
    if (++calls == 2) return absl::ResourceExhaustedError("out of memory in recompute");
    TPX_ASSIGN_OR_RETURN(Variable y, ag::Exp(in[0]));
    return std::vector<Variable>{y};
  };
  std::vector<Variable> out = ag::Recompute(block, {x}).value();
  absl::Status s = Backward(ag::Sum(out[0]).value());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("Backward of Recompute"), std::string::npos) << s;
}

TEST(RecomputeTest, NoGradModeRecordsNothing) {
  Variable x(RandomUniform({2}, 11).value(), true);
  NoGradGuard no_grad;
  int runs = 0;
  std::vector<Variable> out =
      ag::Recompute(
          [&runs](absl::Span<const Variable> in) -> absl::StatusOr<std::vector<Variable>> {
            ++runs;
            TPX_ASSIGN_OR_RETURN(Variable y, ag::Exp(in[0]));
            return std::vector<Variable>{y};
          },
          {x})
          .value();
  EXPECT_FALSE(out[0].requires_grad());
  EXPECT_EQ(runs, 1);
}

}  // namespace
}  // namespace tpx
