// Engine, Variable, Function and hook behaviour on small graphs with
// gradients worked out by hand.
#include "core/autograd/engine.h"

#include <memory>
#include <string>
#include <vector>

#include "core/autograd/function.h"
#include "core/autograd/grad_mode.h"
#include "core/autograd/ops.h"
#include "core/compare_testutil.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"

namespace tpx {
namespace {

Tensor T(std::vector<float> values, Shape shape) {
  return Tensor::FromVector<float>(values, std::move(shape)).value();
}

Variable Leaf(std::vector<float> values, Shape shape, std::string name = "") {
  return Variable(T(std::move(values), std::move(shape)), /*requires_grad=*/true, std::move(name));
}

std::vector<float> Vec(const Tensor& t) { return t.ToVector<float>(); }

TEST(EngineTest, ScalarLossGradient) {
  Variable x = Leaf({1, 2, 3}, {3}, "x");
  Variable y = ag::Mul(x, x).value();  // sum(x^2) -> 2x
  Variable loss = ag::Sum(y).value();
  ASSERT_TRUE(Backward(loss).ok());
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{2, 4, 6}));
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(y.grad_fn()->name(), "Mul");
  EXPECT_FALSE(y.grad().defined());  // non-leaf grads are not kept by default
}

TEST(EngineTest, MultipleUsesAccumulate) {
  // f = sum(x * x + x * 3 + x) -> df/dx = 2x + 4.
  Variable x = Leaf({1, -2}, {2});
  Variable three(T({3, 3}, {2}));
  Variable a = ag::Mul(x, x).value();
  Variable b = ag::Mul(x, three).value();
  Variable c = ag::Add(ag::Add(a, b).value(), x).value();
  ASSERT_TRUE(Backward(ag::Sum(c).value()).ok());
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{6, 0}));
  EXPECT_FALSE(three.grad().defined());
}

TEST(EngineTest, GradAccumulatesAcrossPassesUntilCleared) {
  Variable x = Leaf({1, 2}, {2});
  for (int i = 0; i < 2; ++i) {
    Variable loss = ag::Sum(ag::Scale(x, 3.0).value()).value();
    ASSERT_TRUE(Backward(loss).ok());
  }
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{6, 6}));
  ASSERT_TRUE(x.ZeroGrad().ok());
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{0, 0}));
  x.ClearGrad();
  EXPECT_FALSE(x.grad().defined());
}

TEST(EngineTest, GradHasValueDtype) {
  Variable x(T({1, 2}, {2}).To(DType::kBF16).value(), true);
  Variable y = ag::Scale(ag::To(x, DType::kF32).value(), 2.0).value();
  ASSERT_TRUE(Backward(ag::Sum(y).value()).ok());
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().dtype(), DType::kBF16);
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{2, 2}));
}

TEST(EngineTest, VectorRootNeedsGradOutput) {
  Variable x = Leaf({1, 2}, {2});
  Variable y = ag::Scale(x, 2.0).value();
  absl::Status s = Backward(y);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("grad_output"), std::string::npos) << s;
  ASSERT_TRUE(Backward(y, T({1, 10}, {2})).ok());
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{2, 20}));
  EXPECT_FALSE(Backward(y, T({1, 2, 3}, {3}), {.retain_graph = true}).ok());
}

TEST(EngineTest, RootWithoutGradIsAnError) {
  Variable x(T({1}, {1}));
  Variable y = ag::Scale(x, 2.0).value();
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(Backward(y).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Backward(Variable()).code(), absl::StatusCode::kInvalidArgument);
}

TEST(EngineTest, SeveralRootsInOnePass) {
  Variable x = Leaf({1, 2}, {2});
  Variable a = ag::Sum(ag::Scale(x, 2.0).value()).value();
  Variable b = ag::Sum(ag::Mul(x, x).value()).value();
  std::vector<Variable> roots = {a, b};
  ASSERT_TRUE(Backward(roots, {}).ok());
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{4, 6}));
}

