#include "core/allocator.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/huge_pages.h"
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

TEST(CpuAllocatorTest, ReusesFreedBlocksOfTheSameRoundedSize) {
  CpuAllocator alloc;
  void* a = alloc.Allocate(100000);
  ASSERT_NE(a, nullptr);
  std::memset(a, 1, 100000);
  alloc.Deallocate(a, 100000);
  EXPECT_EQ(alloc.CurrentBytes(), 0);
  EXPECT_GE(alloc.CachedBytes(), 100000);
  // Same page-rounded size: the cached block comes back.
  void* b = alloc.Allocate(100001);
  EXPECT_EQ(b, a);
  EXPECT_EQ(alloc.CachedBytes(), 0);
  EXPECT_EQ(alloc.CurrentBytes(), 100001);
  // Another size does not take it.
  alloc.Deallocate(b, 100001);
  void* c = alloc.Allocate(300000);
  EXPECT_NE(c, a);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c) % CpuAllocator::kAlignment, 0u);
  alloc.Deallocate(c, 300000);
  alloc.ReleaseCache();
  EXPECT_EQ(alloc.CachedBytes(), 0);
}

TEST(CpuAllocatorTest, CacheIsBoundedAndCanBeOff) {
  CpuAllocator alloc(/*cache_limit_bytes=*/3 * 8192);
  std::vector<void*> blocks;
  for (int i = 0; i < 10; ++i) blocks.push_back(alloc.Allocate(8192));
  for (void* p : blocks) alloc.Deallocate(p, 8192);
  EXPECT_EQ(alloc.CachedBytes(), 3 * 8192);
  // Small blocks are never cached.
  alloc.Deallocate(alloc.Allocate(100), 100);
  EXPECT_EQ(alloc.CachedBytes(), 3 * 8192);

  CpuAllocator off(/*cache_limit_bytes=*/0);
  off.Deallocate(off.Allocate(1 << 20), 1 << 20);
  EXPECT_EQ(off.CachedBytes(), 0);
  EXPECT_EQ(off.CurrentBytes(), 0);
}

TEST(CpuAllocatorTest, ConcurrentAllocateAndFreeKeepBlocksDistinct) {
  CpuAllocator alloc(/*cache_limit_bytes=*/1 << 20);
  constexpr int kThreads = 4, kRounds = 200;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&alloc, &failures, t] {
      for (int r = 0; r < kRounds; ++r) {
        const size_t bytes = 4096 * (1 + (r + t) % 3);
        auto* p = static_cast<unsigned char*>(alloc.Allocate(bytes));
        if (p == nullptr) {
          ++failures[t];
          continue;
        }
        // A block handed to two threads at once would be overwritten here.
        std::memset(p, t + 1, bytes);
        for (size_t i = 0; i < bytes; i += 512) failures[t] += p[i] != t + 1;
        alloc.Deallocate(p, bytes);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << t;
  EXPECT_EQ(alloc.CurrentBytes(), 0);
  EXPECT_LE(alloc.CachedBytes(), 1 << 20);
}

// The VmFlags line of the mapping in /proc/self/smaps that holds `p`, or
// "" if none does.
std::string VmFlagsOfMappingAt(const void* p) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long long lo = 0, hi = 0;
    char dash = 0;
    if (std::sscanf(line.c_str(), "%llx%c%llx", &lo, &dash, &hi) == 3 && dash == '-') {
      inside = at >= lo && at < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(CpuAllocatorTest, LargeBlocksStartOnHugePagesAndAskForThem) {
  if (!CpuAllocator::kMapsLargeBlocks) GTEST_SKIP() << "large blocks come from malloc here";
  for (bool huge : {true, false}) {
    SCOPED_TRACE(huge ? "huge pages on" : "huge pages off");
    CpuAllocator alloc(CpuAllocator::kDefaultCacheLimitBytes, huge);
    // Two huge pages and a bit: the tail past the last whole huge page
    // must be usable too.
    const size_t bytes = 2 * CpuAllocator::kHugePageBytes + 100;
    auto* a = static_cast<unsigned char*>(alloc.Allocate(bytes));
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % CpuAllocator::kHugePageBytes, 0u);
    std::memset(a, 0x5a, bytes);
    EXPECT_EQ(a[bytes - 1], 0x5a);
    const std::string flags = VmFlagsOfMappingAt(a);
    ASSERT_FALSE(flags.empty());
    // "hg": the kernel's mark for MADV_HUGEPAGE.
    EXPECT_EQ(flags.find(" hg") != std::string::npos, huge) << flags;
    EXPECT_EQ(alloc.CurrentBytes(), static_cast<int64_t>(bytes));
    // Cached and handed out again like any other block.
    alloc.Deallocate(a, bytes);
    EXPECT_GT(alloc.CachedBytes(), 0);
    void* b = alloc.Allocate(bytes);
    EXPECT_EQ(b, a);
    alloc.Deallocate(b, bytes);
    // Past the cache, the mapping goes back to the system.
    alloc.ReleaseCache();
    EXPECT_EQ(VmFlagsOfMappingAt(a), "");
  }
  // Just below the threshold: a normal malloc block (64-byte aligned).
  CpuAllocator alloc;
  void* c = alloc.Allocate(CpuAllocator::kHugePageBytes - 4096);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c) % CpuAllocator::kAlignment, 0u);
  alloc.Deallocate(c, CpuAllocator::kHugePageBytes - 4096);
}

