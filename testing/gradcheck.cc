#include "testing/gradcheck.h"

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/ops.h"
#include "core/status_macros.h"

namespace tpx {
namespace {

// sum(y * r) in double.
double Project(const Tensor& y, const std::vector<double>& r) {
  std::vector<double> v = y.ToVector<double>();
  double sum = 0.0;
  for (size_t i = 0; i < v.size(); ++i) sum += v[i] * r[i];
  return sum;
}

std::string IndexString(int64_t element, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    index[d] = shape[d] == 0 ? 0 : element % shape[d];
    element = shape[d] == 0 ? 0 : element / shape[d];
  }
  return ShapeString(index);
}

}  // namespace

absl::StatusOr<Tensor> RandomUniform(Shape shape, uint64_t seed, double low, double high) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(low, high);
  std::vector<float> values(NumElements(shape));
  for (float& v : values) v = static_cast<float>(dist(rng));
  return Tensor::FromVector<float>(values, std::move(shape));
}

absl::StatusOr<GradcheckResult> Gradcheck(const GradcheckFn& fn, absl::Span<const Variable> inputs,
                                          const GradcheckOptions& options) {
  // Private leaves with contiguous f32 copies, so elements can be perturbed.
  std::vector<Variable> leaves;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Variable& v = inputs[i];
    if (!v.defined()) {
      leaves.emplace_back();
      continue;
    }
    if (v.requires_grad() && v.dtype() != DType::kF32) {
      return absl::InvalidArgumentError(
          absl::StrCat("Gradcheck: input ", i, " ", v.ToString(), " requires grad but is not f32"));
    }
    TPX_ASSIGN_OR_RETURN(Tensor copy, v.value().Clone());
    leaves.emplace_back(std::move(copy), v.requires_grad(), v.name());
  }

  TPX_ASSIGN_OR_RETURN(Variable y, fn(leaves));
  if (!y.defined())
    return absl::InvalidArgumentError("Gradcheck: the function returned an undefined Variable");
  // Projection weights, rounded to y's dtype so both sides use the same r.
  TPX_ASSIGN_OR_RETURN(Tensor r_f32, y.numel() == 1
                                         ? Tensor::Ones(y.shape())
                                         : RandomUniform(y.shape(), options.seed, 0.5, 1.5));
  const Device device = y.value().device();
  if (y.numel() != 1) {
    // Random signs keep cancellations from hiding errors.
    std::vector<float> rv = r_f32.ToVector<float>();
    std::mt19937_64 rng(options.seed + 1);
    for (float& v : rv) v = (rng() & 1) ? v : -v;
    TPX_ASSIGN_OR_RETURN(r_f32, Tensor::FromVector<float>(rv, y.shape()));
  }
  TPX_ASSIGN_OR_RETURN(Tensor r, r_f32.To(y.dtype()));
  const std::vector<double> r_values = r.ToVector<double>();
  TPX_ASSIGN_OR_RETURN(r, r.To(device));
  if (y.requires_grad()) TPX_RETURN_IF_ERROR(Backward(y, r));

  GradcheckResult result;
  double worst_excess = -INFINITY;
  for (size_t i = 0; i < leaves.size(); ++i) {
    Variable& leaf = leaves[i];
    if (!leaf.defined() || !leaf.requires_grad()) continue;
    std::vector<double> analytic(leaf.numel(), 0.0);
    if (leaf.grad().defined()) analytic = leaf.grad().ToVector<double>();
    // Elements are perturbed one at a time through a one-element view, so the
    // leaf may live on any device.
    TPX_ASSIGN_OR_RETURN(Tensor flat, leaf.value().View({leaf.numel()}));
    const std::vector<float> values = flat.ToVector<float>();
    for (int64_t j = 0; j < leaf.numel(); ++j) {
      const float original = values[static_cast<size_t>(j)];
      TPX_ASSIGN_OR_RETURN(Tensor element, flat.Narrow(0, j, 1));
      double f[2];
      for (int side = 0; side < 2; ++side) {
        TPX_RETURN_IF_ERROR(
            ops::Fill(element, static_cast<float>(original + (side == 0 ? options.eps
                                                                         : -options.eps))));
        NoGradGuard no_grad;
        TPX_ASSIGN_OR_RETURN(Variable out, fn(leaves));
        f[side] = Project(out.value(), r_values);
      }
      TPX_RETURN_IF_ERROR(ops::Fill(element, original));
      // Divide by the step actually taken after rounding to f32.
      const double step = static_cast<double>(static_cast<float>(original + options.eps)) -
                          static_cast<double>(static_cast<float>(original - options.eps));
      const double numeric = (f[0] - f[1]) / step;
      const double error = std::fabs(analytic[j] - numeric);
      const double excess = error - (options.atol + options.rtol * std::fabs(numeric));
      ++result.checked;
      result.max_abs_error = std::max(result.max_abs_error, error);
      if (excess > 0) result.ok = false;
      if (excess > worst_excess) {
        worst_excess = excess;
        result.input = static_cast<int>(i);
        result.element = j;
        result.analytic = analytic[j];
        result.numeric = numeric;
      }
    }
  }
  if (result.input < 0) {
    result.message = "Gradcheck: no input requires grad; nothing checked";
    return result;
  }
  result.message = absl::StrFormat(
      "Gradcheck %s: %d elements, max |analytic - numeric| = %.3g; worst: input %d element %d "
      "%s: analytic %.6g, numeric %.6g (rtol %g, atol %g, eps %g)",
      result.ok ? "passed" : "FAILED", result.checked, result.max_abs_error, result.input,
      result.element, IndexString(result.element, leaves[result.input].shape()), result.analytic,
      result.numeric, options.rtol, options.atol, options.eps);
  return result;
}

}  // namespace tpx
