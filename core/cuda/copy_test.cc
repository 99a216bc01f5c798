#include "core/cuda/copy.h"

#include <cstdint>
#include <string>
#include <vector>

#include "core/cuda/cuda_status.h"
#include "core/cuda/device_allocator.h"
#include "core/cuda/stream.h"
#include "gtest/gtest.h"

namespace tpx::cuda {
namespace {

TEST(CopyTest, RoundTripAcrossSeveralStagingChunks) {
  std::string why;
  if (DeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device visible: " << why;
  auto stream = Stream::Create(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  // 11 MiB + 3 bytes: three staging chunks, the last one partial.
  const size_t bytes = (size_t{11} << 20) + 3;
  std::vector<uint8_t> host(bytes), back(bytes, 0);
  for (size_t i = 0; i < bytes; ++i) host[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  CudaCachingAllocator& alloc = GetCudaAllocator(0);
  void* dev = alloc.Allocate(bytes);
  ASSERT_NE(dev, nullptr);
  ASSERT_TRUE(CopyToDevice(dev, host.data(), bytes, *stream).ok());
  ASSERT_TRUE(CopyToHost(back.data(), dev, bytes, *stream).ok());
  EXPECT_EQ(back, host);
  alloc.Deallocate(dev, bytes);
}

TEST(StreamTest, EventOrdersStreamsAndReportsCompletion) {
  std::string why;
  if (DeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device visible: " << why;
  auto producer = Stream::Create(0);
  auto consumer = Stream::Create(0);
  auto done = Event::Create(0);
  ASSERT_TRUE(producer.ok() && consumer.ok() && done.ok());
  std::vector<float> host(1 << 16, 3.0f), back(1 << 16, 0.0f);
  const size_t bytes = host.size() * sizeof(float);
  CudaCachingAllocator& alloc = GetCudaAllocator(0);
  void* dev = alloc.Allocate(bytes);
  ASSERT_NE(dev, nullptr);
  ASSERT_TRUE(CopyToDevice(dev, host.data(), bytes, *producer).ok());
  ASSERT_TRUE(done->Record(*producer).ok());
  ASSERT_TRUE(consumer->WaitFor(*done).ok());
  ASSERT_TRUE(CopyToHost(back.data(), dev, bytes, *consumer).ok());
  EXPECT_EQ(back, host);
  auto finished = done->Query();
  ASSERT_TRUE(finished.ok());
  EXPECT_TRUE(*finished);
  alloc.Deallocate(dev, bytes);
}

}  // namespace
}  // namespace tpx::cuda
