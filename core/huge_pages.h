// CPU memory on transparent huge pages, for the CPU allocator
// (core/allocator.h). A block on huge pages costs one page-table entry and
// one fault per 2 MiB instead of 512, and a peer rank that reads it with
// process_vm_readv (the UCX plugin's single-copy path) pins one page per
// 2 MiB instead of 512, which took longer than the copy itself.
//
// Large blocks get a mapping of their own (MapHugePageAligned). Blocks of
// 128 KiB to 2 MiB share one: HugePageSlabs carves a 2 MiB slab into blocks
// of one size, for the sizes that fill a slab to within an eighth (a
// 1.1 MiB block would leave 0.9 MiB of its huge page unused).
//
//   HugePageSlabs slabs;
//   void* p = slabs.Take(512 << 10);  // a quarter of a huge page
//   slabs.Give(p);                    // its slab, all free again, is unmapped
#ifndef TPX_CORE_HUGE_PAGES_H_
#define TPX_CORE_HUGE_PAGES_H_

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace tpx {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;  // x86-64's

// Maps `bytes` (whole 4 KiB pages) of private memory starting on a
// huge-page boundary, advised for transparent huge pages when `advise`
// (advice only: where the kernel has THP off, normal pages). nullptr when
// out of memory. Release with UnmapBlock.
void* MapHugePageAligned(size_t bytes, bool advise);
void UnmapBlock(void* block, size_t bytes);

// Blocks carved from 2 MiB slabs on huge pages, each slab holding blocks of
// one size. Not thread-safe (the allocator calls it under its lock).
class HugePageSlabs {
 public:
  static constexpr size_t kMinBlockBytes = size_t{128} << 10;

  // Whether blocks of `bytes` (whole 4 KiB pages) come from slabs: from
  // kMinBlockBytes to below kHugePageBytes, where the blocks fill a slab to
  // within an eighth of it.
  static bool Fits(size_t bytes);

  HugePageSlabs() = default;
  // Slabs with blocks still out stay mapped (as a leaked malloc block
  // would); the others are unmapped already.
  ~HugePageSlabs() = default;
  HugePageSlabs(const HugePageSlabs&) = delete;
  HugePageSlabs& operator=(const HugePageSlabs&) = delete;

  // A block of `bytes` (Fits) from a slab with room, or from a new slab;
  // nullptr when out of memory.
  void* Take(size_t bytes);
  // Returns a block Take gave. A slab whose blocks are all back is unmapped.
  void Give(void* block);

  // Slabs mapped now.
  size_t slabs() const { return slabs_.size(); }

 private:
  struct Slab {
    size_t block_bytes;
    uint32_t free_mask;  // bit i: block i (of at most 16) is free
  };
  // The free_mask of a slab of blocks of `bytes` with all of them free.
  static uint32_t AllFree(size_t bytes);
  std::unordered_map<uintptr_t, Slab> slabs_;  // by base address
  // By block size: the slabs with a free block.
  std::unordered_map<size_t, std::vector<uintptr_t>> with_room_;
};

}  // namespace tpx

#endif  // TPX_CORE_HUGE_PAGES_H_