TEST(CpuAllocatorTest, MidSizedBlocksShareHugePagesWhenAsked) {
  if (!CpuAllocator::kMapsLargeBlocks) GTEST_SKIP() << "blocks come from malloc here";
  for (bool huge : {true, false}) {
    SCOPED_TRACE(huge ? "huge pages on" : "huge pages off");
    CpuAllocator alloc(/*cache_limit_bytes=*/0, huge);
    const size_t bytes = 512 << 10;
    void* a = alloc.Allocate(bytes);
    void* b = alloc.Allocate(bytes);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    const std::string flags = VmFlagsOfMappingAt(a);
    EXPECT_EQ(flags.find(" hg") != std::string::npos, huge) << flags;
    // On: two quarters of one huge page.
    const auto slab = [](void* p) { return reinterpret_cast<uintptr_t>(p) / kHugePageBytes; };
    if (huge) {
      EXPECT_EQ(slab(a), slab(b));
    }
    alloc.Deallocate(a, bytes);
    alloc.Deallocate(b, bytes);
    EXPECT_EQ(alloc.CurrentBytes(), 0);
  }
}

TEST(HugePageSlabsTest, FitsSizesThatFillAHugePage) {
  EXPECT_FALSE(HugePageSlabs::Fits(124 << 10));
  EXPECT_TRUE(HugePageSlabs::Fits(128 << 10));  // sixteen to a slab
  EXPECT_TRUE(HugePageSlabs::Fits(132 << 10));  // fifteen, 68 KiB unused
  EXPECT_TRUE(HugePageSlabs::Fits(512 << 10));
  EXPECT_TRUE(HugePageSlabs::Fits(1 << 20));
  EXPECT_FALSE(HugePageSlabs::Fits((1 << 20) + 4096));  // a 2 MiB slab for 1 MiB + 4 KiB
  EXPECT_FALSE(HugePageSlabs::Fits(700 << 10));         // two, 648 KiB unused
  EXPECT_TRUE(HugePageSlabs::Fits(1792 << 10));         // one, an eighth unused
  EXPECT_FALSE(HugePageSlabs::Fits(kHugePageBytes));
}

TEST(HugePageSlabsTest, CarvesSlabsAndUnmapsThemWhenAllBlocksAreBack) {
  HugePageSlabs slabs;
  const size_t bytes = 512 << 10;
  std::vector<unsigned char*> blocks;
  for (int i = 0; i < 5; ++i) {
    blocks.push_back(static_cast<unsigned char*>(slabs.Take(bytes)));
    ASSERT_NE(blocks.back(), nullptr);
  }
  // Four to a slab, on a huge-page boundary; the fifth opens a second slab.
  EXPECT_EQ(slabs.slabs(), 2u);
  const uintptr_t base = reinterpret_cast<uintptr_t>(blocks[0]) & ~(kHugePageBytes - 1);
  std::set<uintptr_t> offsets;
  for (int i = 0; i < 4; ++i) {
    const auto at = reinterpret_cast<uintptr_t>(blocks[i]);
    EXPECT_EQ(at & ~(kHugePageBytes - 1), base) << i;
    offsets.insert(at - base);
  }
  EXPECT_EQ(offsets.size(), 4u);
  EXPECT_NE(VmFlagsOfMappingAt(blocks[0]).find(" hg"), std::string::npos);
  // Blocks do not overlap: each keeps its own pattern.
  for (int i = 0; i < 5; ++i) std::memset(blocks[i], i + 1, bytes);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(blocks[i][0], i + 1);
    EXPECT_EQ(blocks[i][bytes - 1], i + 1);
  }
  // A block given back is taken again before a new slab opens.
  slabs.Give(blocks[2]);
  EXPECT_EQ(slabs.Take(bytes), blocks[2]);
  for (unsigned char* p : blocks) slabs.Give(p);
  EXPECT_EQ(slabs.slabs(), 0u);
  EXPECT_EQ(VmFlagsOfMappingAt(blocks[0]), "");
  // Sixteen to a slab at the smallest size.
  std::vector<void*> small;
  for (int i = 0; i < 17; ++i) small.push_back(slabs.Take(HugePageSlabs::kMinBlockBytes));
  EXPECT_EQ(std::set<void*>(small.begin(), small.end()).size(), 17u);
  EXPECT_EQ(slabs.slabs(), 2u);
  for (void* p : small) slabs.Give(p);
  EXPECT_EQ(slabs.slabs(), 0u);
  // One block to a slab at the largest sizes.
  void* big = slabs.Take(1792 << 10);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(slabs.slabs(), 1u);
  slabs.Give(big);
  EXPECT_EQ(slabs.slabs(), 0u);
}

}  // namespace
}  // namespace tpx
