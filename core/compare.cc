#include "core/compare.h"

#include <cmath>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tpx {

TensorComparison CompareTensors(const Tensor& actual, const Tensor& expected, double rtol,
                                double atol) {
  TensorComparison c;
  if (!actual.defined() || !expected.defined()) {
    c.message = absl::StrCat("cannot compare ", actual.ToString(), " with ",
                             expected.ToString());
    return c;
  }
  if (actual.shape() != expected.shape()) {
    c.message = absl::StrCat("shapes differ: actual ", actual.ToString(), ", expected ",
                             expected.ToString());
    return c;
  }
  const std::vector<double> a = actual.ToVector<double>();
  const std::vector<double> b = expected.ToVector<double>();
  int64_t worst = -1;
  double worst_excess = -1.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i];
    bool ok;
    double diff;
    if (std::isnan(x) || std::isnan(y)) {
      ok = std::isnan(x) && std::isnan(y);
      diff = ok ? 0.0 : INFINITY;
    } else if (std::isinf(x) || std::isinf(y)) {
      ok = x == y;
      diff = ok ? 0.0 : INFINITY;
    } else {
      diff = std::fabs(x - y);
      ok = diff <= atol + rtol * std::fabs(y);
      if (y != 0) c.max_rel_diff = std::max(c.max_rel_diff, diff / std::fabs(y));
    }
    c.max_abs_diff = std::max(c.max_abs_diff, diff);
    if (!ok) {
      ++c.mismatches;
      const double excess = diff - (atol + rtol * std::fabs(y));
      if (worst < 0 || excess > worst_excess || std::isnan(excess)) {
        worst = static_cast<int64_t>(i);
        worst_excess = excess;
      }
    }
  }
  c.close = c.mismatches == 0;
  if (worst >= 0) {
    // Flat row-major position -> multi-index.
    c.worst_index.assign(actual.shape().size(), 0);
    int64_t rest = worst;
    for (size_t d = actual.shape().size(); d-- > 0;) {
      c.worst_index[d] = rest % actual.shape()[d];
      rest /= actual.shape()[d];
    }
    c.worst_actual = a[worst];
    c.worst_expected = b[worst];
  }
  std::ostringstream msg;
  msg << (c.close ? "tensors are close" : "tensors differ") << ": actual " << actual.ToString()
      << ", expected " << expected.ToString() << "; " << c.mismatches << " of " << a.size()
      << " elements exceed atol=" << atol << " rtol=" << rtol
      << "; max abs diff " << c.max_abs_diff << ", max rel diff " << c.max_rel_diff;
  if (worst >= 0) {
    msg << "; worst at [" << absl::StrJoin(c.worst_index, ", ") << "]: actual "
        << c.worst_actual << " vs expected " << c.worst_expected;
  }
  c.message = msg.str();
  return c;
}

absl::Status AllClose(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  TensorComparison c = CompareTensors(actual, expected, rtol, atol);
  if (c.close) return absl::OkStatus();
  return absl::InvalidArgumentError(c.message);
}

}  // namespace tpx
