// Tensor factories, copies and host access on every device (device_testutil.h).
#include <cstdint>
#include <vector>

#include "core/compare_testutil.h"
#include "core/device_kernels.h"
#include "core/device_testutil.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpx {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TPX_DEVICE_TEST_SUITE(TensorDeviceTest);

TEST_P(TensorDeviceTest, FactoriesLiveOnTheDevice) {
  Tensor z = *TestZeros({2, 3}, DType::kBF16);
  EXPECT_EQ(z.device(), TestDevice());
  EXPECT_THAT(z.ToVector<float>(), ElementsAre(0, 0, 0, 0, 0, 0));
  EXPECT_THAT(TestFull({3}, 2.5, DType::kF16)->ToVector<float>(), ElementsAre(2.5f, 2.5f, 2.5f));
  EXPECT_THAT(TestOnes({2}, DType::kI64)->ToVector<int64_t>(), ElementsAre(1, 1));
  Tensor r = *TestArange(1.0, 2.0, 0.25, DType::kF32);
  EXPECT_EQ(r.device(), TestDevice());
  EXPECT_THAT(r.ToVector<float>(), ElementsAre(1.0f, 1.25f, 1.5f, 1.75f));
  EXPECT_EQ(r.Item({2}), 1.5);
  EXPECT_EQ(TestZeros({0, 4})->numel(), 0);
}

// Every dtype survives host -> device -> host bit for bit.
TEST_P(TensorDeviceTest, RoundTripsEveryDTypeExactly) {
  const std::vector<float> values = {0.0f, -0.0f, 1.5f, -3.25f, 1e-3f, 65504.0f, -7.0f};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64}) {
    Tensor host = *Tensor::FromVector<float>(values, {7}, dtype);
    Tensor back = *host.To(TestDevice())->To(Device::CPU());
    EXPECT_TRUE(back.device().is_cpu());
    EXPECT_EQ(back.ToVector<double>(), host.ToVector<double>()) << DTypeName(dtype);
  }
  Tensor flags = *Tensor::FromVector<bool>({true, false, true}, {3});
  EXPECT_THAT(flags.To(TestDevice())->ToVector<bool>(), ElementsAre(true, false, true));
}

TEST_P(TensorDeviceTest, CopiesConvertAndFollowStrides) {
  Tensor x = *TestArange(6, DType::kF32)->View({2, 3});
  // Strided destination and strided source with a dtype change, on the device.
  Tensor dst = *TestZeros({3, 4}, DType::kBF16);
  Tensor window = *dst.Narrow(1, 1, 2);
  ASSERT_TRUE(window.CopyFrom(*x.Transpose(0, 1)).ok());
  EXPECT_THAT(dst.ToVector<float>(), ElementsAre(0, 0, 3, 0, 0, 1, 4, 0, 0, 2, 5, 0));
  // From a strided host tensor into a strided device window, and back out.
  Tensor host_src = *Tensor::FromVector<float>({10, 20, 30, 40, 50, 60}, {2, 3})->Transpose(0, 1);
  ASSERT_TRUE(window.CopyFrom(host_src).ok());
  EXPECT_THAT(dst.ToVector<float>(), ElementsAre(0, 10, 40, 0, 0, 20, 50, 0, 0, 30, 60, 0));
  Tensor host_dst = *Tensor::Zeros({2, 3}, DType::kF32);
  ASSERT_TRUE(host_dst.CopyFrom(*window.Transpose(0, 1)).ok());
  EXPECT_THAT(host_dst.ToVector<float>(), ElementsAre(10, 20, 30, 40, 50, 60));

  Tensor c = *x.Clone();
  EXPECT_EQ(c.device(), TestDevice());
  EXPECT_FALSE(c.SharesStorageWith(x));
  EXPECT_THAT(x.Transpose(0, 1)->Contiguous()->ToVector<float>(), ElementsAre(0, 3, 1, 4, 2, 5));
  EXPECT_THAT(x.To(DType::kI32)->ToVector<int32_t>(), ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_TRUE(x.To(TestDevice())->SharesStorageWith(x));
}

TEST_P(TensorDeviceTest, LargeTransposedCopiesMatchTheHost) {
  Tensor host = RandomTensor({3, 70, 90}, DType::kF32, 5);
  Tensor x = *host.To(TestDevice());
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Tensor t = *x.Transpose(0, 2);
    Tensor dst = *Tensor::Empty(t.shape(), dtype, TestDevice());
    ASSERT_TRUE(dst.CopyFrom(t).ok());
    Tensor want = *host.Transpose(0, 2)->To(dtype);
    EXPECT_TRUE(TensorsClose(dst, want, 0, 0));
  }
}

TEST_P(TensorDeviceTest, OpsRejectTensorsOnDifferentDevices) {
  if (TestDevice().is_cpu()) GTEST_SKIP() << "needs a device other than the CPU";
  Tensor a = *TestZeros({2});
  Tensor b = *Tensor::Zeros({2});
  absl::Status s = ops::Add(a, b).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("Add: tensors on different devices"));
  EXPECT_THAT(std::string(RequireCpu(a, "CheckpointWithoutOutput").message()),
              HasSubstr("CheckpointWithoutOutput: f32[2] is on " + TestDevice().ToString()));
}

TEST(DeviceKernelsTest, CpuAlwaysAvailableAndBadIndicesNamed) {
  ASSERT_TRUE(KernelsFor(Device::CPU(), "t").ok());
  EXPECT_THAT(std::string(KernelsFor(Device{DeviceType::kCPU, 3}, "Tensor::Empty")
                              .status()
                              .message()),
              HasSubstr("Tensor::Empty: cpu"));
  EXPECT_TRUE(RequireCpu(*Tensor::Zeros({1}), "op").ok());
  EXPECT_TRUE(RequireCpu(Tensor(), "op").ok());
}

}  // namespace
}  // namespace tpx
