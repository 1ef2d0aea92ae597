// Host allocators: 64-byte aligned memory (cache lines, AVX-512 loads) and an arena for
// per-step scratch that is reset, not freed, between steps.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace ferry {

inline constexpr size_t kAlignment = 64;

// Aborts on out-of-memory only through std::bad_alloc (caught at module edges).
void* AlignedAlloc(size_t bytes);
void AlignedFree(void* p);

// Blocks from this size up are mapped from the kernel and unmapped when freed.
inline constexpr size_t kLargeAllocation = size_t{1} << 20;
// Tensor storage: AlignedAlloc below kLargeAllocation, whole pages from mmap at and above it.
// Large activations are freed back to the kernel at once, so a process that runs batch after
// batch holds one batch's activations, not what the heap kept of every earlier one (glibc
// raises its own mmap threshold after the first large free and then serves such blocks
// from a heap that fragments and grows with every batch).
std::shared_ptr<void> AllocateStorage(size_t bytes);

// Pinned host memory for fast device copies. Without a CUDA runtime it is ordinary aligned
// memory; the CUDA backend registers its own pinned allocator (cudaHostAlloc).
using PinnedAllocFn = void* (*)(size_t);
using PinnedFreeFn = void (*)(void*);
void SetPinnedAllocator(PinnedAllocFn alloc, PinnedFreeFn free);
std::shared_ptr<void> PinnedAlloc(size_t bytes);

// Large tensor storage kept for reuse: a block freed by its last tensor goes back to the
// pool instead of to the kernel, so a workload that runs pass after pass (prefill batches,
// encoder batches) does not page-fault and zero its activations afresh each time. Bounded:
// the pool's idle blocks plus the live ones never exceed the most the live blocks ever
// reached at once (one pass's activations), and the idle blocks are unmapped when the pool
// goes. Thread-safe. Blocks are page-rounded mappings; Get reuses the smallest idle block
// that holds the request and is at most twice its size.
class BlockPool : public std::enable_shared_from_this<BlockPool> {
 public:
  static std::shared_ptr<BlockPool> Create();
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // bytes >= kLargeAllocation; the contents are whatever the block last held.
  std::shared_ptr<void> Get(size_t bytes);

  struct Stats {
    size_t live_bytes = 0;
    size_t idle_bytes = 0;
    size_t high_water = 0;
    size_t reused = 0;  // Gets served by an idle block
  };
  Stats stats() const;

 private:
  BlockPool() = default;
  void Return(void* p, size_t length);
  void TrimLocked();

  mutable std::mutex mu_;
  std::multimap<size_t, void*> idle_;  // length -> block
  Stats stats_;
};

// Thread-compatible bump allocator. Reset() recycles everything handed out; memory grows
// to the high-water mark once and is then reused, so steady-state steps never allocate.
class Arena {
 public:
  explicit Arena(size_t initial_bytes = 0);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  void* Allocate(size_t bytes);
  template <typename T>
  T* AllocateArray(size_t n) { return static_cast<T*>(Allocate(n * sizeof(T))); }
  void Reset();
  size_t capacity() const;

 private:
  struct Block {
    char* data;
    size_t size;
  };
  std::vector<Block> blocks_;
  size_t block_index_ = 0;
  size_t offset_ = 0;
};

}  // namespace ferry
