#include "core/device_testutil.h"

#include "core/device_kernels.h"
#include "core/log.h"

namespace tpx {
namespace {
Device current_test_device;  // tests of one binary run one at a time
}  // namespace

Device TestDevice() { return current_test_device; }

void DeviceTest::SetUp() {
  absl::StatusOr<DeviceKernels*> kernels = KernelsFor(GetParam(), "DeviceTest");
  if (!kernels.ok()) GTEST_SKIP() << kernels.status().message();
  current_test_device = GetParam();
}

void DeviceTest::TearDown() { current_test_device = Device::CPU(); }

std::vector<Device> TestedDevices() { return {Device::CPU(), Device::CUDA(0)}; }

std::string DeviceParamName(const ::testing::TestParamInfo<Device>& info) {
  return info.param.is_cpu() ? "Cpu" : "Cuda" + std::to_string(info.param.index);
}

absl::StatusOr<Tensor> OnTestDevice(absl::StatusOr<Tensor> host) {
  if (!host.ok()) return host;
  return host->To(TestDevice());
}

absl::StatusOr<Tensor> TestZeros(Shape shape, DType dtype) {
  return Tensor::Zeros(std::move(shape), dtype, TestDevice());
}
absl::StatusOr<Tensor> TestOnes(Shape shape, DType dtype) {
  return Tensor::Ones(std::move(shape), dtype, TestDevice());
}
absl::StatusOr<Tensor> TestFull(Shape shape, double value, DType dtype) {
  return Tensor::Full(std::move(shape), value, dtype, TestDevice());
}
absl::StatusOr<Tensor> TestArange(double start, double end, double step, DType dtype) {
  return Tensor::Arange(start, end, step, dtype, TestDevice());
}
absl::StatusOr<Tensor> TestArange(int64_t end, DType dtype) {
  return Tensor::Arange(0.0, static_cast<double>(end), 1.0, dtype, TestDevice());
}

Tensor TestRandom(const Shape& shape, DType dtype, uint32_t seed, float lo, float hi) {
  absl::StatusOr<Tensor> t = OnTestDevice(RandomTensor(shape, dtype, seed, lo, hi));
  TPX_CHECK(t.ok()) << t.status();
  return *t;
}

}  // namespace tpx