TEST(EngineTest, RootThatFeedsAnotherRoot) {
  // b = 3 * a; Backward({a, b}) must wait for b's gradient before running a's grad_fn.
  Variable x = Leaf({1}, {1});
  Variable a = ag::Scale(x, 2.0).value();
  Variable b = ag::Scale(a, 3.0).value();
  std::vector<Variable> roots = {b, a};
  ASSERT_TRUE(Backward(roots, {}).ok());
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{8}));  // 2*3 + 2
}

TEST(EngineTest, DeepGraphRunsAndIsFreedWithoutRecursion) {
  // Neither Backward nor destroying the graph may recurse once per node.
  Variable x = Leaf({1}, {1});
  Variable y = x;
  for (int i = 0; i < 30000; ++i) y = ag::AddScalar(y, 1.0).value();
  ASSERT_TRUE(Backward(y).ok());
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{1}));
  y = Variable();  // frees the chain
  EXPECT_TRUE(x.grad().defined());
}

TEST(EngineTest, RetainGraph) {
  Variable x = Leaf({2}, {1});
  Variable y = ag::Mul(x, x).value();  // saves its inputs
  ASSERT_TRUE(Backward(y, Tensor(), {.retain_graph = true}).ok());
  ASSERT_TRUE(Backward(y).ok());
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{8}));
  absl::Status s = Backward(y);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("retain_graph"), std::string::npos) << s;
}

TEST(EngineTest, NoGradGuard) {
  Variable x = Leaf({1, 2}, {2});
  EXPECT_TRUE(GradModeEnabled());
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(GradModeEnabled());
    Variable y = ag::Mul(x, x).value();
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
    {
      EnableGradGuard enable;
      EXPECT_TRUE(ag::Mul(x, x).value().requires_grad());
    }
    EXPECT_FALSE(GradModeEnabled());
  }
  EXPECT_TRUE(GradModeEnabled());
  EXPECT_TRUE(ag::Mul(x, x).value().requires_grad());
}

TEST(EngineTest, DetachCutsTheGraph) {
  Variable x = Leaf({3}, {1});
  Variable y = ag::Mul(x, x).value();
  Variable d = y.Detach();
  EXPECT_TRUE(d.is_leaf());
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.value().SharesStorageWith(y.value()));
  // loss = y * detach(y): only the first factor carries a gradient: 2x * y.
  ASSERT_TRUE(Backward(ag::Sum(ag::Mul(y, d).value()).value()).ok());
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{54}));
}

TEST(EngineTest, SetRequiresGrad) {
  Variable x(T({1}, {1}));
  ASSERT_TRUE(x.set_requires_grad(true).ok());
  Variable y = ag::Scale(x, 2.0).value();
  EXPECT_FALSE(y.set_requires_grad(false).ok());
  Variable i(Tensor::Arange(3).value());
  EXPECT_FALSE(i.set_requires_grad(true).ok());
}

TEST(EngineTest, RetainGradOnNonLeaf) {
  Variable x = Leaf({1, 2}, {2});
  Variable y = ag::Scale(x, 2.0).value();
  ASSERT_TRUE(y.RetainGrad().ok());
  Variable loss = ag::Sum(ag::Mul(y, y).value()).value();
  ASSERT_TRUE(Backward(loss).ok());
  EXPECT_EQ(Vec(y.grad()), (std::vector<float>{4, 8}));  // 2y
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{8, 16}));
}

TEST(EngineTest, SplitOutputsWithoutGradientGetZeros) {
  Variable x = Leaf({1, 2, 3, 4, 5}, {5});
  std::vector<int64_t> sizes = {2, 3};
  std::vector<Variable> parts = ag::Split(x, sizes, 0).value();
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_TRUE(parts[1].value().SharesStorageWith(x.value()));
  ASSERT_TRUE(Backward(ag::Sum(ag::Scale(parts[1], 2.0).value()).value()).ok());
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{0, 0, 2, 2, 2}));
}

