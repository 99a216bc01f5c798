// Elementwise comparison of tensors with a tolerance, for tests and checks.
//
//   TensorComparison c = CompareTensors(actual, expected, 1e-5, 1e-6);
//   if (!c.close) std::cerr << c.message;
//   TPX_RETURN_IF_ERROR(AllClose(actual, expected, 1e-2, 1e-2));  // bf16 tolerance
//
// An element passes when |a - b| <= atol + rtol * |b| (b is the expected
// value, as in numpy.allclose). NaN equals NaN only at the same position in
// both; Inf must match exactly. Values are compared in double after
// converting from any dtype; the dtypes need not match.
#ifndef TPX_CORE_COMPARE_H_
#define TPX_CORE_COMPARE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor.h"

namespace tpx {

struct TensorComparison {
  bool close = false;
  double max_abs_diff = 0.0;   // over all elements
  double max_rel_diff = 0.0;   // |a - b| / |b| over elements with b != 0
  int64_t mismatches = 0;      // elements failing the tolerance
  // Multi-index of the worst element (largest excess over the tolerance);
  // empty when nothing failed.
  std::vector<int64_t> worst_index;
  double worst_actual = 0.0;
  double worst_expected = 0.0;
  // One readable paragraph: shapes, counts, maxima, the worst element.
  std::string message;
};

// Shapes must be equal; otherwise close == false and message says why.
TensorComparison CompareTensors(const Tensor& actual, const Tensor& expected, double rtol,
                                double atol);

// OK when close, else InvalidArgument with CompareTensors' message.
absl::Status AllClose(const Tensor& actual, const Tensor& expected, double rtol = 1e-5,
                      double atol = 1e-8);

}  // namespace tpx

#endif  // TPX_CORE_COMPARE_H_
