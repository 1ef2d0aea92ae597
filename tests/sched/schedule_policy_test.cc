#include "sched/schedule_policy.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace ferry::sched {
namespace {

SeqView Running(uint64_t h, int32_t tokens, int32_t computed, int32_t blocks, int priority = 1, uint64_t arrival = 0) {
  return SeqView{h, priority, arrival == 0 ? h : arrival, tokens, computed, blocks};
}
SeqView Waiting(uint64_t h, int32_t tokens, int priority = 1, uint64_t arrival = 0) {
  return SeqView{h, priority, arrival == 0 ? h : arrival, tokens, 0, 0};
}
int32_t StepOf(const Decision& d, uint64_t h) {
  for (const ScheduledStep& s : d.steps) {
    if (s.handle == h) return s.num_new_tokens;
  }
  return 0;
}

TEST(SchedulePolicy, CachedPrefixesNeedNoComputeAndOnlyTheirFreeBlocks) {
  PlanInput in;
  in.block_tokens = 4;
  in.max_num_seqs = 8;
  in.token_budget = 100;
  // 40 tokens, 36 of them cached (9 blocks, 3 of which no sequence holds): admission needs
  // the blocks for the rest (11 - 9 = 2) plus the 3 cached free ones, and computes 4 tokens.
  SeqView w = Waiting(1, 40);
  w.num_computed = 36;
  w.cached_free_blocks = 3;
  in.waiting = {w};
  in.free_blocks = 5;
  Decision d = PlanStep(in);
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(StepOf(d, 1), 4);
  EXPECT_EQ(d.tokens, 4);
  in.free_blocks = 4;  // one short
  d = PlanStep(in);
  EXPECT_TRUE(d.admitted.empty());
  // Without the cache it would need 11 blocks and 40 tokens of compute.
  in.waiting = {Waiting(1, 40)};
  in.free_blocks = 11;
  d = PlanStep(in);
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(StepOf(d, 1), 40);
}

TEST(SchedulePolicy, DecodeTokensGoFirstThenPrefillChunksShareTheBudget) {
  PlanInput in;
  in.block_tokens = 4;
  in.free_blocks = 100;
  in.max_num_seqs = 8;
  in.token_budget = 10;
  in.running = {Running(1, 30, 0, 0, 1, 1), Running(2, 9, 8, 2, 1, 2), Running(3, 5, 4, 1, 1, 3)};
  const Decision d = PlanStep(in);
  ASSERT_EQ(d.steps.size(), 3u);
  EXPECT_EQ(d.steps[0].handle, 2u);  // decodes first, in arrival order
  EXPECT_EQ(d.steps[1].handle, 3u);
  EXPECT_EQ(d.steps[2].handle, 1u);  // the prefill chunk takes what is left: 10 - 2
  EXPECT_EQ(d.steps[2].num_new_tokens, 8);
  EXPECT_EQ(d.tokens, 10);
  EXPECT_TRUE(d.preempted.empty());
}

TEST(SchedulePolicy, AdmitsWaitingInPriorityOrderWithinLimits) {
  PlanInput in;
  in.block_tokens = 4;
  in.free_blocks = 100;
  in.max_num_seqs = 2;
  in.token_budget = 100;
  in.waiting = {Waiting(1, 8, 2, 1), Waiting(2, 8, 1, 2), Waiting(3, 8, 1, 3)};
  const Decision d = PlanStep(in);
  ASSERT_EQ(d.admitted.size(), 2u);
  EXPECT_EQ(d.admitted[0], 2u);  // priority 1 first, oldest first
  EXPECT_EQ(d.admitted[1], 3u);
  EXPECT_EQ(StepOf(d, 2), 8);
}

TEST(SchedulePolicy, LongPromptIsChunkedByTheBudget) {
  PlanInput in;
  in.block_tokens = 16;
  in.free_blocks = 100;
  in.max_num_seqs = 4;
  in.token_budget = 64;
  in.waiting = {Waiting(1, 200)};
  Decision d = PlanStep(in);
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(StepOf(d, 1), 64);
  // Next iteration: it is running with 64 computed and 4 blocks.
  in.waiting.clear();
  in.running = {Running(1, 200, 64, 4)};
  d = PlanStep(in);
  EXPECT_EQ(StepOf(d, 1), 64);
}

TEST(SchedulePolicy, AdmissionNeedsBlocksForTheWholePromptAndDoesNotOvertake) {
  PlanInput in;
  in.block_tokens = 4;
  in.free_blocks = 5;
  in.max_num_seqs = 8;
  in.token_budget = 100;
  in.waiting = {Waiting(1, 20), Waiting(2, 4)};  // 1 needs ceil(21/4) = 6 blocks > 5
  Decision d = PlanStep(in);
  EXPECT_TRUE(d.admitted.empty());  // 2 would fit but must not overtake 1
  in.free_blocks = 6;
  d = PlanStep(in);
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(d.admitted[0], 1u);
}

TEST(SchedulePolicy, RunningPrefillsKeepTheirPromisedBlocks) {
  PlanInput in;
  in.block_tokens = 4;
  in.free_blocks = 8;
  in.max_num_seqs = 8;
  in.token_budget = 8;
  // A running prompt of 32 tokens with 8 computed (2 blocks) still needs 7 more blocks in all.
  in.running = {Running(1, 32, 8, 2)};
  in.waiting = {Waiting(2, 2)};
  Decision d = PlanStep(in);
  EXPECT_EQ(StepOf(d, 1), 8);
  EXPECT_TRUE(d.admitted.empty());
}

TEST(SchedulePolicy, OutOfBlocksPreemptsLowestPriorityNewest) {
  PlanInput in;
  in.block_tokens = 4;
  in.free_blocks = 0;
  in.max_num_seqs = 8;
  in.token_budget = 100;
  // Each decode crosses a block boundary (position 8 needs a third block).
  in.running = {Running(1, 9, 8, 2, 1, 1), Running(2, 9, 8, 2, 2, 2), Running(3, 9, 8, 2, 2, 3),
                Running(4, 9, 8, 2, 1, 4)};
  in.waiting = {Waiting(5, 2)};
  const Decision d = PlanStep(in);
  // Sequence 1 and 4 (priority 1) need a block each: evict 3 (priority 2, newest), which frees
  // 2 blocks, enough for both. Sequence 2 then has nothing to evict but itself.
  ASSERT_EQ(d.preempted.size(), 2u);
  EXPECT_EQ(d.preempted[0], 3u);
  EXPECT_EQ(d.preempted[1], 2u);
  EXPECT_EQ(StepOf(d, 1), 1);
  EXPECT_EQ(StepOf(d, 4), 1);
  EXPECT_TRUE(d.admitted.empty());  // no admission in an iteration that preempts
}

TEST(SchedulePolicy, PrefillChunkShrinksWhenNothingCanBeEvicted) {
  PlanInput in;
  in.block_tokens = 4;
  in.free_blocks = 1;
  in.max_num_seqs = 8;
  in.token_budget = 100;
  in.running = {Running(1, 40, 8, 2)};
  const Decision d = PlanStep(in);
  EXPECT_TRUE(d.preempted.empty());
  EXPECT_EQ(StepOf(d, 1), 4);  // (2 held + 1 free) * 4 - 8 computed
}

TEST(SchedulePolicy, PreemptedSequenceIsReadmittedForRecompute) {
  PlanInput in;
  in.block_tokens = 4;
  in.free_blocks = 10;
  in.max_num_seqs = 8;
  in.token_budget = 100;
  // A preempted sequence waits with its prompt + generated tokens (num_tokens = 13).
  in.waiting = {Waiting(7, 13)};
  const Decision d = PlanStep(in);
  ASSERT_EQ(d.admitted.size(), 1u);
  EXPECT_EQ(StepOf(d, 7), 13);
}

// A request with many sequences (n choices) arrived first; a one-sequence request after it
// still gets the next free slot, before the first request's later siblings.
TEST(SchedulePolicy, SiblingsTakeTurnsWithOtherRequests) {
  PlanInput in;
  in.block_tokens = 4;
  in.free_blocks = 100;
  in.max_num_seqs = 3;
  in.token_budget = 100;
  for (uint64_t i = 0; i < 4; ++i) {
    SeqView w = Waiting(10 + i, 8, 1, 1 + i);
    w.sibling = static_cast<int32_t>(i);
    in.waiting.push_back(w);
  }
  in.waiting.push_back(Waiting(20, 8, 1, 5));  // another request, sibling 0, arrived last
  const Decision d = PlanStep(in);
  ASSERT_EQ(d.admitted.size(), 3u);
  EXPECT_EQ(d.admitted[0], 10u);
  EXPECT_EQ(d.admitted[1], 20u);  // before the first request's second sequence
  EXPECT_EQ(d.admitted[2], 11u);
  // Priority still comes first.
  in.waiting.back().priority = 2;
  const Decision p = PlanStep(in);
  EXPECT_EQ(p.admitted, (std::vector<uint64_t>{10, 11, 12}));
}

TEST(SchedulePolicy, EmptyInputSchedulesNothing) {
  PlanInput in;
  in.free_blocks = 10;
  in.max_num_seqs = 4;
  in.token_budget = 16;
  const Decision d = PlanStep(in);
  EXPECT_TRUE(d.steps.empty());
  EXPECT_EQ(d.tokens, 0);
}

}  // namespace
}  // namespace ferry::sched