// ---- Custom Functions ----

// y = s * x, written as a user would.
class ScaleBy final : public Function {
 public:
  explicit ScaleBy(double s) : s_(s) {}
  std::string name() const override { return "ScaleBy"; }
  absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> in) override {
    TPX_ASSIGN_OR_RETURN(Tensor y, ops::Scale(in[0], s_));
    return std::vector<Tensor>{y};
  }
  absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor> g) override {
    TPX_ASSIGN_OR_RETURN(Tensor dx, ops::Scale(g[0], s_));
    return std::vector<Tensor>{dx};
  }

 private:
  double s_;
};

// (a, b) -> (a * b, a + b), saving inputs; checks the multi-output path.
class ProductAndSum final : public Function {
 public:
  std::string name() const override { return "ProductAndSum"; }
  absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> in) override {
    SaveForBackward({in[0], in[1]});
    TPX_ASSIGN_OR_RETURN(Tensor p, ops::Mul(in[0], in[1]));
    TPX_ASSIGN_OR_RETURN(Tensor s, ops::Add(in[0], in[1]));
    return std::vector<Tensor>{p, s};
  }
  absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor> g) override {
    TPX_ASSIGN_OR_RETURN(Tensor gb, ops::Mul(g[0], saved(1)));
    TPX_ASSIGN_OR_RETURN(Tensor ga, ops::Mul(g[0], saved(0)));
    TPX_ASSIGN_OR_RETURN(Tensor da, ops::Add(gb, g[1]));
    TPX_ASSIGN_OR_RETURN(Tensor db, ops::Add(ga, g[1]));
    return std::vector<Tensor>{da, db};
  }
};

TEST(FunctionTest, CustomSingleOutput) {
  Variable x = Leaf({1, 2}, {2});
  Variable y = Apply(std::make_shared<ScaleBy>(3.0), {x}).value();
  EXPECT_EQ(Vec(y.value()), (std::vector<float>{3, 6}));
  EXPECT_EQ(y.grad_fn()->name(), "ScaleBy");
  ASSERT_TRUE(Backward(ag::Sum(y).value()).ok());
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{3, 3}));
}

TEST(FunctionTest, CustomMultiOutput) {
  Variable a = Leaf({2}, {1});
  Variable b = Leaf({5}, {1});
  std::vector<Variable> out = ApplyMulti(std::make_shared<ProductAndSum>(), {a, b}).value();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].output_nr(), 1);
  // loss = 2 * p + 3 * s -> da = 2b + 3 = 13, db = 2a + 3 = 7.
  Variable loss = ag::Add(ag::Scale(out[0], 2.0).value(), ag::Scale(out[1], 3.0).value()).value();
  ASSERT_TRUE(Backward(ag::Sum(loss).value()).ok());
  EXPECT_EQ(Vec(a.grad()), (std::vector<float>{13}));
  EXPECT_EQ(Vec(b.grad()), (std::vector<float>{7}));
}

TEST(FunctionTest, UnusedOutputArrivesAsZeros) {
  Variable a = Leaf({2}, {1});
  Variable b = Leaf({5}, {1});
  std::vector<Variable> out = ApplyMulti(std::make_shared<ProductAndSum>(), {a, b}).value();
  ASSERT_TRUE(Backward(ag::Sum(out[1]).value()).ok());  // only the sum is used
  EXPECT_EQ(Vec(a.grad()), (std::vector<float>{1}));
  EXPECT_EQ(Vec(b.grad()), (std::vector<float>{1}));
}

