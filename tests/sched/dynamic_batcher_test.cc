#include "sched/dynamic_batcher.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ferry::sched {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

// Upper bound on every wait in these tests; reaching it is a failure, not a timing guess.
constexpr auto kWaitLimit = std::chrono::seconds(10);
// A batch holding this tag makes the runner throw.
constexpr int kThrowTag = 99;

int Tag(const BatchItem& item) { return *std::static_pointer_cast<int>(item.payload); }

// Records what the batcher does through its callbacks, and can hold the first batch inside
// the runner until Open() so that a test controls when the engine is busy.
class Harness {
 public:
  void HoldFirstBatch() { hold_first_ = true; }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }

  BatchRunner Runner() {
    return [this](std::vector<std::shared_ptr<BatchItem>>& batch) {
      std::vector<int> tags;
      for (const auto& item : batch) tags.push_back(Tag(*item));
      char thread_name[16] = {};
      pthread_getname_np(pthread_self(), thread_name, sizeof(thread_name));
      bool hold = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        batches_.push_back(tags);
        runner_thread_name_ = thread_name;
        hold = hold_first_ && batches_.size() == 1;
      }
      cv_.notify_all();
      for (int tag : tags) {
        if (tag == kThrowTag) throw std::runtime_error("bad batch");
      }
      if (hold) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, kWaitLimit, [this] { return open_; });
      }
    };
  }

  BatchObserver Observer() {
    return [this](const BatchReport& report) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        reports_.push_back(report);
      }
      cv_.notify_all();
    };
  }

  std::shared_ptr<BatchItem> Item(int tag, int priority = 0, int64_t timeout_us = 0) {
    auto item = std::make_shared<BatchItem>();
    item->priority_level = priority;
    item->timeout_us = timeout_us;
    item->payload = std::make_shared<int>(tag);
    item->on_reject = [this, tag](const Status& status) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        rejections_.emplace(tag, status);
      }
      cv_.notify_all();
    };
    return item;
  }

  bool WaitBatches(size_t n) { return WaitFor([&] { return batches_.size() >= n; }); }
  bool WaitReports(size_t n) { return WaitFor([&] { return reports_.size() >= n; }); }
  bool WaitRejections(size_t n) { return WaitFor([&] { return rejections_.size() >= n; }); }

  std::vector<std::vector<int>> batches() {
    std::lock_guard<std::mutex> lock(mu_);
    return batches_;
  }
  std::vector<BatchReport> reports() {
    std::lock_guard<std::mutex> lock(mu_);
    return reports_;
  }
  std::map<int, StatusCode> rejections() {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<int, StatusCode> codes;
    for (const auto& [tag, status] : rejections_) codes[tag] = status.code();
    return codes;
  }
  std::string runner_thread_name() {
    std::lock_guard<std::mutex> lock(mu_);
    return runner_thread_name_;
  }

 private:
  template <typename Predicate>
  bool WaitFor(Predicate done) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kWaitLimit, done);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool hold_first_ = false;
  bool open_ = false;
  std::vector<std::vector<int>> batches_;
  std::vector<BatchReport> reports_;
  std::map<int, Status> rejections_;
  std::string runner_thread_name_;
};

DynamicBatchingOptions Options(int max_batch_size, int64_t delay_us, std::vector<int> preferred = {}) {
  DynamicBatchingOptions options;
  options.max_batch_size = max_batch_size;
  options.max_queue_delay_us = delay_us;
  options.preferred_batch_sizes = std::move(preferred);
  return options;
}

uint64_t MustEnqueue(DynamicBatcher& batcher, std::shared_ptr<BatchItem> item) {
  Result<uint64_t> id = batcher.Enqueue(std::move(item));
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  return id.ok() ? *id : 0;
}

using Batches = std::vector<std::vector<int>>;

constexpr int64_t kLongDelayUs = 10'000'000;  // never reached in a passing test
constexpr int64_t kShortDelayUs = 50'000;

