#include "sched/batch_policy.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ferry::sched {
namespace {

using std::chrono::microseconds;

// Explicit instants: microseconds after an arbitrary origin.
BatchTime At(int64_t us) { return BatchTime{} + std::chrono::hours(1) + microseconds(us); }

BatchQueueEntry Item(uint64_t id, int64_t enqueue_us, int64_t deadline_us = -1) {
  return BatchQueueEntry{id, At(enqueue_us), deadline_us < 0 ? kNoDeadline : At(deadline_us)};
}

DynamicBatchingOptions Options(int max_batch_size, int64_t delay_us, std::vector<int> preferred = {},
                               int levels = 1) {
  DynamicBatchingOptions options;
  options.max_batch_size = max_batch_size;
  options.max_queue_delay_us = delay_us;
  options.preferred_batch_sizes = std::move(preferred);
  options.priority_levels = levels;
  options.default_priority_level = 1;
  return options;
}

DynamicBatchingOptions WithPolicy(DynamicBatchingOptions options, int level, TimeoutAction action) {
  QueuePolicy policy;
  policy.timeout_action = action;
  options.priority_queue_policy[level] = policy;
  return options;
}

using Action = BatchDecision::Action;

struct Case {
  std::string name;
  DynamicBatchingOptions options;
  BatchQueueSnapshot queues;
  int64_t now_us = 0;
  bool draining = false;
  Action action = Action::kWait;
  BatchTrigger trigger = BatchTrigger::kNone;
  std::vector<uint64_t> take;
  std::vector<uint64_t> expire;
  int64_t wake_us = -1;  // checked for kWait; -1: kNoDeadline
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  const auto reject_l1 = WithPolicy(Options(8, 1000), 1, TimeoutAction::kReject);
  const auto delay_l1 = WithPolicy(Options(8, 1000), 1, TimeoutAction::kDelay);

