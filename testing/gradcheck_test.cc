// Gradcheck must pass correct gradients and catch wrong ones.
#include "testing/gradcheck.h"

#include <memory>
#include <string>
#include <vector>

#include "core/autograd/function.h"
#include "core/autograd/ops.h"
#include "core/ops.h"
#include "core/status_macros.h"
#include "gtest/gtest.h"

namespace tpx {
namespace {

Variable RandomLeaf(Shape shape, uint64_t seed) {
  return Variable(RandomUniform(std::move(shape), seed).value(), /*requires_grad=*/true);
}

TEST(GradcheckTest, PassesCorrectGradients) {
  Variable a = RandomLeaf({3, 4}, 1);
  Variable b = RandomLeaf({4}, 2);
  absl::StatusOr<GradcheckResult> r = Gradcheck(
      [](absl::Span<const Variable> in) -> absl::StatusOr<Variable> {
        TPX_ASSIGN_OR_RETURN(Variable p, ag::Mul(in[0], in[1]));
        return ag::Mul(p, in[0]);  // a^2 b, a used twice, b broadcast
      },
      {a, b});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok) << r->message;
  EXPECT_EQ(r->checked, 16);
  EXPECT_LT(r->max_abs_error, 1e-3);
  // The caller's Variables are untouched.
  EXPECT_FALSE(a.grad().defined());
}

// y = x * x with a backward that is wrong in one element.
class WrongSquare final : public Function {
 public:
  std::string name() const override { return "WrongSquare"; }
  absl::StatusOr<std::vector<Tensor>> Forward(absl::Span<const Tensor> in) override {
    SaveForBackward({in[0]});
    TPX_ASSIGN_OR_RETURN(Tensor y, ops::Mul(in[0], in[0]));
    return std::vector<Tensor>{y};
  }
  absl::StatusOr<std::vector<Tensor>> Backward(absl::Span<const Tensor> g) override {
    TPX_ASSIGN_OR_RETURN(Tensor two_x, ops::Scale(saved(0), 2.0));
    TPX_ASSIGN_OR_RETURN(Tensor d, ops::Mul(g[0], two_x));
    d.data<float>()[4] += 0.5f;  // the bug
    return std::vector<Tensor>{d};
  }
};

TEST(GradcheckTest, ReportsTheWrongElement) {
  Variable other = RandomLeaf({2}, 3);
  Variable x = RandomLeaf({2, 3}, 4);
  absl::StatusOr<GradcheckResult> r = Gradcheck(
      [](absl::Span<const Variable> in) -> absl::StatusOr<Variable> {
        TPX_ASSIGN_OR_RETURN(Variable y, Apply(std::make_shared<WrongSquare>(), {in[1]}));
        TPX_ASSIGN_OR_RETURN(Variable s, ag::Sum(in[0]));
        return ag::Add(y, s);
      },
      {other, x});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->input, 1);
  EXPECT_EQ(r->element, 4);
  EXPECT_NEAR(r->analytic - r->numeric, 0.5, 0.02);
  EXPECT_NE(r->message.find("FAILED"), std::string::npos) << r->message;
  EXPECT_NE(r->message.find("[1, 1]"), std::string::npos) << r->message;
}

TEST(GradcheckTest, CatchesAMissingGradient) {
  // Detach hides the dependence on x from autograd: numeric != 0 = analytic.
  Variable x = RandomLeaf({3}, 5);
  absl::StatusOr<GradcheckResult> r = Gradcheck(
      [](absl::Span<const Variable> in) -> absl::StatusOr<Variable> {
        return ag::Mul(in[0], in[0].Detach());
      },
      {x});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->ok) << r->message;
}

TEST(GradcheckTest, SkipsInputsWithoutGrad) {
  Variable x = RandomLeaf({3}, 6);
  Variable c(RandomUniform({3}, 7).value());
  absl::StatusOr<GradcheckResult> r =
      Gradcheck([](absl::Span<const Variable> in) { return ag::Mul(in[0], in[1]); }, {x, c});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok) << r->message;
  EXPECT_EQ(r->checked, 3);
}

TEST(GradcheckTest, Errors) {
  Variable bf16(RandomUniform({2}, 8).value().To(DType::kBF16).value(), true);
  EXPECT_FALSE(
      Gradcheck([](absl::Span<const Variable> in) { return ag::Neg(in[0]); }, {bf16}).ok());
  Variable x = RandomLeaf({2}, 9);
  absl::StatusOr<GradcheckResult> r = Gradcheck(
      [](absl::Span<const Variable>) -> absl::StatusOr<Variable> {
        return absl::InvalidArgumentError("boom");
      },
      {x});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GradcheckTest, RandomUniformIsReproducible) {
  Tensor a = RandomUniform({5}, 11, 2.0, 3.0).value();
  Tensor b = RandomUniform({5}, 11, 2.0, 3.0).value();
  EXPECT_EQ(a.ToVector<float>(), b.ToVector<float>());
  for (float v : a.ToVector<float>()) {
    EXPECT_GE(v, 2.0f);
    EXPECT_LT(v, 3.0f);
  }
  EXPECT_NE(a.ToVector<float>(), RandomUniform({5}, 12, 2.0, 3.0).value().ToVector<float>());
}

}  // namespace
}  // namespace tpx
