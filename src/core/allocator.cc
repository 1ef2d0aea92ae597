#include "core/allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <new>

namespace ferry {

void* AlignedAlloc(size_t bytes) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void AlignedFree(void* p) { std::free(p); }

std::shared_ptr<void> AllocateStorage(size_t bytes) {
  if (bytes < kLargeAllocation) return std::shared_ptr<void>(AlignedAlloc(bytes), AlignedFree);
  constexpr size_t kPage = 4096;
  const size_t length = (bytes + kPage - 1) / kPage * kPage;
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return std::shared_ptr<void>(p, [length](void* q) { munmap(q, length); });
}

namespace {
size_t PageRounded(size_t bytes) {
  constexpr size_t kPage = 4096;
  return (bytes + kPage - 1) / kPage * kPage;
}
}  // namespace

std::shared_ptr<BlockPool> BlockPool::Create() { return std::shared_ptr<BlockPool>(new BlockPool()); }

BlockPool::~BlockPool() {
  for (const auto& [length, p] : idle_) munmap(p, length);
}

std::shared_ptr<void> BlockPool::Get(size_t bytes) {
  size_t length = PageRounded(bytes);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = idle_.lower_bound(length);
    if (it != idle_.end() && it->first <= 2 * length) {
      length = it->first;
      p = it->second;
      idle_.erase(it);
      stats_.idle_bytes -= length;
      ++stats_.reused;
    }
  }
  if (p == nullptr) {
    p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.live_bytes += length;
    stats_.high_water = std::max(stats_.high_water, stats_.live_bytes);
    TrimLocked();
  }
  std::weak_ptr<BlockPool> pool = weak_from_this();
  return std::shared_ptr<void>(p, [pool, length](void* q) {
    if (std::shared_ptr<BlockPool> owner = pool.lock()) {
      owner->Return(q, length);
    } else {
      munmap(q, length);
    }
  });
}

void BlockPool::Return(void* p, size_t length) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.live_bytes -= length;
  idle_.emplace(length, p);
  stats_.idle_bytes += length;
  TrimLocked();
}

// Largest idle blocks first, until live + idle fits under the high-water mark.
void BlockPool::TrimLocked() {
  while (!idle_.empty() && stats_.live_bytes + stats_.idle_bytes > stats_.high_water) {
    auto last = std::prev(idle_.end());
    munmap(last->second, last->first);
    stats_.idle_bytes -= last->first;
    idle_.erase(last);
  }
}

BlockPool::Stats BlockPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

namespace {
PinnedAllocFn g_pinned_alloc = nullptr;
PinnedFreeFn g_pinned_free = nullptr;
}  // namespace

void SetPinnedAllocator(PinnedAllocFn alloc, PinnedFreeFn free) {
  g_pinned_alloc = alloc;
  g_pinned_free = free;
}

std::shared_ptr<void> PinnedAlloc(size_t bytes) {
  if (g_pinned_alloc != nullptr) return std::shared_ptr<void>(g_pinned_alloc(bytes), g_pinned_free);
  return std::shared_ptr<void>(AlignedAlloc(bytes), AlignedFree);
}

Arena::Arena(size_t initial_bytes) {
  if (initial_bytes > 0) blocks_.push_back({static_cast<char*>(AlignedAlloc(initial_bytes)), initial_bytes});
}

Arena::~Arena() {
  for (Block& b : blocks_) AlignedFree(b.data);
}

void* Arena::Allocate(size_t bytes) {
  bytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  while (block_index_ < blocks_.size()) {
    Block& b = blocks_[block_index_];
    if (offset_ + bytes <= b.size) {
      void* p = b.data + offset_;
      offset_ += bytes;
      return p;
    }
    ++block_index_;
    offset_ = 0;
  }
  const size_t size = std::max(bytes, blocks_.empty() ? size_t{1} << 20 : blocks_.back().size * 2);
  blocks_.push_back({static_cast<char*>(AlignedAlloc(size)), size});
  block_index_ = blocks_.size() - 1;
  offset_ = bytes;
  return blocks_.back().data;
}

void Arena::Reset() {
  // Merge into one block of the total size once fragmentation appears, so later steps fit.
  if (blocks_.size() > 1) {
    size_t total = 0;
    for (Block& b : blocks_) {
      total += b.size;
      AlignedFree(b.data);
    }
    blocks_.clear();
    blocks_.push_back({static_cast<char*>(AlignedAlloc(total)), total});
  }
  block_index_ = 0;
  offset_ = 0;
}

size_t Arena::capacity() const {
  size_t total = 0;
  for (const Block& b : blocks_) total += b.size;
  return total;
}

}  // namespace ferry
