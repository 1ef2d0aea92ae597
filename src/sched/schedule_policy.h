// The continuous batcher's decision for one iteration, as a pure function of a snapshot:
// which sequences run how many tokens, which are preempted, which are admitted. Kept free
// of threads and models so it can be tested as tables of iterations.
#pragma once

#include <cstdint>
#include <vector>

namespace ferry::sched {

// One sequence as the policy sees it. The sequence must have tokens [0, num_tokens) in
// the KV cache before its next token can be sampled; [0, num_computed) already are.
struct SeqView {
  uint64_t handle = 0;
  int64_t priority = 0;       // lower runs first (vLLM's convention; negatives allowed)
  uint64_t arrival = 0;       // admission order; smaller is older
  int32_t num_tokens = 0;     // prompt + generated so far
  int32_t num_computed = 0;   // tokens already in the KV cache (waiting: found in the prefix cache)
  int32_t blocks_held = 0;    // KV blocks the sequence owns now
  // Waiting sequences only: how many of the prefix-cache blocks covering [0, num_computed)
  // no sequence holds, so that taking them uses up free blocks.
  int32_t cached_free_blocks = 0;
  int32_t sibling = 0;        // index among the sequences of one client request (GenerationRequest::sibling)
};

struct PlanInput {
  std::vector<SeqView> running;  // any order
  std::vector<SeqView> waiting;  // any order; blocks_held 0, num_computed its prefix-cache hit (whole blocks)
  int free_blocks = 0;
  int block_tokens = 16;
  int max_num_seqs = 1;
  int token_budget = 1;          // max_num_batched_tokens
};

struct ScheduledStep {
  uint64_t handle = 0;
  int32_t num_new_tokens = 0;  // computes [num_computed, num_computed + num_new_tokens)
};

struct Decision {
  std::vector<ScheduledStep> steps;   // running sequences first (decode, then prefill chunks), then admitted ones
  std::vector<uint64_t> preempted;    // running sequences to evict (KV freed, recomputed later)
  std::vector<uint64_t> admitted;     // waiting sequences that start running this step
  int tokens = 0;                     // sum of num_new_tokens
};

// The iteration plan. "Priority order" is priority, then sibling index, then arrival: one
// request's many sequences (n choices, several prompts) take turns with other requests'
// first ones instead of going ahead of all of them.
//  1. Running sequences in priority order: those with one token to
//     compute (decode) first, then prefill chunks, each taking from the token budget.
//  2. A sequence that needs KV blocks the cache does not have evicts the lowest-priority,
//     most recently admitted running sequence not yet scheduled this step (preemption by
//     recompute); with no such victim a decode evicts itself and a prefill chunk shrinks to
//     what fits.
//  3. Without preemptions, waiting sequences are admitted in priority order while the
//     sequence limit, the budget and the free blocks allow: admission needs blocks for the
//     whole prompt plus one generated token, counting what running prefills still need; a
//     prefix found in the prefix cache needs no new blocks (only the free cached ones it
//     takes back count) and no compute. The first one that does not fit stops admission
//     (no overtaking).
Decision PlanStep(const PlanInput& input);

}  // namespace ferry::sched
