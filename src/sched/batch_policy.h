// The dynamic batcher's scheduling decision as a pure function: (queue snapshot, options,
// now) -> BatchDecision. No clock, no locks, no threads, so every rule is testable as a table
// of explicit time points. The semantics follow Triton's dynamic batcher.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "sched/batching_options.h"

namespace ferry::sched {

using BatchClock = std::chrono::steady_clock;
using BatchTime = BatchClock::time_point;

// No deadline: the value of an item's deadline when neither it nor its level has a timeout.
inline constexpr BatchTime kNoDeadline = BatchTime::max();

// t + us microseconds, saturating at kNoDeadline instead of overflowing.
BatchTime AddMicros(BatchTime t, int64_t us);

// The timeout an item gets in a level with `policy`, given the one it asked for
// (0: none asked). The policy's timeout applies unless the policy allows overrides and
// the request is shorter, or the policy has none. 0: no timeout.
int64_t EffectiveTimeoutUs(const QueuePolicy& policy, int64_t requested_us);

// One queued item as the policy sees it.
struct BatchQueueEntry {
  uint64_t id = 0;
  BatchTime enqueue_time;
  BatchTime deadline = kNoDeadline;
  uint64_t group = 0;  // the request it belongs to (its items share it); 0: a group of its own
};

// The queues at one instant: levels[0] is priority level 1 (the highest), each in FIFO order.
struct BatchQueueSnapshot {
  std::vector<std::vector<BatchQueueEntry>> levels;
};

// Why a batch runs.
enum class BatchTrigger {
  kNone,                // waiting
  kMaxBatchSize,        // max_batch_size items are queued
  kPreferredBatchSize,  // enough items for the largest preferred batch size
  kQueueDelay,          // the oldest item has waited max_queue_delay_us
  kNoDelay,             // max_queue_delay_us is 0: run whatever is queued
  kDrain,               // the batcher is stopping and runs what is left
};

const char* BatchTriggerName(BatchTrigger trigger);

struct BatchDecision {
  enum class Action { kWait, kRun };

  Action action = Action::kWait;
  BatchTrigger trigger = BatchTrigger::kNone;
  // kRun: the ids of the batch, in the order the runner receives them.
  std::vector<uint64_t> take;
  // Items whose timeout expired in a kReject level: reject them with DeadlineExceeded.
  // Filled whatever the action.
  std::vector<uint64_t> expire;
  // kWait: the earliest time at which the decision can change without new items arriving
  // (a queue delay running out, a rejecting deadline). kNoDeadline when only an arrival can.
  BatchTime wake_at = kNoDeadline;
};

// Thread-compatible and stateless apart from the options. The caller (the batcher thread)
// asks only while the runner is idle, so "the engine is free" is implied by being asked.
//
// Rules:
//  - Items whose deadline has passed (deadline <= now) are timed out. In a level whose
//    policy says kReject they go to `expire`; in a kDelay level they stay queued but are
//    ordered after every item that has not timed out, of any level.
//  - Batch order: levels 1..n, FIFO within a level, then the timed-out delayed items in
//    the same order.
//  - A batch runs when max_batch_size items are queued, or enough for the largest preferred
//    batch size, or the oldest queued item has waited max_queue_delay_us, or that delay is 0,
//    or the caller is draining.
//  - Its size: the largest preferred batch size not above min(queued, max_batch_size); when
//    none fits (or none is configured), min(queued, max_batch_size).
class BatchPolicy {
 public:
  // `options` must have passed Validate().
  explicit BatchPolicy(DynamicBatchingOptions options);

  BatchDecision Decide(const BatchQueueSnapshot& queues, BatchTime now, bool draining = false) const;

  // The batch size taken when `available` items are queued and a batch runs.
  int BatchSizeFor(int available) const;

  const DynamicBatchingOptions& options() const { return options_; }

 private:
  DynamicBatchingOptions options_;
};

}  // namespace ferry::sched
