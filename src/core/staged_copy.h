// Host bytes to a device through a ring of staging buffers (pinned host memory on a GPU),
// the fast path that loads weights: each tensor is cut into chunks on element boundaries
// (PlanChunks); a chunk is copied into the next free slot of the ring by several host
// threads at once (the source is usually an mmap'd file, so the threads also fault its pages
// in in parallel), and the target then moves the slot to the device asynchronously,
// converting the dtype on the way where it differs. A slot is refilled only after the
// target says its last transfer is done (WaitSlot), so while the device copies one chunk
// the host fills the next ones, and nothing waits for the device but a full ring and the
// one Finish at the end. Device-independent, so the chunking and the ordering are tested on
// the host; backend/cuda/weight_loader.* is the GPU's target.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace ferry {

// One tensor to move: `elements` values of `src_dtype` at `src` (host memory that stays
// valid only during StagedCopier::Copy) into `dst` (the target's address, room for
// `elements` values of `dst_dtype`).
struct StagedCopy {
  const void* src = nullptr;
  DType src_dtype = DType::kF32;
  void* dst = nullptr;
  DType dst_dtype = DType::kF32;
  int64_t elements = 0;
};

// A piece of one StagedCopy: elements [first, first + count).
struct StagedChunk {
  int64_t first = 0;
  int64_t count = 0;
};

// Cuts `elements` values of `element_bytes` bytes into chunks of at most `chunk_bytes`
// bytes (at least one element each), in order, covering every element once.
std::vector<StagedChunk> PlanChunks(int64_t elements, size_t element_bytes, size_t chunk_bytes);

// What a device provides to StagedCopier. Called from one thread at a time.
class StagingTarget {
 public:
  virtual ~StagingTarget() = default;
  virtual int slot_count() const = 0;
  virtual size_t slot_bytes() const = 0;
  // The host memory of a slot (pinned on a GPU): slot_bytes() bytes.
  virtual void* slot_memory(int slot) = 0;
  // Slot `slot` holds chunk `chunk` of `copy` (its raw source bytes, from the start of the
  // slot): move it to copy.dst (converted when the dtypes differ), asynchronously, and
  // remember this as the slot's last use.
  virtual Status Enqueue(int slot, const StagedCopy& copy, const StagedChunk& chunk) = 0;
  // Blocks until the device is done reading the slot's memory for its last Enqueue.
  virtual Status WaitSlot(int slot) = 0;
  // Blocks until everything enqueued has arrived.
  virtual Status Drain() = 0;
};

// Counters of a copier's work (for logs and benchmarks).
struct StagedCopyStats {
  uint64_t bytes = 0;         // source bytes moved
  uint64_t chunks = 0;
  uint64_t slot_waits = 0;    // times a slot was still in use when its turn came (device-bound)
  double fill_seconds = 0;    // host time spent filling slots
  double wait_seconds = 0;    // host time spent waiting for slots and the final drain
};

// Thread-compatible: one loading thread calls Copy and Finish; the fill threads are its own.
class StagedCopier {
 public:
  // `fill_threads` host threads copy each chunk into its slot (1: the calling thread alone).
  StagedCopier(StagingTarget& target, int fill_threads);
  ~StagedCopier();
  StagedCopier(const StagedCopier&) = delete;
  StagedCopier& operator=(const StagedCopier&) = delete;

  // Stages `copy`; returns once its source has been read (it may be freed), usually before
  // it has reached the device. On an error the copier is unusable (Finish reports it again).
  Status Copy(const StagedCopy& copy);
  // Waits for everything to arrive.
  Status Finish();
  const StagedCopyStats& stats() const { return stats_; }

 private:
  // Copies `bytes` from `src` to `dst` split among the fill threads.
  void Fill(void* dst, const void* src, size_t bytes);

  StagingTarget& target_;
  std::unique_ptr<ThreadPool> pool_;  // null with one fill thread
  int fill_threads_ = 1;
  int next_slot_ = 0;
  std::vector<bool> slot_used_;
  Status error_;
  StagedCopyStats stats_;
};

}  // namespace ferry