TEST(FunctionTest, AppliedTwiceIsAnError) {
  Variable x = Leaf({1}, {1});
  auto fn = std::make_shared<ScaleBy>(2.0);
  ASSERT_TRUE(Apply(fn, {x}).ok());
  EXPECT_EQ(Apply(fn, {x}).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(Apply(std::make_shared<ProductAndSum>(), {x, x}).ok());  // two outputs
}

TEST(FunctionTest, NoGraphWithoutGradInputs) {
  Variable x(T({1}, {1}));
  Variable y = Apply(std::make_shared<ScaleBy>(2.0), {x}).value();
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
}

// A Function whose Backward fails, to check that errors surface.
class FailingBackward final : public Function {
 public:
  std::string name() const override { return "FailingBackward"; }
  absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> in) override {
    return std::vector<Tensor>{in[0]};
  }
  absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor>) override {
    return absl::UnavailableError("all-reduce peer 3 did not arrive");
  }
};

TEST(FunctionTest, BackwardErrorPropagates) {
  Variable x = Leaf({1}, {1});
  Variable y = Apply(std::make_shared<FailingBackward>(), {x}).value();
  Variable z = ag::Scale(y, 2.0).value();
  absl::Status s = Backward(z);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("Backward of FailingBackward"), std::string::npos) << s;
  EXPECT_NE(s.message().find("peer 3"), std::string::npos) << s;
  EXPECT_FALSE(x.grad().defined());
}

// Returns a gradient of the wrong shape.
class BadShapeBackward final : public Function {
 public:
  std::string name() const override { return "BadShape"; }
  absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> in) override {
    return std::vector<Tensor>{in[0]};
  }
  absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor>) override {
    TPX_ASSIGN_OR_RETURN(Tensor g, Tensor::Ones({7}));
    return std::vector<Tensor>{g};
  }
};

TEST(FunctionTest, WrongGradientShapeIsAnError) {
  Variable x = Leaf({1, 2}, {2});
  Variable y = Apply(std::make_shared<BadShapeBackward>(), {x}).value();
  absl::Status s = Backward(ag::Sum(y).value());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("BadShape"), std::string::npos) << s;
}

// Records the order in which Backward functions run.
class Trace final : public Function {
 public:
  Trace(std::string tag, std::vector<std::string>* log) : tag_(std::move(tag)), log_(log) {}
  std::string name() const override { return tag_; }
  absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> in) override {
    std::vector<Tensor> out;
    TPX_ASSIGN_OR_RETURN(Tensor y, ops::Scale(in[0], 1.0));
    for (size_t i = 1; i < in.size(); ++i) {
      TPX_ASSIGN_OR_RETURN(y, ops::Add(y, in[i]));
    }
    return std::vector<Tensor>{y};
  }
  absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor> g) override {
    log_->push_back(tag_);
    return std::vector<Tensor>(num_inputs(), g[0]);
  }

 private:
  std::string tag_;
  std::vector<std::string>* log_;
};

TEST(EngineTest, EachFunctionRunsOnceAfterItsConsumers) {
  // Diamond: a = f(x); b = g(a); c = h(a); d = k(b, c, a).
  std::vector<std::string> log;
  Variable x = Leaf({1}, {1});
  Variable a = Apply(std::make_shared<Trace>("a", &log), {x}).value();
  Variable b = Apply(std::make_shared<Trace>("b", &log), {a}).value();
  Variable c = Apply(std::make_shared<Trace>("c", &log), {a}).value();
  Variable d = Apply(std::make_shared<Trace>("d", &log), {b, c, a}).value();
  ASSERT_TRUE(Backward(d).ok());
  // d first, a last (after both b and c), b/c in reverse creation order.
  EXPECT_EQ(log, (std::vector<std::string>{"d", "c", "b", "a"}));
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{3}));  // three paths from d to a
}

// ---- Hooks ----

TEST(HookTest, LeafHookReplacesGradient) {
  Variable x = Leaf({1, 2}, {2});
  int calls = 0;
  ASSERT_TRUE(x.RegisterHook([&calls](const Tensor& g) -> absl::StatusOr<Tensor> {
                 ++calls;
                 return ops::Scale(g, 10.0);
               }).ok());
  // Two uses of x: the hook sees their sum once.
  Variable loss = ag::Sum(ag::Add(x, x).value()).value();
  ASSERT_TRUE(Backward(loss).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{20, 20}));
}

