#include "core/cuda/kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/cuda/copy.h"
#include "core/cuda/cuda_status.h"
#include "core/cuda/device_allocator.h"
#include "core/cuda/stream.h"
#include "core/dtype.h"
#include "gtest/gtest.h"

namespace tpx::cuda {
namespace {

// Device copies of host vectors, freed at the end of the test.
class KernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (DeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device visible: " << why;
    auto stream = Stream::Create(0);
    ASSERT_TRUE(stream.ok()) << stream.status();
    stream_ = std::make_unique<Stream>(std::move(*stream));
  }
  void TearDown() override {
    for (auto& [ptr, bytes] : owned_) GetCudaAllocator(0).Deallocate(ptr, bytes);
  }
  template <typename T>
  T* ToDevice(const std::vector<T>& host) {
    const size_t bytes = host.size() * sizeof(T);
    void* dev = GetCudaAllocator(0).Allocate(bytes);
    owned_.push_back({dev, bytes});
    EXPECT_TRUE(CopyToDevice(dev, host.data(), bytes, *stream_).ok());
    return static_cast<T*>(dev);
  }
  template <typename T>
  std::vector<T> ToHost(const T* dev, size_t n) {
    std::vector<T> host(n);
    EXPECT_TRUE(CopyToHost(host.data(), dev, n * sizeof(T), *stream_).ok());
    return host;
  }
  std::unique_ptr<Stream> stream_;
  std::vector<std::pair<void*, size_t>> owned_;
};

std::vector<float> Values(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(0.37f * i) * (1.0f + i % 17);
  return v;
}

// Specials and rounding ties the conversion must handle like tpx::FloatToBF16.
std::vector<float> SpecialValues() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -2.5f, 1e-40f, 3.4e38f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()};
  for (uint32_t bits : {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu}) {
    float f;
    std::memcpy(&f, &bits, 4);
    v.push_back(f);
  }
  return v;
}

TEST_F(KernelsTest, AddAndScaleF32MatchHost) {
  const size_t n = 100003;  // not a multiple of the block size
  std::vector<float> a = Values(n), b = Values(n);
  for (float& x : b) x = x * 0.5f - 1.0f;
  float* da = ToDevice(a);
  float* db = ToDevice(b);
  ASSERT_EQ(AddF32(da, db, da, n, stream_->get()), cudaSuccess);  // in place
  std::vector<float> sum = ToHost(da, n);
  ASSERT_EQ(ScaleF32(db, -3.0f, db, n, stream_->get()), cudaSuccess);
  std::vector<float> scaled = ToHost(db, n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(sum[i], a[i] + b[i]) << i;
    ASSERT_EQ(scaled[i], -3.0f * b[i]) << i;
  }
}

TEST_F(KernelsTest, Bf16ConversionsMatchCoreDtype) {
  std::vector<float> x = Values(4099);
  for (float s : SpecialValues()) x.push_back(s);
  const size_t n = x.size();
  float* dx = ToDevice(x);
  std::vector<uint16_t> zeros(n, 0);
  uint16_t* dbf = ToDevice(zeros);
  ASSERT_EQ(F32ToBF16(dx, dbf, n, stream_->get()), cudaSuccess);
  std::vector<uint16_t> bf = ToHost(dbf, n);
  float* dback = ToDevice(std::vector<float>(n, 0.0f));
  ASSERT_EQ(BF16ToF32(dbf, dback, n, stream_->get()), cudaSuccess);
  std::vector<float> back = ToHost(dback, n);
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(BF16ToFloat(bf[i]))) << i;
      EXPECT_TRUE(std::isnan(back[i])) << i;
      continue;
    }
    ASSERT_EQ(bf[i], FloatToBF16(x[i])) << "x = " << x[i];
    ASSERT_EQ(back[i], BF16ToFloat(bf[i])) << i;
  }
}

TEST_F(KernelsTest, AddAndScaleBF16RoundOnceFromF32) {
  const size_t n = 5000;
  std::vector<uint16_t> a(n), b(n);
  std::vector<float> va = Values(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = FloatToBF16(va[i]);
    b[i] = FloatToBF16(0.25f * va[n - 1 - i] + 0.1f);
  }
  uint16_t* da = ToDevice(a);
  uint16_t* db = ToDevice(b);
  uint16_t* dout = ToDevice(std::vector<uint16_t>(n, 0));
  ASSERT_EQ(AddBF16(da, db, dout, n, stream_->get()), cudaSuccess);
  std::vector<uint16_t> sum = ToHost(dout, n);
  ASSERT_EQ(ScaleBF16(da, 0.3f, dout, n, stream_->get()), cudaSuccess);
  std::vector<uint16_t> scaled = ToHost(dout, n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(sum[i], FloatToBF16(BF16ToFloat(a[i]) + BF16ToFloat(b[i]))) << i;
    ASSERT_EQ(scaled[i], FloatToBF16(0.3f * BF16ToFloat(a[i]))) << i;
  }
}

}  // namespace
}  // namespace tpx::cuda
