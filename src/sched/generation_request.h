// A decoder request as the continuous batcher sees it: token ids in, a stream of events out.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/sampler.h"
#include "structured/matcher.h"

namespace ferry::sched {

class ContinuousBatcher;

using Clock = std::chrono::steady_clock;

enum class RequestState { kQueued, kRunning, kFinished, kCancelled, kFailed };

enum class FinishReason { kNone, kStop, kLength, kAbort };
const char* FinishReasonName(FinishReason reason);  // "stop", "length", "abort"

// One generated (or prompt) token with the log-probabilities the request asked for.
using TokenOutput = engine::TokenOutput;

// What a request produced in one step, in order; exactly one event has `finished` set and
// it is the last. The server's batcher delivers them on its thread: handlers must be quick
// (hand off; no formatting, no blocking I/O).
struct GenerationEvent {
  uint64_t handle = 0;                     // the request's handle in its engine core
  std::vector<TokenOutput> tokens;         // new tokens since the previous event
  std::vector<TokenOutput> prompt_tokens;  // first event only, when prompt_logprobs was asked for
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  Status error;                            // set when the request failed
  std::string failure_reason;              // metrics label of the failure ("timeout", "nonfinite_logits", ...)
  int32_t prompt_tokens_count = 0;
  int32_t generated_tokens_count = 0;
  double queue_seconds = 0;                // arrival to first scheduled (first event only)
  std::vector<float> logits;               // keep_logits: the rows computed for it this step, [rows, vocab]
};

// What an event handler tells the batcher.
enum class EventAction { kContinue, kStop };

struct GenerationRequest {
  std::string id;                    // for logs
  std::vector<int32_t> prompt;
  engine::SamplingParams sampling;
  int max_tokens = 16;
  std::vector<int32_t> stop_ids;     // end-of-sequence ids (ignored with ignore_eos)
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // more ids that end generation (vLLM's stop_token_ids; not ignored)
  int min_tokens = 0;                // no stop id may be drawn before this many tokens (vLLM's min_tokens)
  int logprobs = -1;                 // -1: none; k >= 0: the chosen token's and the top k
  bool prompt_logprobs = false;      // log-probabilities of the prompt tokens (echo)
  bool keep_logits = false;          // return the logits rows (offline tools: dumps, comparisons)
  // Structured outputs: only tokens this grammar allows are drawn; stop ids only where it
  // accepts the output so far; the request finishes ("stop") when the grammar is complete.
  // Its vocabulary must be the model's (structured::Vocabulary::FromTokenizer).
  std::shared_ptr<structured::TokenMatcher> grammar;
  int64_t priority = 0;              // lower runs first (vLLM's); the server adds the tier's rank
  // Index among the sequences one client request submitted (its n choices of each of its
  // prompts). Within a priority the scheduler orders by it before arrival, so that a
  // request with n = 64 does not hold up every request that arrives after it.
  int sibling = 0;
  std::string tier = "default";
  Clock::time_point arrival = Clock::now();
  std::optional<Clock::time_point> deadline;
  // Where the events go (the server's batcher; an engine core returns them instead). The
  // handler may move from the event. kStop ends the request with finish reason "stop".
  std::function<EventAction(GenerationEvent&)> on_event;
  // A request that has not started (never scheduled: no KV, no output) may be moved to
  // another batcher (a QoS variant switch) when `movable` is set. `on_moved` is then called,
  // on the moving thread, with the batcher it now waits in, its new handle there and that
  // batcher's label (the variant's name); events may arrive before or after the call.
  bool movable = false;
  std::function<void(ContinuousBatcher& to, uint64_t handle, const std::string& label)> on_moved;
};

// A greedy request that generates exactly max_tokens (end-of-sequence ids ignored): what
// warm-up, benchmarks and evaluations run.
inline GenerationRequest FixedLengthGreedy(std::string id, std::vector<int32_t> prompt, int max_tokens) {
  GenerationRequest r;
  r.id = std::move(id);
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

}  // namespace ferry::sched