TEST(HookTest, NonLeafHookChangesUpstreamGradient) {
  Variable x = Leaf({1, 2}, {2});
  Variable y = ag::Scale(x, 2.0).value();
  Tensor seen;
  absl::StatusOr<HookId> id = y.RegisterHook([&seen](const Tensor& g) -> absl::StatusOr<Tensor> {
    seen = g;
    return ops::Neg(g);
  });
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(Backward(ag::Sum(y).value(), Tensor(), {.retain_graph = true}).ok());
  EXPECT_EQ(Vec(seen), (std::vector<float>{1, 1}));
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{-2, -2}));
  EXPECT_TRUE(y.RemoveHook(*id));
  EXPECT_FALSE(y.RemoveHook(*id));
  x.ClearGrad();
  ASSERT_TRUE(Backward(ag::Sum(y).value()).ok());
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{2, 2}));
}

TEST(HookTest, HookErrorPropagates) {
  Variable x = Leaf({1}, {1});
  ASSERT_TRUE(x.RegisterHook([](const Tensor&) -> absl::StatusOr<Tensor> {
                 return absl::DataLossError("nan in gradient");
               }).ok());
  absl::Status s = Backward(ag::Scale(x, 2.0).value());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("nan in gradient"), std::string::npos) << s;
}

TEST(HookTest, HookOnVariableWithoutGradIsAnError) {
  Variable x(T({1}, {1}));
  EXPECT_FALSE(x.RegisterHook([](const Tensor& g) -> absl::StatusOr<Tensor> { return g; }).ok());
  EXPECT_FALSE(x.RegisterPostAccumulateHook([](Variable&) { return absl::OkStatus(); }).ok());
}

TEST(HookTest, MainGradAccumulationThroughHooks) {
  // A bf16 parameter whose gradient accumulates into an f32 main_grad: the
  // gradient hook adds into main_grad and drops the bf16 gradient; the
  // post-accumulate hook (e.g. a data-parallel all-reduce) runs once per pass.
  Variable w(T({1, 2}, {2}).To(DType::kBF16).value(), true, "w");
  w.set_main_grad(Tensor::Zeros({2}, DType::kF32).value());
  ASSERT_TRUE(w.RegisterHook([w_main = w.main_grad()](const Tensor& g) -> absl::StatusOr<Tensor> {
                 TPX_RETURN_IF_ERROR(ops::AddInPlace(w_main, g));
                 return Tensor();  // consumed
               }).ok());
  int post_calls = 0;
  ASSERT_TRUE(w.RegisterPostAccumulateHook([&post_calls](Variable& leaf) {
                 ++post_calls;
                 EXPECT_FALSE(leaf.grad().defined());
                 EXPECT_EQ(leaf.main_grad().dtype(), DType::kF32);
                 return absl::OkStatus();
               }).ok());
  for (int micro_batch = 0; micro_batch < 3; ++micro_batch) {
    Variable x(T({0.5f, 0.25f}, {2}).To(DType::kBF16).value());
    Variable loss = ag::Sum(ag::Mul(ag::Mul(w, x).value(), w).value()).value();  // two uses of w
    ASSERT_TRUE(Backward(loss).ok());
  }
  EXPECT_EQ(post_calls, 3);
  EXPECT_FALSE(w.grad().defined());
  // d/dw sum(x w^2) = 2 x w = {1, 1}, three times.
  EXPECT_EQ(Vec(w.main_grad()), (std::vector<float>{3, 3}));
}

