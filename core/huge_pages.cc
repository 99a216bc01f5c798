#include "core/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>

namespace tpx {
namespace {

constexpr size_t kPageBytes = 4096;

}  // namespace

void* MapHugePageAligned(size_t bytes, bool advise) {
  // Over-map by one huge page less a page, then cut the ends so the block
  // starts on a huge-page boundary; `bytes` is whole pages, so the cut
  // ends are too.
  const size_t span = bytes + kHugePageBytes - kPageBytes;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = aligned + bytes;
  if (start + span > end) munmap(reinterpret_cast<void*>(end), start + span - end);
  void* block = reinterpret_cast<void*>(aligned);
  if (advise) madvise(block, bytes, MADV_HUGEPAGE);
  return block;
}

void UnmapBlock(void* block, size_t bytes) { munmap(block, bytes); }

bool HugePageSlabs::Fits(size_t bytes) {
  return bytes >= kMinBlockBytes && bytes < kHugePageBytes &&
         kHugePageBytes % bytes <= kHugePageBytes / 8;
}

uint32_t HugePageSlabs::AllFree(size_t bytes) {
  const auto blocks = static_cast<uint32_t>(kHugePageBytes / bytes);  // 1 to 16
  return (uint32_t{1} << blocks) - 1;
}

void* HugePageSlabs::Take(size_t bytes) {
  std::vector<uintptr_t>& room = with_room_[bytes];
  if (room.empty()) {
    void* mapped = MapHugePageAligned(kHugePageBytes, /*advise=*/true);
    if (mapped == nullptr) return nullptr;
    const auto base = reinterpret_cast<uintptr_t>(mapped);
    slabs_[base] = Slab{bytes, AllFree(bytes)};
    room.push_back(base);
  }
  const uintptr_t base = room.back();
  Slab& slab = slabs_.at(base);
  const int i = __builtin_ctz(slab.free_mask);
  slab.free_mask &= ~(uint32_t{1} << i);
  if (slab.free_mask == 0) room.pop_back();
  return reinterpret_cast<void*>(base + static_cast<uintptr_t>(i) * bytes);
}

void HugePageSlabs::Give(void* block) {
  const auto at = reinterpret_cast<uintptr_t>(block);
  const uintptr_t base = at & ~(kHugePageBytes - 1);
  auto it = slabs_.find(base);
  if (it == slabs_.end()) return;  // not a slab block: a caller's bug
  Slab& slab = it->second;
  std::vector<uintptr_t>& room = with_room_[slab.block_bytes];
  if (slab.free_mask == 0) room.push_back(base);  // had no room until now
  slab.free_mask |= uint32_t{1} << ((at - base) / slab.block_bytes);
  if (slab.free_mask != AllFree(slab.block_bytes)) return;
  room.erase(std::find(room.begin(), room.end(), base));
  slabs_.erase(it);
  UnmapBlock(reinterpret_cast<void*>(base), kHugePageBytes);
}

}  // namespace tpx
