#include "sched/batch_policy.h"

#include <algorithm>
#include <unordered_set>
#include <utility>

namespace ferry::sched {

BatchTime AddMicros(BatchTime t, int64_t us) {
  if (us <= 0) return t;
  if (t == kNoDeadline) return kNoDeadline;
  const auto room = std::chrono::duration_cast<std::chrono::microseconds>(kNoDeadline - t);
  if (us >= room.count()) return kNoDeadline;
  return t + std::chrono::microseconds(us);
}

int64_t EffectiveTimeoutUs(const QueuePolicy& policy, int64_t requested_us) {
  if (requested_us > 0 && policy.allow_timeout_override &&
      (policy.timeout_us == 0 || requested_us < policy.timeout_us)) {
    return requested_us;
  }
  return policy.timeout_us;
}

const char* BatchTriggerName(BatchTrigger trigger) {
  switch (trigger) {
    case BatchTrigger::kNone: return "none";
    case BatchTrigger::kMaxBatchSize: return "max_batch_size";
    case BatchTrigger::kPreferredBatchSize: return "preferred_batch_size";
    case BatchTrigger::kQueueDelay: return "queue_delay";
    case BatchTrigger::kNoDelay: return "no_delay";
    case BatchTrigger::kDrain: return "drain";
  }
  return "unknown";
}

BatchPolicy::BatchPolicy(DynamicBatchingOptions options) : options_(std::move(options)) {}

int BatchPolicy::BatchSizeFor(int available) const {
  const int limit = std::min(available, options_.max_batch_size);
  // Preferred sizes are ascending: the last one that fits is the largest.
  int best = 0;
  for (int size : options_.preferred_batch_sizes) {
    if (size <= limit) best = size;
  }
  return best > 0 ? best : limit;
}

BatchDecision BatchPolicy::Decide(const BatchQueueSnapshot& queues, BatchTime now, bool draining) const {
  BatchDecision decision;
  // Not timed out, per priority level in FIFO order; and timed out in a kDelay level.
  std::vector<std::vector<const BatchQueueEntry*>> on_time(queues.levels.size());
  std::vector<uint64_t> delayed;
  BatchTime oldest = kNoDeadline;
  BatchTime next_reject = kNoDeadline;

  for (size_t index = 0; index < queues.levels.size(); ++index) {
    const QueuePolicy& policy = options_.PolicyFor(static_cast<int>(index) + 1);
    const bool rejects = policy.timeout_action == TimeoutAction::kReject;
    for (const BatchQueueEntry& entry : queues.levels[index]) {
      const bool timed_out = entry.deadline != kNoDeadline && entry.deadline <= now;
      if (timed_out && rejects) {
        decision.expire.push_back(entry.id);
        continue;
      }
      if (timed_out) {
        delayed.push_back(entry.id);
      } else {
        on_time[index].push_back(&entry);
        // A kDelay deadline only reorders the queue, which matters when a batch forms;
        // only a rejecting one needs the batcher awake at that moment.
        if (rejects) next_reject = std::min(next_reject, entry.deadline);
      }
      oldest = std::min(oldest, entry.enqueue_time);
    }
  }

  size_t on_time_count = 0;
  for (const auto& level : on_time) on_time_count += level.size();
  const int queued = static_cast<int>(on_time_count + delayed.size());
  if (queued == 0) {
    decision.wake_at = next_reject;
    return decision;
  }

  const int largest_preferred =
      options_.preferred_batch_sizes.empty() ? 0 : options_.preferred_batch_sizes.back();
  const BatchTime delay_end = AddMicros(oldest, options_.max_queue_delay_us);
  if (draining) {
    decision.trigger = BatchTrigger::kDrain;
  } else if (queued >= options_.max_batch_size) {
    decision.trigger = BatchTrigger::kMaxBatchSize;
  } else if (largest_preferred > 0 && queued >= largest_preferred) {
    decision.trigger = BatchTrigger::kPreferredBatchSize;
  } else if (options_.max_queue_delay_us == 0) {
    decision.trigger = BatchTrigger::kNoDelay;
  } else if (delay_end <= now) {
    decision.trigger = BatchTrigger::kQueueDelay;
  } else {
    decision.wake_at = std::min(delay_end, next_reject);
    return decision;
  }

  decision.action = BatchDecision::Action::kRun;
  const size_t size = static_cast<size_t>(BatchSizeFor(queued));
  decision.take.reserve(size);
  // Within a level, every request queued there first gets one item into the batch (in the
  // order the requests arrived), then the rest fills in FIFO order: a request of a few inputs
  // behind one of thousands runs in the next batch instead of after all of them, while the
  // large one still gets nearly every slot.
  std::unordered_set<uint64_t> seen;
  std::vector<char> taken;
  for (const auto& level : on_time) {
    if (decision.take.size() >= size) break;
    seen.clear();
    taken.assign(level.size(), 0);
    for (size_t i = 0; i < level.size() && decision.take.size() < size; ++i) {
      const uint64_t group = level[i]->group != 0 ? level[i]->group : level[i]->id;
      if (seen.insert(group).second) {
        decision.take.push_back(level[i]->id);
        taken[i] = 1;
      }
    }
    for (size_t i = 0; i < level.size() && decision.take.size() < size; ++i) {
      if (!taken[i]) decision.take.push_back(level[i]->id);
    }
  }
  for (size_t i = 0; i < delayed.size() && decision.take.size() < size; ++i) {
    decision.take.push_back(delayed[i]);
  }
  decision.wake_at = now;
  return decision;
}

}  // namespace ferry::sched
