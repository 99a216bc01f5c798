#include "core/allocator.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace tpx {
namespace {

TEST(CpuAllocatorTest, AlignedAndCountsCurrentAndPeak) {
  CpuAllocator alloc;
  void* a = alloc.Allocate(100);
  void* b = alloc.Allocate(1000);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % CpuAllocator::kAlignment, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % CpuAllocator::kAlignment, 0u);
  EXPECT_EQ(alloc.CurrentBytes(), 1100);
  EXPECT_EQ(alloc.PeakBytes(), 1100);
  alloc.Deallocate(b, 1000);
  EXPECT_EQ(alloc.CurrentBytes(), 100);
  EXPECT_EQ(alloc.PeakBytes(), 1100);
  alloc.ResetPeak();
  EXPECT_EQ(alloc.PeakBytes(), 100);
  void* c = alloc.Allocate(50);
  EXPECT_EQ(alloc.PeakBytes(), 150);
  alloc.Deallocate(c, 50);
  alloc.Deallocate(a, 100);
  EXPECT_EQ(alloc.CurrentBytes(), 0);
}

TEST(CpuAllocatorTest, ZeroBytesGivesUsablePointer) {
  CpuAllocator alloc;
  void* p = alloc.Allocate(0);
  EXPECT_NE(p, nullptr);
  alloc.Deallocate(p, 0);
  EXPECT_EQ(alloc.CurrentBytes(), 0);
}

TEST(CpuAllocatorTest, ProcessWideInstanceIsCpu) {
  EXPECT_TRUE(GetCpuAllocator().device().is_cpu());
  EXPECT_EQ(&GetCpuAllocator(), &GetCpuAllocator());
}

}  // namespace
}  // namespace tpx
