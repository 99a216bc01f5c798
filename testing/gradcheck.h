// Finite-difference check of autograd gradients.
//
// Compares the gradients Backward() computes for a function of Variables with
// central differences (f(x + eps) - f(x - eps)) / 2 eps, element by element.
// A non-scalar output y is reduced to the scalar sum(y * r) with a fixed
// random r, so every output element takes part.
//
//   Variable a(RandomUniform({3, 4}, 1).value(), /*requires_grad=*/true);
//   Variable b(RandomUniform({4}, 2).value(), /*requires_grad=*/true);
//   TPX_ASSIGN_OR_RETURN(GradcheckResult r, Gradcheck(
//       [](absl::Span<const Variable> in) { return ag::Mul(in[0], in[1]); }, {a, b}));
//   EXPECT_TRUE(r.ok) << r.message;   // names the worst input and element
//
// Inputs that require grad must be f32 (they are perturbed in place, on
// private copies: the caller's Variables are not touched); inputs may live on
// any device, and the function then runs there. The function may
// use an input several times and may cast internally. Sums of the output are
// taken in double; with f32 arithmetic inside, eps around 1e-3 and a
// tolerance of about 1e-2 relative / 1e-3 absolute suit values of order one.
// Cost: two evaluations of the function per checked element, so keep the
// inputs small (tens of elements).
#ifndef TPX_TESTING_GRADCHECK_H_
#define TPX_TESTING_GRADCHECK_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/autograd/variable.h"
#include "core/tensor.h"

namespace tpx {

struct GradcheckOptions {
  double eps = 1e-3;
  // An element passes when |analytic - numeric| <= atol + rtol * |numeric|.
  double rtol = 1e-2;
  double atol = 1e-3;
  // Seed of the random projection of a non-scalar output.
  uint64_t seed = 20240607;
};

struct GradcheckResult {
  bool ok = true;
  int64_t checked = 0;         // elements compared
  double max_abs_error = 0.0;  // over all compared elements
  // The element with the largest excess over the tolerance (or the largest
  // error when all pass); input is -1 when nothing was checked.
  int input = -1;
  int64_t element = -1;  // row-major index into that input
  double analytic = 0.0;
  double numeric = 0.0;
  std::string message;  // one line: verdict and the worst element
};

using GradcheckFn = std::function<absl::StatusOr<Variable>(absl::Span<const Variable>)>;

// Checks d fn / d inputs[i] for every input that requires grad. Errors: fn's
// errors, a checked input that is not f32, fn returning an undefined Variable.
absl::StatusOr<GradcheckResult> Gradcheck(const GradcheckFn& fn, absl::Span<const Variable> inputs,
                                          const GradcheckOptions& options = {});

// f32 tensor with elements uniform in [low, high), reproducible from seed.
absl::StatusOr<Tensor> RandomUniform(Shape shape, uint64_t seed, double low = -1.0,
                                     double high = 1.0);

}  // namespace tpx

#endif  // TPX_TESTING_GRADCHECK_H_
