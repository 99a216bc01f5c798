// Test-only (target //core:device_testutil): runs a test suite once per
// device, so CPU and CUDA share one set of op tests.
//
//   TPX_DEVICE_TEST_SUITE(AddTest);              // fixture + instantiation
//   TEST_P(AddTest, Broadcasts) {
//     Tensor a = TestRandom({2, 3});              // on the device under test
//     Tensor b = *TestFromVector<float>({1, 2, 3}, {3});
//     EXPECT_TRUE(TensorsClose(*ops::Add(a, b), expected_on_cpu));
//   }
//
// The suite runs on the CPU and on cuda:0. A device whose kernels are not
// linked into the test (link //core/cuda through if_cuda) or that is not
// visible skips every test of its instance, naming the reason, e.g.
// "cuda:0: no CUDA device visible (...)". Results are read back with
// ToVector/Item, which copy to the host.
#ifndef TPX_CORE_DEVICE_TESTUTIL_H_
#define TPX_CORE_DEVICE_TESTUTIL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/compare_testutil.h"
#include "core/device.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace tpx {

// The device of the running DeviceTest (the CPU outside one).
Device TestDevice();

class DeviceTest : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override;
  void TearDown() override;
};

// The devices every suite is instantiated for, and their test names.
std::vector<Device> TestedDevices();
std::string DeviceParamName(const ::testing::TestParamInfo<Device>& info);

#define TPX_DEVICE_TEST_SUITE(fixture)                                                 \
  class fixture : public ::tpx::DeviceTest {};                                         \
  INSTANTIATE_TEST_SUITE_P(Devices, fixture, ::testing::ValuesIn(::tpx::TestedDevices()), \
                           ::tpx::DeviceParamName)

// The factories of Tensor, placing their result on TestDevice().
absl::StatusOr<Tensor> OnTestDevice(absl::StatusOr<Tensor> host);
template <typename T>
absl::StatusOr<Tensor> TestFromVector(const std::vector<T>& values, Shape shape) {
  return OnTestDevice(Tensor::FromVector<T>(values, std::move(shape)));
}
template <typename T>
absl::StatusOr<Tensor> TestFromVector(const std::vector<T>& values, Shape shape, DType dtype) {
  return OnTestDevice(Tensor::FromVector<T>(values, std::move(shape), dtype));
}
absl::StatusOr<Tensor> TestZeros(Shape shape, DType dtype = DType::kF32);
absl::StatusOr<Tensor> TestOnes(Shape shape, DType dtype = DType::kF32);
absl::StatusOr<Tensor> TestFull(Shape shape, double value, DType dtype = DType::kF32);
absl::StatusOr<Tensor> TestArange(double start, double end, double step = 1.0,
                                  DType dtype = DType::kI64);
absl::StatusOr<Tensor> TestArange(int64_t end, DType dtype = DType::kI64);
// RandomTensor (core/compare_testutil.h) on TestDevice().
Tensor TestRandom(const Shape& shape, DType dtype = DType::kF32, uint32_t seed = 0,
                  float lo = -1.0f, float hi = 1.0f);

}  // namespace tpx

#endif  // TPX_CORE_DEVICE_TESTUTIL_H_
