#include "sched/dynamic_batcher.h"

#include <algorithm>
#include <exception>
#include <system_error>
#include <utility>

#include "core/logging.h"
#include "core/thread_pool.h"

namespace ferry::sched {
namespace {

// Cap on one idle wait, so that no wait is unbounded even when nothing is due.
constexpr auto kMaxIdleWait = std::chrono::seconds(1);

int64_t MicrosBetween(BatchTime from, BatchTime to) {
  return std::chrono::duration_cast<std::chrono::microseconds>(to - from).count();
}

// Callbacks belong to the caller; an exception from one must not take the thread down.
void NotifyRejected(const std::string& batcher, BatchItem& item, const Status& status) {
  if (!item.on_reject) return;
  try {
    item.on_reject(status);
  } catch (const std::exception& e) {
    FERRY_LOG_ERROR("dynamic batcher {}: on_reject of item {} threw: {}", batcher, item.id, e.what());
  } catch (...) {
    FERRY_LOG_ERROR("dynamic batcher {}: on_reject of item {} threw", batcher, item.id);
  }
}

}  // namespace

DynamicBatcher::DynamicBatcher(std::string name, DynamicBatchingOptions options, BatchRunner runner,
                               BatchObserver observer)
    : name_(std::move(name)),
      policy_(std::move(options)),
      options_status_(policy_.options().Validate()),
      runner_(std::move(runner)),
      observer_(std::move(observer)) {
  queues_.resize(static_cast<size_t>(std::max(1, policy_.options().priority_levels)));
}

DynamicBatcher::~DynamicBatcher() { Stop(/*drain=*/false); }

Status DynamicBatcher::Start() {
  if (!options_status_.ok()) return options_status_.WithContext("dynamic batcher " + name_);
  if (!runner_) return InvalidArgument("dynamic batcher " + name_ + " has no batch runner");
  std::lock_guard<std::mutex> stop_lock(stop_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kCreated) return FailedPrecondition("dynamic batcher " + name_ + " was already started");
  try {
    thread_ = std::thread(&DynamicBatcher::Loop, this);
  } catch (const std::system_error& e) {
    return Internal("dynamic batcher " + name_ + ": cannot start its thread: " + e.what());
  }
  state_ = State::kRunning;
  return Status::Ok();
}

Result<uint64_t> DynamicBatcher::Enqueue(std::shared_ptr<BatchItem> item) {
  if (!item) return InvalidArgument("null batch item");
  if (!options_status_.ok()) return options_status_.WithContext("dynamic batcher " + name_);
  const DynamicBatchingOptions& options = policy_.options();
  const int requested = item->priority_level;
  if (requested < 0 || requested > options.priority_levels) {
    return InvalidArgument("priority " + std::to_string(requested) + " is outside [0, " +
                           std::to_string(options.priority_levels) + "] (0: the default level)");
  }
  if (item->timeout_us < 0) return InvalidArgument("timeout_us must be >= 0");
  const int level = requested == 0 ? options.default_priority_level : requested;
  const QueuePolicy& policy = options.PolicyFor(level);
  const int64_t timeout_us = EffectiveTimeoutUs(policy, item->timeout_us);

  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kStopping || state_ == State::kStopped) {
      return Unavailable("dynamic batcher " + name_ + " is stopped");
    }
    if (item->id != 0) return InvalidArgument("batch item " + std::to_string(item->id) + " is already enqueued");
    LevelQueue& queue = queues_[static_cast<size_t>(level - 1)];
    if (policy.max_queue_size > 0 && queue.size() >= static_cast<size_t>(policy.max_queue_size)) {
      ++stats_.rejected_queue_full;
      return ResourceExhausted("queue full: priority level " + std::to_string(level) + " of " + name_ +
                               " holds " + std::to_string(queue.size()) + " items (max_queue_size " +
                               std::to_string(policy.max_queue_size) + ")");
    }
    id = next_id_++;
    item->id = id;
    item->group = id;
    item->level = level;
    item->enqueue_time = BatchClock::now();
    item->deadline = timeout_us > 0 ? AddMicros(item->enqueue_time, timeout_us) : kNoDeadline;
    queue.emplace(id, std::move(item));
  }
  cv_.notify_one();
  return id;
}

