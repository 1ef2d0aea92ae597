// What the OpenAI generation routes share (/v1/completions and /v1/chat/completions):
// reading the sampling, penalty, stop, streaming and vLLM fields of a request, and the job
// that submits one sequence per choice, turns each choice's engine events into output on
// the server's output workers (serve::OutputProcessor), records the request's metrics,
// cancels on disconnect and answers. A route supplies the prompts and its wire format.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "serve/config.h"
#include "serve/model_repository.h"
#include "serve/output_processor.h"
#include "serve/request_context.h"
#include "serve/request_fields.h"
#include "structured/matcher.h"

namespace ferry::serve {

inline constexpr int kMaxStops = 4;

// Where a route runs, how strict it is and how much work one request may ask for.
struct RouteEnv {
  ThreadPool& output_workers;
  UnknownFields unknown_fields = UnknownFields::kIgnore;
  ChatSpecialTokens chat_special_tokens = ChatSpecialTokens::kText;
  int max_choices = 64;   // api.max_choices: prompts x n
  int max_logprobs = 20;  // api.max_logprobs
};

// A validated generation request: what the job submits.
struct GenerationParams {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> prompt_texts;  // what `echo` repeats, one per prompt
  int n = 1;
  int max_tokens = 16;
  engine::SamplingParams sampling;
  std::vector<std::string> stops;
  std::vector<int32_t> stop_token_ids;
  int min_tokens = 0;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;   // usage in every chunk (vLLM's continuous_usage_stats)
  int logprobs = -1;               // -1: none; k >= 0: each token's log-probability and the top k
  bool echo = false;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  bool return_token_ids = false;
  int64_t priority = 0;            // the scheduler's: the tier's rank, then the request's priority
  std::string user;
  // Structured outputs (response_format, structured_outputs, guided_*; tool_choice named or
  // required): every choice is drawn under this grammar.
  std::shared_ptr<structured::TokenMatcher> grammar;
};

// The fields both routes read, with OpenAI's and vLLM's names and ranges: temperature, top_p,
// top_k, min_p, seed, n, stop, stop_token_ids, presence_penalty, frequency_penalty,
// repetition_penalty, logit_bias, min_tokens, ignore_eos, skip_special_tokens, stream,
// stream_options, user, priority, return_token_ids, and the structured-output fields
// (serve/structured_fields.h; read by the routes). Each route reads its own prompt, token
// limit and log-probability fields.
extern const char* const kGenerationFields[];

MaybeError ReadGenerationFields(const nlohmann::json& body, const ServedModel& model, const Principal& who,
                                const RouteEnv& env, GenerationParams& p);

// Rejects (UnknownFields::kReject) or names in a Warning header (kIgnore) the fields of
// `obj` that are neither in `known` nor in kGenerationFields.
MaybeError CheckUnknownFields(const nlohmann::json& obj, std::initializer_list<const char*> known, RequestContext& ctx,
                              UnknownFields policy);

// The scheduler's priority: every tier ahead of the next (tier priority 1 first), then
// vLLM's request priority within the tier (lower first, negatives allowed), then arrival.
int64_t SchedulerPriority(const Principal& who, int64_t request_priority);

// 400 context_length_exceeded when a prompt and max_tokens do not fit the model.
MaybeError CheckContextLength(const ServedModel& model, const GenerationParams& p);

// A route's wire format. Called on the output workers, one event of the request at a time.
class GenerationFormat {
 public:
  virtual ~GenerationFormat() = default;
  virtual std::string IdPrefix() const = 0;           // "cmpl-", "chatcmpl-"
  virtual std::string Object(bool chunk) const = 0;   // "text_completion", "chat.completion(.chunk)"
  // Streaming: the choice objects for what choice `index` made final (none, one, or more:
  // chat sends its role first). `out.done()` tells whether this is its last delta.
  virtual void StreamChoice(int index, const OutputProcessor& out, OutputDelta& delta,
                            std::vector<nlohmann::json>& choices) = 0;
  // Not streaming: the whole choice.
  virtual nlohmann::json FinalChoice(int index, const OutputProcessor& out) = 0;
};

// Submits the request's choices (prompts x n) and answers when they have finished.
void RunGeneration(std::shared_ptr<RequestContext> ctx, ServedModel& model, GenerationParams params,
                   std::unique_ptr<GenerationFormat> format, ThreadPool& output_workers);

// A fresh id: `prefix` followed by 24 hex digits.
std::string RandomId(const char* prefix);

}  // namespace ferry::serve