// y = x W^T whose Backward accumulates dW straight into W's f32 main_grad
// (gradient-accumulation fusion) and returns no gradient for W.
class LinearIntoMainGrad final : public Function {
 public:
  explicit LinearIntoMainGrad(Variable weight) : weight_(std::move(weight)) {}
  std::string name() const override { return "LinearIntoMainGrad"; }
  absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> in) override {
    SaveForBackward({in[0], in[1]});
    TPX_ASSIGN_OR_RETURN(Tensor y, ops::Linear(in[0], in[1]));
    return std::vector<Tensor>{y};
  }
  absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor> g) override {
    TPX_ASSIGN_OR_RETURN(Tensor dx, ops::Matmul(g[0], saved(1)));
    TPX_RETURN_IF_ERROR(ops::MatmulInto(weight_.main_grad(), g[0], saved(0), /*trans_a=*/true,
                                        /*trans_b=*/false, 1.0f, /*beta=*/1.0f));
    return std::vector<Tensor>{dx, Tensor()};
  }

 private:
  Variable weight_;
};

TEST(HookTest, FunctionAccumulatingIntoMainGradStillFiresPostHooks) {
  Variable w(T({1, 2, 3, 4}, {2, 2}).To(DType::kBF16).value(), true, "w");
  w.set_main_grad(Tensor::Zeros({2, 2}, DType::kF32).value());
  int post_calls = 0;
  ASSERT_TRUE(w.RegisterPostAccumulateHook([&post_calls](Variable&) {
                 ++post_calls;
                 return absl::OkStatus();
               }).ok());
  for (int micro_batch = 0; micro_batch < 2; ++micro_batch) {
    Variable x(T({1, 0, 0, 2}, {2, 2}).To(DType::kBF16).value(), true);
    Variable y = Apply(std::make_shared<LinearIntoMainGrad>(w), {x, w}).value();
    ASSERT_TRUE(Backward(ag::Sum(ag::To(y, DType::kF32).value()).value()).ok());
    // dx = ones @ W: column sums of W.
    EXPECT_EQ(Vec(x.grad()), (std::vector<float>{4, 6, 4, 6}));
  }
  EXPECT_EQ(post_calls, 2);
  EXPECT_FALSE(w.grad().defined());
  // dW = ones^T @ x = [[1, 2], [1, 2]] per micro-batch.
  EXPECT_EQ(Vec(w.main_grad()), (std::vector<float>{2, 4, 2, 4}));
}

TEST(HookTest, PostAccumulateHookSeesAccumulatedGrad) {
  Variable w = Leaf({1, 2}, {2});
  std::vector<float> seen;
  ASSERT_TRUE(w.RegisterPostAccumulateHook([&seen](Variable& leaf) {
                 seen = Vec(leaf.grad());
                 return absl::OkStatus();
               }).ok());
  Variable loss = ag::Sum(ag::Add(ag::Scale(w, 2.0).value(), w).value()).value();
  ASSERT_TRUE(Backward(loss).ok());
  EXPECT_EQ(seen, (std::vector<float>{3, 3}));
}

TEST(HookTest, PostAccumulateHookErrorPropagates) {
  Variable w = Leaf({1}, {1}, "w");
  ASSERT_TRUE(w.RegisterPostAccumulateHook([](Variable&) {
                 return absl::DeadlineExceededError("all-reduce timed out");
               }).ok());
  absl::Status s = Backward(ag::Scale(w, 2.0).value());
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("timed out"), std::string::npos) << s;
}

// ---- Reentrancy ----

// y = x^3, whose Backward computes d(x^3)/dx = 3x^2 by running Backward on a
// fresh inner graph it builds itself (as recomputation does).
class CubeViaInnerBackward final : public Function {
 public:
  std::string name() const override { return "CubeViaInnerBackward"; }
  absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> in) override {
    SaveForBackward({in[0]});
    TPX_ASSIGN_OR_RETURN(Tensor x2, ops::Mul(in[0], in[0]));
    TPX_ASSIGN_OR_RETURN(Tensor x3, ops::Mul(x2, in[0]));
    return std::vector<Tensor>{x3};
  }
  absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor> g) override {
    EXPECT_FALSE(GradModeEnabled());
    Variable x(saved(0), /*requires_grad=*/true);
    Variable y;
    {
      EnableGradGuard enable;
      TPX_ASSIGN_OR_RETURN(Variable x2, ag::Mul(x, x));
      TPX_ASSIGN_OR_RETURN(y, ag::Mul(x2, x));
    }
    TPX_RETURN_IF_ERROR(tpx::Backward(y, g[0]));
    EXPECT_FALSE(GradModeEnabled());
    return std::vector<Tensor>{x.grad()};
  }
};