Result<std::vector<uint64_t>> DynamicBatcher::EnqueueGroup(const std::vector<std::shared_ptr<BatchItem>>& items) {
  if (items.empty()) return std::vector<uint64_t>();
  if (!options_status_.ok()) return options_status_.WithContext("dynamic batcher " + name_);
  const DynamicBatchingOptions& options = policy_.options();
  const BatchItem& first = *items.front();
  for (const auto& item : items) {
    if (!item) return InvalidArgument("null batch item");
    if (item->priority_level != first.priority_level || item->timeout_us != first.timeout_us) {
      return InvalidArgument("the items of a group must share their priority and timeout");
    }
  }
  const int requested = first.priority_level;
  if (requested < 0 || requested > options.priority_levels) {
    return InvalidArgument("priority " + std::to_string(requested) + " is outside [0, " +
                           std::to_string(options.priority_levels) + "] (0: the default level)");
  }
  if (first.timeout_us < 0) return InvalidArgument("timeout_us must be >= 0");
  const int level = requested == 0 ? options.default_priority_level : requested;
  const QueuePolicy& policy = options.PolicyFor(level);
  const int64_t timeout_us = EffectiveTimeoutUs(policy, first.timeout_us);

  std::vector<uint64_t> ids;
  ids.reserve(items.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kStopping || state_ == State::kStopped) {
      return Unavailable("dynamic batcher " + name_ + " is stopped");
    }
    for (const auto& item : items) {
      if (item->id != 0) return InvalidArgument("batch item " + std::to_string(item->id) + " is already enqueued");
    }
    LevelQueue& queue = queues_[static_cast<size_t>(level - 1)];
    if (policy.max_queue_size > 0 && queue.size() >= static_cast<size_t>(policy.max_queue_size)) {
      ++stats_.rejected_queue_full;
      return ResourceExhausted("queue full: priority level " + std::to_string(level) + " of " + name_ +
                               " holds " + std::to_string(queue.size()) + " items (max_queue_size " +
                               std::to_string(policy.max_queue_size) + ")");
    }
    // One arrival: every item gets the same enqueue time and deadline.
    const BatchTime now = BatchClock::now();
    const BatchTime deadline = timeout_us > 0 ? AddMicros(now, timeout_us) : kNoDeadline;
    const uint64_t group = next_id_;
    for (const auto& item : items) {
      const uint64_t id = next_id_++;
      item->id = id;
      item->group = group;
      item->level = level;
      item->enqueue_time = now;
      item->deadline = deadline;
      queue.emplace(id, item);
      ids.push_back(id);
    }
  }
  cv_.notify_one();
  return ids;
}

size_t DynamicBatcher::CancelAll(const std::vector<uint64_t>& ids) {
  std::vector<std::shared_ptr<BatchItem>> taken;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint64_t id : ids) {
      if (auto item = TakeLocked(id)) taken.push_back(std::move(item));
    }
    stats_.cancelled += taken.size();
  }
  for (const auto& item : taken) {
    NotifyRejected(name_, *item, Cancelled("request " + std::to_string(item->id) + " was cancelled while queued"));
  }
  return taken.size();
}

bool DynamicBatcher::Cancel(uint64_t id) {
  std::shared_ptr<BatchItem> item;
  {
    std::lock_guard<std::mutex> lock(mu_);
    item = TakeLocked(id);
    if (!item) return false;
    ++stats_.cancelled;
  }
  // A shorter queue never makes the batcher act sooner, so it need not be woken.
  NotifyRejected(name_, *item, Cancelled("request " + std::to_string(id) + " was cancelled while queued"));
  return true;
}

void DynamicBatcher::Stop(bool drain, BatchTime drain_deadline) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (std::this_thread::get_id() == loop_thread_) {
      if (state_ == State::kRunning) {
        state_ = State::kStopping;
        drain_ = drain;
        drain_deadline_ = drain_deadline;
      }
      return;
    }
  }
  std::lock_guard<std::mutex> stop_lock(stop_mu_);
  std::vector<std::shared_ptr<BatchItem>> never_started;
  {
    std::lock_guard<std::mutex> lock(mu_);
    switch (state_) {
      case State::kCreated:
        state_ = State::kStopped;
        for (LevelQueue& queue : queues_) {
          for (auto& [id, item] : queue) never_started.push_back(std::move(item));
          queue.clear();
        }
        break;
      case State::kRunning:
        state_ = State::kStopping;
        drain_ = drain;
        drain_deadline_ = drain_deadline;
        break;
      case State::kStopping:  // requested by the runner; join below
        break;
      case State::kStopped:
        return;
    }
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = State::kStopped;
  }
  Reject(never_started, Unavailable("dynamic batcher " + name_ + " stopped before it started"));
}

DynamicBatcherStats DynamicBatcher::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  DynamicBatcherStats stats = stats_;
  stats.queued_per_level.clear();
  for (const LevelQueue& queue : queues_) stats.queued_per_level.push_back(static_cast<int>(queue.size()));
  stats.queued_total = QueuedTotalLocked();
  return stats;
}