  cases.push_back({"empty_waits_for_an_arrival", Options(4, 1000), {{{}}}, 0, false, Action::kWait,
                   BatchTrigger::kNone, {}, {}, -1});
  cases.push_back({"full_batch_runs_before_the_delay", Options(4, 1000),
                   {{{Item(1, 0), Item(2, 1), Item(3, 2), Item(4, 3), Item(5, 4)}}}, 10, false, Action::kRun,
                   BatchTrigger::kMaxBatchSize, {1, 2, 3, 4}, {}, 0});
  cases.push_back({"partial_batch_waits_for_the_oldest_delay", Options(4, 1000), {{{Item(1, 0), Item(2, 300)}}}, 10,
                   false, Action::kWait, BatchTrigger::kNone, {}, {}, 1000});
  cases.push_back({"partial_batch_runs_when_the_delay_expires", Options(4, 1000), {{{Item(1, 0), Item(2, 300)}}},
                   1000, false, Action::kRun, BatchTrigger::kQueueDelay, {1, 2}, {}, 0});
  cases.push_back({"zero_delay_runs_at_once", Options(4, 0), {{{Item(1, 0)}}}, 0, false, Action::kRun,
                   BatchTrigger::kNoDelay, {1}, {}, 0});
  cases.push_back({"preferred_waits_below_the_largest", Options(16, 1000, {4, 8}),
                   {{{Item(1, 0), Item(2, 0), Item(3, 0), Item(4, 0), Item(5, 0), Item(6, 0)}}}, 500, false,
                   Action::kWait, BatchTrigger::kNone, {}, {}, 1000});
  cases.push_back({"preferred_after_the_delay_takes_the_largest_reachable", Options(16, 1000, {4, 8}),
                   {{{Item(1, 0), Item(2, 0), Item(3, 0), Item(4, 0), Item(5, 0), Item(6, 0)}}}, 1000, false,
                   Action::kRun, BatchTrigger::kQueueDelay, {1, 2, 3, 4}, {}, 0});
  cases.push_back({"preferred_unreachable_takes_everything", Options(16, 1000, {4, 8}),
                   {{{Item(5, 0), Item(6, 0)}}}, 1000, false, Action::kRun, BatchTrigger::kQueueDelay, {5, 6}, {},
                   0});
  cases.push_back({"largest_preferred_runs_at_once", Options(16, 1000, {4, 8}),
                   {{{Item(1, 0), Item(2, 0), Item(3, 0), Item(4, 0), Item(5, 0), Item(6, 0), Item(7, 0),
                      Item(8, 0), Item(9, 0)}}},
                   0, false, Action::kRun, BatchTrigger::kPreferredBatchSize, {1, 2, 3, 4, 5, 6, 7, 8}, {}, 0});
  cases.push_back({"priority_before_arrival_order", Options(2, 0, {}, 2),
                   {{{Item(3, 50)}, {Item(1, 0), Item(2, 10)}}}, 60, false, Action::kRun, BatchTrigger::kMaxBatchSize,
                   {3, 1}, {}, 0});
  cases.push_back({"delay_counts_from_the_oldest_of_any_level", Options(4, 1000, {}, 2),
                   {{{Item(2, 900)}, {Item(1, 0)}}}, 1000, false, Action::kRun, BatchTrigger::kQueueDelay, {2, 1},
                   {}, 0});
  cases.push_back({"reject_timeout_expires_the_item", reject_l1, {{{Item(1, 0, 100), Item(2, 50)}}}, 100, false,
                   Action::kWait, BatchTrigger::kNone, {}, {1}, 1050});
  cases.push_back({"reject_deadline_wakes_the_batcher", reject_l1, {{{Item(1, 0, 300)}}}, 0, false, Action::kWait,
                   BatchTrigger::kNone, {}, {}, 300});
  cases.push_back({"expired_items_do_not_count_toward_a_batch", WithPolicy(Options(2, 1000), 1, TimeoutAction::kReject),
                   {{{Item(1, 0, 10), Item(2, 5)}}}, 20, false, Action::kWait, BatchTrigger::kNone, {}, {1}, 1005});
  cases.push_back({"delay_deadline_does_not_wake_the_batcher", delay_l1, {{{Item(1, 0, 300)}}}, 0, false,
                   Action::kWait, BatchTrigger::kNone, {}, {}, 1000});
  cases.push_back({"delayed_item_goes_after_on_time_items_of_every_level",
                   WithPolicy(Options(8, 0, {}, 2), 1, TimeoutAction::kDelay),
                   {{{Item(1, 0, 50), Item(2, 10)}, {Item(3, 20)}}}, 100, false, Action::kRun,
                   BatchTrigger::kNoDelay, {2, 3, 1}, {}, 0});
  cases.push_back({"delayed_item_waits_for_room", WithPolicy(Options(1, 0, {}, 2), 1, TimeoutAction::kDelay),
                   {{{Item(1, 0, 50)}, {Item(2, 20)}}}, 100, false, Action::kRun, BatchTrigger::kMaxBatchSize, {2},
                   {}, 0});
  cases.push_back({"per_level_timeout_actions",
                   WithPolicy(WithPolicy(Options(8, 0, {}, 2), 1, TimeoutAction::kReject), 2, TimeoutAction::kDelay),
                   {{{Item(1, 0, 50)}, {Item(2, 0, 50)}}}, 100, false, Action::kRun, BatchTrigger::kNoDelay, {2}, {1},
                   0});
  cases.push_back({"draining_ignores_the_delay", Options(8, 1000), {{{Item(1, 0)}}}, 0, true, Action::kRun,
                   BatchTrigger::kDrain, {1}, {}, 0});
  cases.push_back({"draining_keeps_preferred_sizes", Options(16, 1000, {4, 8}),
                   {{{Item(1, 0), Item(2, 0), Item(3, 0), Item(4, 0), Item(5, 0), Item(6, 0)}}}, 0, true,
                   Action::kRun, BatchTrigger::kDrain, {1, 2, 3, 4}, {}, 0});
  cases.push_back({"draining_still_rejects_timeouts", reject_l1, {{{Item(1, 0, 10)}}}, 20, true, Action::kWait,
                   BatchTrigger::kNone, {}, {1}, -1});
  return cases;
}

TEST(BatchPolicyTest, DecisionTable) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(c.options.Validate().ok()) << c.options.Validate().ToString();
    const BatchPolicy policy(c.options);
    const BatchDecision d = policy.Decide(c.queues, At(c.now_us), c.draining);
    EXPECT_EQ(d.action, c.action);
    EXPECT_EQ(d.trigger, c.trigger) << BatchTriggerName(d.trigger);
    EXPECT_EQ(d.take, c.take);
    EXPECT_EQ(d.expire, c.expire);
    if (c.action == Action::kWait) {
      EXPECT_EQ(d.wake_at, c.wake_us < 0 ? kNoDeadline : At(c.wake_us));
    }
  }
}

