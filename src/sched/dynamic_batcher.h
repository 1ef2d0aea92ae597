// The encoder scheduler: Triton's dynamic batcher. Requests queue per priority level; one
// owner thread forms batches with BatchPolicy and hands each to a runner callback.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "sched/batch_policy.h"
#include "sched/batching_options.h"

namespace ferry::sched {

// One unit of work. The payload is opaque to the batcher. Owned by whoever holds the
// shared_ptr; the batcher writes the "filled by Enqueue" fields once, before the item is
// visible to its thread, and never touches the item again after handing it to the runner
// or rejecting it.
struct BatchItem {
  // Set by the caller.
  int priority_level = 0;  // 1 (highest) .. priority_levels; 0: default_priority_level
  int64_t timeout_us = 0;  // 0: the level's; shorter ones honoured per its QueuePolicy
  std::shared_ptr<void> payload;
  // Called once when the item does not complete through the runner: Cancelled (on the
  // thread calling Cancel), DeadlineExceeded (timed out in a kReject level), Unavailable
  // (stopped without draining), Internal (its batch's runner threw). Never called under
  // the batcher's lock, so it may call back into the batcher.
  std::function<void(const Status&)> on_reject;

  // Filled by Enqueue.
  uint64_t id = 0;     // unique per batcher, from 1
  uint64_t group = 0;  // the first id of its EnqueueGroup call (its own id for Enqueue)
  int level = 0;       // the resolved priority level
  BatchTime enqueue_time;
  BatchTime deadline = kNoDeadline;  // enqueue_time + the effective timeout
};

// Runs one batch on the batcher's thread and completes every item itself (the batcher
// reports nothing for items that reach it). Should not throw; if it does, the batcher
// rejects every item of the batch with Internal, so a runner that may throw after
// completing some items must make completion idempotent.
using BatchRunner = std::function<void(std::vector<std::shared_ptr<BatchItem>>& batch)>;

// What happened to one batch, for metrics.
struct BatchReport {
  int batch_size = 0;
  BatchTrigger trigger = BatchTrigger::kNone;
  std::vector<int64_t> queue_wait_us;  // per item, in batch order: enqueue to run start
  int64_t max_queue_wait_us = 0;
  int64_t run_us = 0;
  bool runner_failed = false;  // the runner threw and the batch was rejected with Internal
};

// Called on the batcher's thread after each batch. Must not block for long: the next
// batch waits for it.
using BatchObserver = std::function<void(const BatchReport& report)>;

// Counters and gauges at one instant.
struct DynamicBatcherStats {
  std::vector<int> queued_per_level;  // [0] is priority level 1
  int queued_total = 0;
  uint64_t batches_run = 0;            // batches handed to the runner
  int last_batch_size = 0;
  uint64_t items_run = 0;              // items handed to the runner
  uint64_t runner_failures = 0;        // batches whose runner threw
  uint64_t rejected_queue_full = 0;    // Enqueue -> ResourceExhausted
  uint64_t rejected_timeout = 0;       // DeadlineExceeded while queued
  uint64_t cancelled = 0;
};

// Thread-safe. Every method may be called from any thread, the runner and the callbacks
// included (none runs under the batcher's lock), except that the runner's Stop cannot
// wait for itself (see Stop).
//
// Lifecycle: construct, Enqueue (allowed before Start: items wait for it), Start, ...,
// Stop. Timed-out items are rejected when the batcher thread next decides, which is at
// their deadline while it waits and after the current batch while the runner is busy.
class DynamicBatcher {
 public:
  // `name` names the thread ("batch:<name>", truncated to 15 characters) and log lines.
  DynamicBatcher(std::string name, DynamicBatchingOptions options, BatchRunner runner,
                 BatchObserver observer = nullptr);
  // Stop(/*drain=*/false): queued items are rejected with Unavailable. Call Stop(true)
  // first for a graceful shutdown.
  ~DynamicBatcher();

  DynamicBatcher(const DynamicBatcher&) = delete;
  DynamicBatcher& operator=(const DynamicBatcher&) = delete;

  // Validates the options and starts the thread. InvalidArgument for bad options,
  // FailedPrecondition when already started or stopped.
  Status Start();

  // Queues `item` and returns its id. InvalidArgument: null item, an item already
  // enqueued, priority outside [0, priority_levels], negative timeout. ResourceExhausted:
  // the level's max_queue_size is reached ("queue full"). Unavailable: stopping or stopped.
  Result<uint64_t> Enqueue(std::shared_ptr<BatchItem> item);

  // Queues the items of one request together (the windows of a long input): all of them or
  // none. They must ask for the same priority and timeout. The level's max_queue_size is
  // checked once, before them, so it counts requests that arrive rather than their
  // windows: a request is admitted while its level holds fewer than max_queue_size items.
  // Returns their ids in order; errors as Enqueue.
  Result<std::vector<uint64_t>> EnqueueGroup(const std::vector<std::shared_ptr<BatchItem>>& items);

  // Removes a queued item and rejects it with Cancelled. False when the item is not
  // queued (running, finished, rejected or unknown).
  bool Cancel(uint64_t id);
  // Cancel for many items at once (one lock); returns how many were still queued.
  size_t CancelAll(const std::vector<uint64_t>& ids);

  // Stops accepting (Enqueue -> Unavailable), lets the running batch finish, then runs
  // everything still queued (drain) or rejects it with Unavailable, and joins the thread.
  // Idempotent; later calls return once the first has finished. Before Start, queued
  // items are rejected with Unavailable whatever `drain` says. Called from the runner it
  // only requests the stop (the thread cannot join itself); the batcher must not be
  // destroyed from its own runner. With `drain`, batches start only until `drain_deadline`;
  // what is still queued then is rejected (the batch running at the deadline finishes).
  void Stop(bool drain, BatchTime drain_deadline = BatchTime::max());

  DynamicBatcherStats Stats() const;
  const std::string& name() const { return name_; }
  const DynamicBatchingOptions& options() const { return policy_.options(); }

 private:
  enum class State { kCreated, kRunning, kStopping, kStopped };

  using LevelQueue = std::map<uint64_t, std::shared_ptr<BatchItem>>;  // id order == FIFO

  void Loop();
  BatchQueueSnapshot SnapshotLocked() const;
  std::shared_ptr<BatchItem> TakeLocked(uint64_t id);
  int QueuedTotalLocked() const;
  void RunBatch(std::vector<std::shared_ptr<BatchItem>>& batch, BatchTrigger trigger);
  void Reject(const std::vector<std::shared_ptr<BatchItem>>& items, const Status& status);

  const std::string name_;
  const BatchPolicy policy_;
  const Status options_status_;  // policy_.options().Validate()
  const BatchRunner runner_;
  const BatchObserver observer_;

  std::mutex stop_mu_;  // serializes Stop (one joiner)
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  State state_ = State::kCreated;         // GUARDED_BY(mu_)
  std::thread::id loop_thread_;           // GUARDED_BY(mu_); the batcher thread once it runs
  bool drain_ = false;                    // GUARDED_BY(mu_)
  BatchTime drain_deadline_ = BatchTime::max();  // GUARDED_BY(mu_)
  uint64_t next_id_ = 1;                  // GUARDED_BY(mu_)
  std::vector<LevelQueue> queues_;        // GUARDED_BY(mu_); [0] is level 1
  DynamicBatcherStats stats_;             // GUARDED_BY(mu_); queued_* computed on read
};

}  // namespace ferry::sched
