// Test-only helpers (target //core:compare_testutil): a gtest predicate for
// comparing tensors and a seeded random tensor factory.
//
//   Tensor x = RandomTensor({4, 8}, DType::kBF16, /*seed=*/1);
//   EXPECT_TRUE(TensorsClose(actual, expected, 1e-5, 1e-6));
//   // failure prints shapes, max abs/rel diff and the worst element's index.
#ifndef TPX_CORE_COMPARE_TESTUTIL_H_
#define TPX_CORE_COMPARE_TESTUTIL_H_

#include <cstdint>
#include <random>
#include <vector>

#include "core/compare.h"
#include "gtest/gtest.h"

namespace tpx {

inline ::testing::AssertionResult TensorsClose(const Tensor& actual, const Tensor& expected,
                                               double rtol = 1e-5, double atol = 1e-8) {
  TensorComparison c = CompareTensors(actual, expected, rtol, atol);
  if (c.close) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << c.message;
}

// Uniform values in [lo, hi) (rounded to dtype), reproducible from seed.
inline Tensor RandomTensor(const Shape& shape, DType dtype = DType::kF32, uint32_t seed = 0,
                           float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(NumElements(shape)));
  for (float& x : v) x = dist(gen);
  return *Tensor::FromVector<float>(v, shape, dtype);
}

}  // namespace tpx

#endif  // TPX_CORE_COMPARE_TESTUTIL_H_