// The 6-item preferred case over time: 4 after the delay, then the remaining 2 at once
// (they have waited as long).
TEST(BatchPolicyTest, PreferredSizesSplitASixItemQueue) {
  const BatchPolicy policy(Options(16, 1000, {4, 8}));
  BatchQueueSnapshot queues{{{Item(1, 0), Item(2, 0), Item(3, 0), Item(4, 0), Item(5, 0), Item(6, 0)}}};
  BatchDecision first = policy.Decide(queues, At(1000));
  ASSERT_EQ(first.action, Action::kRun);
  EXPECT_EQ(first.take, (std::vector<uint64_t>{1, 2, 3, 4}));
  queues.levels[0].erase(queues.levels[0].begin(), queues.levels[0].begin() + 4);
  BatchDecision second = policy.Decide(queues, At(1001));
  ASSERT_EQ(second.action, Action::kRun);
  EXPECT_EQ(second.take, (std::vector<uint64_t>{5, 6}));
}

BatchQueueEntry Grouped(uint64_t id, uint64_t group) {
  BatchQueueEntry e = Item(id, 0);
  e.group = group;
  return e;
}

// Within a level each request first gets one item, then FIFO; levels keep their order.
TEST(BatchPolicyTest, EveryRequestOfALevelGetsASlotBeforeTheRestFills) {
  const BatchPolicy policy(Options(4, 0, {}, 2));
  BatchQueueSnapshot queues{{{Grouped(1, 1), Grouped(2, 1), Grouped(3, 1), Grouped(4, 1), Grouped(5, 5)},
                             {Grouped(6, 6)}}};
  BatchDecision d = policy.Decide(queues, At(0));
  ASSERT_EQ(d.action, Action::kRun);
  EXPECT_EQ(d.take, (std::vector<uint64_t>{1, 5, 2, 3}));  // level 2 waits for level 1
  const BatchPolicy wide(Options(8, 0, {}, 2));
  BatchQueueSnapshot two{{{Grouped(1, 1), Grouped(2, 1), Grouped(3, 1)}, {Grouped(4, 4), Grouped(5, 4), Grouped(6, 6)}}};
  EXPECT_EQ(wide.Decide(two, At(0)).take, (std::vector<uint64_t>{1, 2, 3, 4, 6, 5}));
}

TEST(BatchPolicyTest, BatchSizeFor) {
  const BatchPolicy plain(Options(8, 0));
  const BatchPolicy preferred(Options(16, 0, {4, 8}));
  const struct {
    const BatchPolicy* policy;
    int available;
    int expected;
  } rows[] = {
      {&plain, 1, 1},      {&plain, 8, 8},      {&plain, 20, 8},     {&preferred, 3, 3},
      {&preferred, 4, 4},  {&preferred, 7, 4},  {&preferred, 8, 8},  {&preferred, 15, 8},
      {&preferred, 40, 8},
  };
  for (const auto& row : rows) {
    EXPECT_EQ(row.policy->BatchSizeFor(row.available), row.expected) << "available " << row.available;
  }
}

TEST(BatchPolicyTest, EffectiveTimeoutOnlyShortens) {
  const struct {
    int64_t policy_us;
    bool allow_override;
    int64_t requested_us;
    int64_t expected_us;
  } rows[] = {
      {10000, true, 0, 10000},    // no request: the policy's
      {10000, true, 5000, 5000},  // shorter: honoured
      {10000, true, 50000, 10000},  // longer: ignored
      {10000, false, 5000, 10000},  // overrides not allowed
      {0, true, 5000, 5000},      // the policy has none
      {0, false, 5000, 0},
      {0, true, 0, 0},
  };
  for (const auto& row : rows) {
    QueuePolicy policy;
    policy.timeout_us = row.policy_us;
    policy.allow_timeout_override = row.allow_override;
    EXPECT_EQ(EffectiveTimeoutUs(policy, row.requested_us), row.expected_us)
        << row.policy_us << " " << row.allow_override << " " << row.requested_us;
  }
}

TEST(BatchPolicyTest, AddMicrosSaturates) {
  EXPECT_EQ(AddMicros(At(0), 5), At(5));
  EXPECT_EQ(AddMicros(At(0), 0), At(0));
  EXPECT_EQ(AddMicros(At(0), INT64_MAX), kNoDeadline);
  EXPECT_EQ(AddMicros(kNoDeadline, 1), kNoDeadline);
}

TEST(BatchPolicyTest, HugeDelayNeverRuns) {
  const BatchPolicy policy(Options(8, INT64_MAX));
  const BatchDecision d = policy.Decide(BatchQueueSnapshot{{{Item(1, 0)}}}, At(1000000));
  EXPECT_EQ(d.action, Action::kWait);
  EXPECT_EQ(d.wake_at, kNoDeadline);
}

}  // namespace
}  // namespace ferry::sched