BatchQueueSnapshot DynamicBatcher::SnapshotLocked() const {
  BatchQueueSnapshot snapshot;
  snapshot.levels.resize(queues_.size());
  for (size_t level = 0; level < queues_.size(); ++level) {
    snapshot.levels[level].reserve(queues_[level].size());
    for (const auto& [id, item] : queues_[level]) {
      snapshot.levels[level].push_back(BatchQueueEntry{id, item->enqueue_time, item->deadline, item->group});
    }
  }
  return snapshot;
}

std::shared_ptr<BatchItem> DynamicBatcher::TakeLocked(uint64_t id) {
  for (LevelQueue& queue : queues_) {
    auto it = queue.find(id);
    if (it == queue.end()) continue;
    std::shared_ptr<BatchItem> item = std::move(it->second);
    queue.erase(it);
    return item;
  }
  return nullptr;
}

int DynamicBatcher::QueuedTotalLocked() const {
  size_t total = 0;
  for (const LevelQueue& queue : queues_) total += queue.size();
  return static_cast<int>(total);
}

void DynamicBatcher::Loop() {
  SetCurrentThreadName("batch:" + name_);
  std::unique_lock<std::mutex> lock(mu_);
  loop_thread_ = std::this_thread::get_id();
  for (;;) {
    const bool stopping = state_ == State::kStopping;
    const BatchTime now = BatchClock::now();
    if (stopping && (!drain_ || now >= drain_deadline_)) break;
    const BatchDecision decision = policy_.Decide(SnapshotLocked(), now, /*draining=*/stopping);

    std::vector<std::shared_ptr<BatchItem>> expired;
    for (uint64_t id : decision.expire) {
      if (auto item = TakeLocked(id)) expired.push_back(std::move(item));
    }
    stats_.rejected_timeout += expired.size();
    std::vector<std::shared_ptr<BatchItem>> batch;
    if (decision.action == BatchDecision::Action::kRun) {
      for (uint64_t id : decision.take) {
        if (auto item = TakeLocked(id)) batch.push_back(std::move(item));
      }
      if (!batch.empty()) {
        ++stats_.batches_run;
        stats_.items_run += batch.size();
        stats_.last_batch_size = static_cast<int>(batch.size());
      }
    }

    if (expired.empty() && batch.empty()) {
      if (stopping) break;  // drained
      // Enqueue and Stop change the state only under mu_, which is held from the decision
      // to this wait, so no notification can slip between them.
      cv_.wait_until(lock, std::min(decision.wake_at, now + kMaxIdleWait));
      continue;
    }

    lock.unlock();
    Reject(expired, DeadlineExceeded("request timed out in the queue of " + name_));
    if (!batch.empty()) RunBatch(batch, decision.trigger);
    lock.lock();
  }

  // Stopping without draining: whatever is still queued will not run.
  std::vector<std::shared_ptr<BatchItem>> left;
  for (LevelQueue& queue : queues_) {
    for (auto& [id, item] : queue) left.push_back(std::move(item));
    queue.clear();
  }
  lock.unlock();
  Reject(left, Unavailable("dynamic batcher " + name_ + " is stopping"));
}

void DynamicBatcher::RunBatch(std::vector<std::shared_ptr<BatchItem>>& batch, BatchTrigger trigger) {
  BatchReport report;
  report.batch_size = static_cast<int>(batch.size());
  report.trigger = trigger;
  const BatchTime start = BatchClock::now();
  report.queue_wait_us.reserve(batch.size());
  for (const auto& item : batch) {
    const int64_t wait_us = MicrosBetween(item->enqueue_time, start);
    report.queue_wait_us.push_back(wait_us);
    report.max_queue_wait_us = std::max(report.max_queue_wait_us, wait_us);
  }

  // The runner may reorder or clear its vector; a failure rejects what it was given.
  const std::vector<std::shared_ptr<BatchItem>> given = batch;
  Status failure;
  try {
    runner_(batch);
  } catch (const std::exception& e) {
    failure = Internal("batch runner of " + name_ + " threw: " + e.what());
  } catch (...) {
    failure = Internal("batch runner of " + name_ + " threw a non-standard exception");
  }
  report.run_us = MicrosBetween(start, BatchClock::now());

  if (!failure.ok()) {
    FERRY_LOG_ERROR("dynamic batcher {}: {}", name_, failure.message());
    report.runner_failed = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.runner_failures;
    }
    Reject(given, failure);
  }

  if (!observer_) return;
  try {
    observer_(report);
  } catch (const std::exception& e) {
    FERRY_LOG_ERROR("dynamic batcher {}: batch observer threw: {}", name_, e.what());
  } catch (...) {
    FERRY_LOG_ERROR("dynamic batcher {}: batch observer threw", name_);
  }
}

void DynamicBatcher::Reject(const std::vector<std::shared_ptr<BatchItem>>& items, const Status& status) {
  for (const auto& item : items) NotifyRejected(name_, *item, status);
}

}  // namespace ferry::sched