TEST(DynamicBatcherTest, FullBatchesRunWithoutWaitingForTheDelay) {
  Harness h;
  DynamicBatcher batcher("encoder", Options(4, kLongDelayUs), h.Runner(), h.Observer());
  for (int tag = 0; tag < 10; ++tag) MustEnqueue(batcher, h.Item(tag));
  ASSERT_TRUE(batcher.Start().ok());
  ASSERT_TRUE(h.WaitReports(2));
  EXPECT_EQ(h.batches(), (Batches{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(h.reports()[0].trigger, BatchTrigger::kMaxBatchSize);
  // Two left, far from the delay: they wait until the drain.
  EXPECT_EQ(batcher.Stats().queued_total, 2);
  batcher.Stop(/*drain=*/true);
  EXPECT_EQ(h.batches(), (Batches{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  EXPECT_EQ(h.reports()[2].trigger, BatchTrigger::kDrain);
  EXPECT_TRUE(h.rejections().empty());
}

TEST(DynamicBatcherTest, PartialBatchWaitsForTheDelay) {
  Harness h;
  DynamicBatcher batcher("encoder", Options(8, kShortDelayUs), h.Runner(), h.Observer());
  MustEnqueue(batcher, h.Item(0));
  MustEnqueue(batcher, h.Item(1));
  ASSERT_TRUE(batcher.Start().ok());
  ASSERT_TRUE(h.WaitReports(1));
  EXPECT_EQ(h.batches(), (Batches{{0, 1}}));
  const BatchReport report = h.reports()[0];
  EXPECT_EQ(report.trigger, BatchTrigger::kQueueDelay);
  EXPECT_EQ(report.batch_size, 2);
  ASSERT_EQ(report.queue_wait_us.size(), 2u);
  EXPECT_GE(report.queue_wait_us[0], kShortDelayUs);
  EXPECT_GE(report.max_queue_wait_us, report.queue_wait_us[1]);
  EXPECT_GE(report.run_us, 0);
}

TEST(DynamicBatcherTest, ZeroDelayRunsAtOnce) {
  Harness h;
  DynamicBatcher batcher("encoder", Options(8, 0), h.Runner(), h.Observer());
  ASSERT_TRUE(batcher.Start().ok());
  MustEnqueue(batcher, h.Item(0));
  ASSERT_TRUE(h.WaitReports(1));
  EXPECT_EQ(h.batches(), (Batches{{0}}));
  EXPECT_EQ(h.reports()[0].trigger, BatchTrigger::kNoDelay);
  EXPECT_EQ(h.runner_thread_name(), "batch:encoder");
}

TEST(DynamicBatcherTest, PreferredSizesAfterTheDelay) {
  Harness h;
  DynamicBatcher batcher("encoder", Options(8, kShortDelayUs, {4, 8}), h.Runner(), h.Observer());
  for (int tag = 0; tag < 6; ++tag) MustEnqueue(batcher, h.Item(tag));
  ASSERT_TRUE(batcher.Start().ok());
  ASSERT_TRUE(h.WaitReports(2));
  EXPECT_EQ(h.batches(), (Batches{{0, 1, 2, 3}, {4, 5}}));
  EXPECT_GE(h.reports()[0].max_queue_wait_us, kShortDelayUs);
  EXPECT_EQ(h.reports()[0].trigger, BatchTrigger::kQueueDelay);
}

TEST(DynamicBatcherTest, HigherPriorityGoesFirst) {
  Harness h;
  DynamicBatchingOptions options = Options(2, 0);
  options.priority_levels = 2;
  options.default_priority_level = 2;
  DynamicBatcher batcher("encoder", options, h.Runner(), h.Observer());
  auto low = h.Item(0, 2);
  auto default_level = h.Item(1, 0);
  auto high = h.Item(2, 1);
  MustEnqueue(batcher, low);
  MustEnqueue(batcher, default_level);
  MustEnqueue(batcher, high);
  EXPECT_EQ(default_level->level, 2);
  EXPECT_EQ(batcher.Stats().queued_per_level, (std::vector<int>{1, 2}));
  ASSERT_TRUE(batcher.Start().ok());
  ASSERT_TRUE(h.WaitBatches(2));
  EXPECT_EQ(h.batches(), (Batches{{2, 0}, {1}}));
}

// A one-input request behind a request of many inputs runs in the next batch, not after
// all of them; the large one still takes the other slots, in order.
TEST(DynamicBatcherTest, ASmallRequestIsNotStuckBehindALargeOne) {
  Harness h;
  DynamicBatcher batcher("encoder", Options(4, 0), h.Runner(), h.Observer());
  std::vector<std::shared_ptr<BatchItem>> large;
  for (int tag = 0; tag < 10; ++tag) large.push_back(h.Item(tag));
  ASSERT_TRUE(batcher.EnqueueGroup(large).ok());
  ASSERT_TRUE(batcher.EnqueueGroup({h.Item(100)}).ok());
  ASSERT_TRUE(batcher.EnqueueGroup({h.Item(200), h.Item(201)}).ok());
  ASSERT_TRUE(batcher.Start().ok());
  ASSERT_TRUE(h.WaitBatches(4));
  EXPECT_EQ(h.batches(), (Batches{{0, 100, 200, 1}, {2, 201, 3, 4}, {5, 6, 7, 8}, {9}}));
}

TEST(DynamicBatcherTest, EnqueueValidatesAndBoundsTheQueue) {
  Harness h;
  DynamicBatchingOptions options = Options(8, kLongDelayUs);
  options.priority_levels = 2;
  QueuePolicy bounded;
  bounded.max_queue_size = 2;
  options.priority_queue_policy[2] = bounded;
  DynamicBatcher batcher("encoder", options, h.Runner(), h.Observer());

  MustEnqueue(batcher, h.Item(0, 2));
  auto second = h.Item(1, 2);
  MustEnqueue(batcher, second);
  Result<uint64_t> full = batcher.Enqueue(h.Item(2, 2));
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("queue full"), std::string::npos) << full.status().message();
  MustEnqueue(batcher, h.Item(3, 1));  // level 1 is unbounded

  EXPECT_EQ(batcher.Enqueue(h.Item(4, -1)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(batcher.Enqueue(h.Item(5, 3)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(batcher.Enqueue(h.Item(6, 1, -5)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(batcher.Enqueue(nullptr).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(batcher.Enqueue(second).status().code(), StatusCode::kInvalidArgument);  // already queued

  const DynamicBatcherStats stats = batcher.Stats();
  EXPECT_EQ(stats.queued_per_level, (std::vector<int>{1, 2}));
  EXPECT_EQ(stats.queued_total, 3);
  EXPECT_EQ(stats.rejected_queue_full, 1u);
  EXPECT_TRUE(h.rejections().empty());  // refused items never get on_reject
}

TEST(DynamicBatcherTest, TimedOutItemIsRejected) {
  Harness h;
  DynamicBatchingOptions options = Options(8, kLongDelayUs);
  options.default_queue_policy.timeout_us = 20'000;
  options.default_queue_policy.timeout_action = TimeoutAction::kReject;
  DynamicBatcher batcher("encoder", options, h.Runner(), h.Observer());
  ASSERT_TRUE(batcher.Start().ok());
  MustEnqueue(batcher, h.Item(0));
  ASSERT_TRUE(h.WaitRejections(1));
  EXPECT_EQ(h.rejections(), (std::map<int, StatusCode>{{0, StatusCode::kDeadlineExceeded}}));
  EXPECT_TRUE(h.batches().empty());
  EXPECT_EQ(batcher.Stats().rejected_timeout, 1u);
  EXPECT_EQ(batcher.Stats().queued_total, 0);
}

TEST(DynamicBatcherTest, TimedOutDelayedItemRunsAfterTheOthers) {
  Harness h;
  h.HoldFirstBatch();
  DynamicBatchingOptions options = Options(1, 0);
  options.priority_levels = 2;
  options.default_queue_policy.timeout_us = kLongDelayUs;
  options.default_queue_policy.timeout_action = TimeoutAction::kDelay;
  DynamicBatcher batcher("encoder", options, h.Runner(), h.Observer());
  ASSERT_TRUE(batcher.Start().ok());
  MustEnqueue(batcher, h.Item(0));
  ASSERT_TRUE(h.WaitBatches(1));  // the runner holds item 0: the engine is busy

  auto short_timeout = h.Item(1, 1, /*timeout_us=*/1000);
  MustEnqueue(batcher, short_timeout);
  MustEnqueue(batcher, h.Item(2, 2));  // lower priority, but on time
  EXPECT_EQ(short_timeout->deadline - short_timeout->enqueue_time, microseconds(1000));
  while (BatchClock::now() <= short_timeout->deadline) std::this_thread::sleep_for(milliseconds(1));
  h.Open();

  ASSERT_TRUE(h.WaitBatches(3));
  EXPECT_EQ(h.batches(), (Batches{{0}, {2}, {1}}));
  EXPECT_TRUE(h.rejections().empty());
}

TEST(DynamicBatcherTest, TimeoutOverrideOnlyShortens) {
  Harness h;
  DynamicBatchingOptions options = Options(8, kLongDelayUs);
  options.priority_levels = 2;
  options.default_queue_policy.timeout_us = 10'000'000;
  QueuePolicy fixed;
  fixed.timeout_us = 10'000'000;
  fixed.allow_timeout_override = false;
  options.priority_queue_policy[2] = fixed;
  DynamicBatcher batcher("encoder", options, h.Runner(), h.Observer());

  const struct {
    int priority;
    int64_t requested_us;
    int64_t expected_us;
  } rows[] = {{1, 0, 10'000'000}, {1, 5'000'000, 5'000'000}, {1, 50'000'000, 10'000'000}, {2, 5'000'000, 10'000'000}};
  int tag = 0;
  for (const auto& row : rows) {
    auto item = h.Item(tag++, row.priority, row.requested_us);
    MustEnqueue(batcher, item);
    EXPECT_EQ(item->deadline - item->enqueue_time, microseconds(row.expected_us)) << row.requested_us;
  }
}

TEST(DynamicBatcherTest, CancelRemovesOnlyQueuedItems) {
  Harness h;
  DynamicBatcher batcher("encoder", Options(8, 0), h.Runner(), h.Observer());
  const uint64_t first = MustEnqueue(batcher, h.Item(0));
  const uint64_t second = MustEnqueue(batcher, h.Item(1));
  EXPECT_TRUE(batcher.Cancel(first));
  EXPECT_EQ(h.rejections(), (std::map<int, StatusCode>{{0, StatusCode::kCancelled}}));
  EXPECT_FALSE(batcher.Cancel(first));
  EXPECT_FALSE(batcher.Cancel(12345));

  ASSERT_TRUE(batcher.Start().ok());
  ASSERT_TRUE(h.WaitReports(1));
  EXPECT_EQ(h.batches(), (Batches{{1}}));
  EXPECT_FALSE(batcher.Cancel(second));  // already ran
  EXPECT_EQ(batcher.Stats().cancelled, 1u);
  EXPECT_EQ(h.rejections().size(), 1u);
}

TEST(DynamicBatcherTest, StopWithoutDrainRejectsQueued) {
  Harness h;
  DynamicBatcher batcher("encoder", Options(8, kLongDelayUs), h.Runner(), h.Observer());
  for (int tag = 0; tag < 3; ++tag) MustEnqueue(batcher, h.Item(tag));
  ASSERT_TRUE(batcher.Start().ok());
  batcher.Stop(/*drain=*/false);
  EXPECT_TRUE(h.batches().empty());
  EXPECT_EQ(h.rejections(), (std::map<int, StatusCode>{{0, StatusCode::kUnavailable},
                                                       {1, StatusCode::kUnavailable},
                                                       {2, StatusCode::kUnavailable}}));
  EXPECT_EQ(batcher.Enqueue(h.Item(3)).status().code(), StatusCode::kUnavailable);
  batcher.Stop(/*drain=*/true);  // idempotent
}

TEST(DynamicBatcherTest, StopWithDrainRunsQueued) {
  Harness h;
  DynamicBatcher batcher("encoder", Options(8, kLongDelayUs), h.Runner(), h.Observer());
  for (int tag = 0; tag < 3; ++tag) MustEnqueue(batcher, h.Item(tag));
  ASSERT_TRUE(batcher.Start().ok());
  batcher.Stop(/*drain=*/true);
  EXPECT_EQ(h.batches(), (Batches{{0, 1, 2}}));
  EXPECT_TRUE(h.rejections().empty());
  EXPECT_EQ(batcher.Enqueue(h.Item(3)).status().code(), StatusCode::kUnavailable);
}

// A drain has a deadline (the server's shutdown budget): the batch running when it passes
// finishes, nothing queued starts after it, and what is left is rejected.
TEST(DynamicBatcherTest, StopWithADrainDeadlineRejectsWhatHasNotStarted) {
  Harness h;
  h.HoldFirstBatch();
  DynamicBatcher batcher("encoder", Options(1, 0), h.Runner(), h.Observer());
  ASSERT_TRUE(batcher.Start().ok());
  for (int tag = 0; tag < 4; ++tag) MustEnqueue(batcher, h.Item(tag));
  ASSERT_TRUE(h.WaitBatches(1));
  std::thread stopper([&] { batcher.Stop(/*drain=*/true, BatchClock::now()); });
  // Release the held batch only once the stop has been requested (Enqueue then refuses).
  const auto until = std::chrono::steady_clock::now() + kWaitLimit;
  int probe = 50;
  while (std::chrono::steady_clock::now() < until &&
         batcher.Enqueue(h.Item(probe)).status().code() != StatusCode::kUnavailable) {
    ++probe;
  }
  h.Open();
  stopper.join();
  EXPECT_EQ(h.batches(), (Batches{{0}}));
  const std::map<int, StatusCode> rejected = h.rejections();
  for (int tag : {1, 2, 3}) EXPECT_EQ(rejected.count(tag), 1u) << tag;
  for (const auto& [tag, code] : rejected) EXPECT_EQ(code, StatusCode::kUnavailable) << tag;
}

TEST(DynamicBatcherTest, StopLetsTheRunningBatchFinish) {
  for (const bool drain : {false, true}) {
    SCOPED_TRACE(drain ? "drain" : "reject");
    Harness h;
    h.HoldFirstBatch();
    DynamicBatcher batcher("encoder", Options(1, 0), h.Runner(), h.Observer());
    ASSERT_TRUE(batcher.Start().ok());
    MustEnqueue(batcher, h.Item(0));
    ASSERT_TRUE(h.WaitBatches(1));
    MustEnqueue(batcher, h.Item(1));
    std::future<void> stopped = std::async(std::launch::async, [&] { batcher.Stop(drain); });
    // Stop is held by the running batch; this can only miss a bug, never invent one.
    EXPECT_EQ(stopped.wait_for(milliseconds(20)), std::future_status::timeout);
    h.Open();
    ASSERT_EQ(stopped.wait_for(kWaitLimit), std::future_status::ready);
    if (drain) {
      EXPECT_EQ(h.batches(), (Batches{{0}, {1}}));
      EXPECT_TRUE(h.rejections().empty());
    } else {
      EXPECT_EQ(h.batches(), (Batches{{0}}));
      EXPECT_EQ(h.rejections(), (std::map<int, StatusCode>{{1, StatusCode::kUnavailable}}));
    }
  }
}

TEST(DynamicBatcherTest, DestructorRejectsWhatNeverRan) {
  Harness h;
  {
    DynamicBatcher batcher("encoder", Options(8, kLongDelayUs), h.Runner(), h.Observer());
    MustEnqueue(batcher, h.Item(0));  // never started
  }
  EXPECT_EQ(h.rejections(), (std::map<int, StatusCode>{{0, StatusCode::kUnavailable}}));
}

TEST(DynamicBatcherTest, ThrowingRunnerRejectsItsBatchAndTheBatcherGoesOn) {
  Harness h;
  DynamicBatcher batcher("encoder", Options(8, 0), h.Runner(), h.Observer());
  MustEnqueue(batcher, h.Item(kThrowTag));
  MustEnqueue(batcher, h.Item(1));
  ASSERT_TRUE(batcher.Start().ok());
  ASSERT_TRUE(h.WaitReports(1));
  EXPECT_EQ(h.rejections(),
            (std::map<int, StatusCode>{{kThrowTag, StatusCode::kInternal}, {1, StatusCode::kInternal}}));
  EXPECT_TRUE(h.reports()[0].runner_failed);

  MustEnqueue(batcher, h.Item(2));
  ASSERT_TRUE(h.WaitReports(2));
  EXPECT_EQ(h.batches(), (Batches{{kThrowTag, 1}, {2}}));
  EXPECT_FALSE(h.reports()[1].runner_failed);
  EXPECT_EQ(batcher.Stats().runner_failures, 1u);
  EXPECT_EQ(h.rejections().size(), 2u);
}

TEST(DynamicBatcherTest, ItemsQueuedWhileRunningFormTheNextBatch) {
  Harness h;
  h.HoldFirstBatch();
  DynamicBatcher batcher("encoder", Options(8, 0), h.Runner(), h.Observer());
  ASSERT_TRUE(batcher.Start().ok());
  MustEnqueue(batcher, h.Item(0));
  ASSERT_TRUE(h.WaitBatches(1));
  for (int tag = 1; tag <= 3; ++tag) MustEnqueue(batcher, h.Item(tag));
  EXPECT_EQ(batcher.Stats().queued_total, 3);
  h.Open();
  ASSERT_TRUE(h.WaitReports(2));
  EXPECT_EQ(h.batches(), (Batches{{0}, {1, 2, 3}}));
  const DynamicBatcherStats stats = batcher.Stats();
  EXPECT_EQ(stats.batches_run, 2u);
  EXPECT_EQ(stats.last_batch_size, 3);
  EXPECT_EQ(stats.items_run, 4u);
  EXPECT_EQ(stats.queued_total, 0);
}

TEST(DynamicBatcherTest, StartChecksItsInputs) {
  Harness h;
  DynamicBatcher bad("encoder", Options(0, 0), h.Runner());
  EXPECT_EQ(bad.Start().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.Enqueue(h.Item(0)).status().code(), StatusCode::kInvalidArgument);

  DynamicBatcher no_runner("encoder", Options(8, 0), nullptr);
  EXPECT_EQ(no_runner.Start().code(), StatusCode::kInvalidArgument);

  DynamicBatcher twice("encoder", Options(8, 0), h.Runner());
  ASSERT_TRUE(twice.Start().ok());
  EXPECT_EQ(twice.Start().code(), StatusCode::kFailedPrecondition);
  twice.Stop(/*drain=*/true);
  EXPECT_EQ(twice.Start().code(), StatusCode::kFailedPrecondition);
}

// The windows of a long input: one request's items, queued together.
std::vector<std::shared_ptr<BatchItem>> Group(Harness& h, int first_tag, int n, int priority = 0,
                                              int64_t timeout_us = 0) {
  std::vector<std::shared_ptr<BatchItem>> items;
  for (int i = 0; i < n; ++i) items.push_back(h.Item(first_tag + i, priority, timeout_us));
  return items;
}

TEST(DynamicBatcherTest, AGroupSharesBatchesWithOtherRequestsAndSpansSeveral) {
  Harness h;
  DynamicBatcher batcher("encoder", Options(4, kLongDelayUs), h.Runner(), h.Observer());
  MustEnqueue(batcher, h.Item(0));                  // a short request
  auto ids = batcher.EnqueueGroup(Group(h, 10, 6));  // a long one: six windows
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  ASSERT_EQ(ids->size(), 6u);
  MustEnqueue(batcher, h.Item(1));
  ASSERT_TRUE(batcher.Start().ok());
  ASSERT_TRUE(h.WaitReports(2));
  batcher.Stop(/*drain=*/true);
  // Every queued request gets a slot of the first batch (the second short one too, rather
  // than riding with the last windows); the windows fill the rest in order.
  EXPECT_EQ(h.batches(), (Batches{{0, 10, 1, 11}, {12, 13, 14, 15}}));
}

TEST(DynamicBatcherTest, AGroupIsAdmittedWholeAndCountsOnceAgainstTheQueueBound) {
  Harness h;
  DynamicBatchingOptions options = Options(8, kLongDelayUs);
  options.default_queue_policy.max_queue_size = 3;
  options.default_queue_policy.timeout_us = 5'000'000;
  DynamicBatcher batcher("encoder", options, h.Runner(), h.Observer());
  // The level holds nothing: a group of ten is admitted whole.
  auto group = Group(h, 0, 10);
  auto ids = batcher.EnqueueGroup(group);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(batcher.Stats().queued_total, 10);
  // One arrival: the same enqueue time and deadline for every window.
  for (const auto& item : group) {
    EXPECT_EQ(item->enqueue_time, group[0]->enqueue_time);
    EXPECT_EQ(item->deadline - item->enqueue_time, microseconds(5'000'000));
  }
  // Now the level is over its bound: the next group is refused whole, and so is an item.
  auto refused = batcher.EnqueueGroup(Group(h, 20, 2));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(batcher.Stats().queued_total, 10);
  EXPECT_EQ(batcher.Enqueue(h.Item(30)).status().code(), StatusCode::kResourceExhausted);
  // Items of one group share their priority and timeout.
  auto mixed = Group(h, 40, 2);
  mixed[1]->priority_level = 1;
  EXPECT_EQ(batcher.EnqueueGroup(mixed).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(batcher.EnqueueGroup(group).status().code(), StatusCode::kInvalidArgument);  // already queued
  EXPECT_TRUE(batcher.EnqueueGroup({}).ok());
}

TEST(DynamicBatcherTest, CancellingAGroupFreesItsQueuedWindowsButNotTheRunningOnes) {
  Harness h;
  h.HoldFirstBatch();
  DynamicBatcher batcher("encoder", Options(2, 0), h.Runner(), h.Observer());
  ASSERT_TRUE(batcher.Start().ok());
  auto ids = batcher.EnqueueGroup(Group(h, 0, 8));
  ASSERT_TRUE(ids.ok());
  ASSERT_TRUE(h.WaitBatches(1));  // windows 0 and 1 are running (held)
  MustEnqueue(batcher, h.Item(100));  // another request behind them
  EXPECT_EQ(batcher.CancelAll(*ids), 6u);
  EXPECT_EQ(batcher.CancelAll(*ids), 0u);  // nothing left of it
  const auto rejected = h.rejections();
  EXPECT_EQ(rejected.size(), 6u);
  for (int tag = 2; tag < 8; ++tag) EXPECT_EQ(rejected.at(tag), StatusCode::kCancelled) << tag;
  h.Open();
  ASSERT_TRUE(h.WaitBatches(2));
  EXPECT_EQ(h.batches(), (Batches{{0, 1}, {100}}));  // the other request goes right on
  EXPECT_EQ(batcher.Stats().cancelled, 6u);
}

TEST(DynamicBatcherTest, AGroupsPriorityAppliesToAllItsWindows) {
  Harness h;
  h.HoldFirstBatch();
  DynamicBatchingOptions options = Options(3, 0);
  options.priority_levels = 2;
  DynamicBatcher batcher("encoder", options, h.Runner(), h.Observer());
  ASSERT_TRUE(batcher.Start().ok());
  MustEnqueue(batcher, h.Item(0, 2));
  ASSERT_TRUE(h.WaitBatches(1));
  ASSERT_TRUE(batcher.EnqueueGroup(Group(h, 10, 4, /*priority=*/2)).ok());  // a long low-priority document
  ASSERT_TRUE(batcher.EnqueueGroup(Group(h, 20, 2, /*priority=*/1)).ok());  // a short urgent one after it
  h.Open();
  ASSERT_TRUE(h.WaitBatches(3));
  EXPECT_EQ(h.batches(), (Batches{{0}, {20, 21, 10}, {11, 12, 13}}));
}

}  // namespace
}  // namespace ferry::sched