TEST(EngineTest, ReentrantBackward) {
  Variable x = Leaf({1, 2}, {2});
  Variable y = Apply(std::make_shared<CubeViaInnerBackward>(), {x}).value();
  Variable z = ag::Scale(y, 2.0).value();
  ASSERT_TRUE(Backward(ag::Sum(z).value()).ok());
  EXPECT_EQ(Vec(x.grad()), (std::vector<float>{6, 24}));  // 2 * 3x^2
  EXPECT_TRUE(GradModeEnabled());
}

TEST(EngineTest, ErrorInsideReentrantBackwardPropagates) {
  class Outer final : public Function {
   public:
    std::string name() const override { return "Outer"; }
    absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> in) override {
      return std::vector<Tensor>{in[0]};
    }
    absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor> g) override {
      Variable x(g[0], true);
      Variable y;
      {
        EnableGradGuard enable;
        TPX_ASSIGN_OR_RETURN(y, Apply(std::make_shared<FailingBackward>(), {x}));
      }
      TPX_RETURN_IF_ERROR(tpx::Backward(y, g[0]));
      return std::vector<Tensor>{g[0]};
    }
  };
  Variable x = Leaf({1}, {1});
  Variable y = Apply(std::make_shared<Outer>(), {x}).value();
  absl::Status s = Backward(y);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("Backward of Outer: Backward of FailingBackward"), std::string::npos)
      << s;
}

TEST(GradTest, ReturnsGradientsWithoutAccumulating) {
  Variable x = Leaf({1, 2}, {2});
  Variable w = Leaf({3, 4}, {2});
  int post_calls = 0;
  ASSERT_TRUE(w.RegisterPostAccumulateHook([&post_calls](Variable&) {
                 ++post_calls;
                 return absl::OkStatus();
               }).ok());
  Variable h = ag::Mul(x, w).value();
  ASSERT_TRUE(h.RetainGrad().ok());
  Variable loss = ag::Sum(ag::Mul(h, x).value()).value();  // sum(x^2 w)
  Variable unused = Leaf({0}, {1});
  std::vector<Variable> inputs = {x, h, unused};
  std::vector<Variable> roots = {loss};
  absl::StatusOr<std::vector<Tensor>> g = Grad(roots, {}, inputs);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->size(), 3u);
  EXPECT_EQ(Vec((*g)[0]), (std::vector<float>{6, 16}));  // 2 x w
  EXPECT_EQ(Vec((*g)[1]), (std::vector<float>{1, 2}));   // x
  EXPECT_FALSE((*g)[2].defined());
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  EXPECT_FALSE(h.grad().defined());
  EXPECT_EQ(post_calls, 0);
  std::vector<Variable> bad = {Variable(T({1}, {1}))};
  EXPECT_FALSE(Grad(roots, {}, bad).ok());
}

TEST(VariableTest, ToStringAndNames) {
  Variable w = Leaf({1, 2}, {2}, "fc.weight");
  EXPECT_EQ(w.ToString(), "Variable(fc.weight, f32[2], requires_grad)");
  Variable y = ag::Scale(w, 2.0).value();
  EXPECT_NE(y.ToString().find("grad_fn=Scale"), std::string::npos);
  EXPECT_EQ(Variable().ToString(), "Variable(undefined)");
  EXPECT_FALSE(Variable().defined());
  EXPECT_TRUE(w.SameAs(w));
  EXPECT_FALSE(w.set_grad(T({1}, {1})).ok());
}

}  // namespace
}  // namespace tpx
