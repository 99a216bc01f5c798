#include "core/cuda/device_allocator.h"

#include <string>

#include "core/cuda/cuda_status.h"
#include "gtest/gtest.h"

namespace tpx::cuda {
namespace {

TEST(RoundAllocationSizeTest, SizeClasses) {
  EXPECT_EQ(RoundAllocationSize(0), 512u);
  EXPECT_EQ(RoundAllocationSize(1), 512u);
  EXPECT_EQ(RoundAllocationSize(512), 512u);
  EXPECT_EQ(RoundAllocationSize(513), 1024u);
  EXPECT_EQ(RoundAllocationSize(size_t{1} << 20), size_t{1} << 20);
  EXPECT_EQ(RoundAllocationSize((size_t{1} << 20) + 1), size_t{2} << 20);
  EXPECT_EQ(RoundAllocationSize((size_t{2} << 20) + 1), size_t{4} << 20);
}

TEST(CudaCachingAllocatorTest, ReusesFreedBlocksWithoutCudaMalloc) {
  std::string why;
  if (DeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device visible: " << why;
  CudaCachingAllocator alloc(0);
  EXPECT_EQ(alloc.device(), Device::CUDA(0));
  void* a = alloc.Allocate(1000);
  ASSERT_NE(a, nullptr);
  alloc.Deallocate(a, 1000);
  // Same size class (1024): the cached block comes back, no new cudaMalloc.
  void* b = alloc.Allocate(900);
  EXPECT_EQ(b, a);
  void* c = alloc.Allocate(3 << 20);
  ASSERT_NE(c, nullptr);
  CudaCachingAllocator::Stats stats = alloc.stats();
  EXPECT_EQ(stats.device_mallocs, 2);
  EXPECT_EQ(stats.allocated_bytes, 1024 + (4 << 20));
  EXPECT_EQ(stats.peak_allocated_bytes, 1024 + (4 << 20));
  alloc.Deallocate(b, 900);
  alloc.Deallocate(c, 3 << 20);
  stats = alloc.stats();
  EXPECT_EQ(stats.allocated_bytes, 0);
  EXPECT_EQ(stats.reserved_bytes, 1024 + (4 << 20));
  alloc.EmptyCache();
  EXPECT_EQ(alloc.stats().reserved_bytes, 0);
}

TEST(CudaCachingAllocatorTest, ImpossibleRequestReturnsNull) {
  std::string why;
  if (DeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device visible: " << why;
  CudaCachingAllocator alloc(0);
  EXPECT_EQ(alloc.Allocate(size_t{1} << 50), nullptr);  // 1 PiB
  EXPECT_EQ(alloc.stats().allocated_bytes, 0);
}

}  // namespace
}  // namespace tpx::cuda
