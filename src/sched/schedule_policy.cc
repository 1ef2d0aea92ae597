#include "sched/schedule_policy.h"

#include <algorithm>
#include <unordered_set>

namespace ferry::sched {

namespace {

bool HigherFirst(const SeqView& a, const SeqView& b) {
  if (a.priority != b.priority) return a.priority < b.priority;
  if (a.sibling != b.sibling) return a.sibling < b.sibling;
  return a.arrival < b.arrival;
}

int BlocksFor(int64_t tokens, int block_tokens) {
  return static_cast<int>((tokens + block_tokens - 1) / block_tokens);
}

}  // namespace

Decision PlanStep(const PlanInput& in) {
  Decision d;
  const int bt = std::max(in.block_tokens, 1);
  int free_blocks = in.free_blocks;
  int budget = in.token_budget;

  std::vector<SeqView> running = in.running;
  std::sort(running.begin(), running.end(), HigherFirst);
  std::unordered_set<uint64_t> scheduled;
  std::unordered_set<uint64_t> evicted;

  // Evicts the lowest-priority, newest running sequence that is neither `self` nor already
  // scheduled; returns false when there is none.
  auto evict_one = [&](uint64_t self) {
    for (auto it = running.rbegin(); it != running.rend(); ++it) {
      if (it->handle == self || scheduled.count(it->handle) || evicted.count(it->handle)) continue;
      evicted.insert(it->handle);
      d.preempted.push_back(it->handle);
      free_blocks += it->blocks_held;
      return true;
    }
    return false;
  };

  // Extra blocks a sequence needs to hold `upto` tokens.
  auto blocks_needed = [&](const SeqView& s, int64_t upto) {
    return std::max(0, BlocksFor(upto, bt) - s.blocks_held);
  };

  for (int pass = 0; pass < 2; ++pass) {
    for (const SeqView& s : running) {
      if (evicted.count(s.handle) || scheduled.count(s.handle)) continue;
      const int32_t remaining = s.num_tokens - s.num_computed;
      const bool decode = remaining == 1;
      if (remaining <= 0 || decode != (pass == 0)) continue;
      if (budget <= 0) break;
      int32_t n = std::min(remaining, budget);
      int need = blocks_needed(s, static_cast<int64_t>(s.num_computed) + n);
      while (need > free_blocks && evict_one(s.handle)) {
      }
      if (need > free_blocks) {
        if (decode) {  // nothing left to evict but itself
          evicted.insert(s.handle);
          d.preempted.push_back(s.handle);
          free_blocks += s.blocks_held;
          continue;
        }
        // A prefill chunk shrinks to what its own blocks and the free ones hold.
        const int64_t capacity = static_cast<int64_t>(s.blocks_held + free_blocks) * bt;
        n = static_cast<int32_t>(std::min<int64_t>(n, capacity - s.num_computed));
        if (n <= 0) continue;
        need = blocks_needed(s, static_cast<int64_t>(s.num_computed) + n);
      }
      free_blocks -= need;
      budget -= n;
      scheduled.insert(s.handle);
      d.steps.push_back(ScheduledStep{s.handle, n});
      d.tokens += n;
    }
  }
  if (!d.preempted.empty()) return d;

  // Blocks that running prefills will still claim before their first generated token.
  int promised = 0;
  int num_running = 0;
  for (const SeqView& s : running) {
    if (evicted.count(s.handle)) continue;
    ++num_running;
    int64_t computed_after = s.num_computed;
    for (const ScheduledStep& st : d.steps) {
      if (st.handle == s.handle) computed_after += st.num_new_tokens;
    }
    const int held_after = std::max(s.blocks_held, BlocksFor(computed_after, bt));
    promised += std::max(0, BlocksFor(static_cast<int64_t>(s.num_tokens) + 1, bt) - held_after);
  }
  int admission_free = free_blocks - promised;

  std::vector<SeqView> waiting = in.waiting;
  std::sort(waiting.begin(), waiting.end(), HigherFirst);
  for (const SeqView& s : waiting) {
    if (num_running >= in.max_num_seqs || budget <= 0) break;
    // A cached prefix is taken as it is: its referenced blocks cost nothing, its free ones
    // leave the free pool.
    const int cached = BlocksFor(s.num_computed, bt);
    const int whole = BlocksFor(static_cast<int64_t>(s.num_tokens) + 1, bt) - cached + s.cached_free_blocks;
    if (whole > admission_free) break;
    const int32_t n = std::min(s.num_tokens - s.num_computed, budget);
    const int now = BlocksFor(static_cast<int64_t>(s.num_computed) + n, bt) - cached + s.cached_free_blocks;
    free_blocks -= now;
    admission_free -= whole;
    budget -= n;
    ++num_running;
    d.admitted.push_back(s.handle);
    d.steps.push_back(ScheduledStep{s.handle, n});
    d.tokens += n;
  }
  return d;
}

}  // namespace ferry::sched
