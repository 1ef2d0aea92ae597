// Turns one generated sequence's engine events (token ids and log-probabilities) into what
// an API returns: incremental detokenization, stop strings with hold-back, log-probabilities
// with token strings and text offsets, the finish reason and the token count. It knows no
// wire format: the completions route formats its results, and the chat route will too.
// Runs off the scheduler thread (the server's output workers).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "sched/generation_request.h"
#include "tokenizer/tokenizer.h"

namespace ferry::serve {

struct OutputSpec {
  std::vector<std::string> stops;  // stop strings: the text ends before the first match
  int logprobs = -1;               // -1: none; k >= 0: each token's log-probability and the top k
  // Prompt text the output starts with. With log-probabilities the prompt's tokens are
  // listed too, and the echoed text is then the prompt's tokens decoded, so that the table
  // spells the text exactly.
  std::optional<std::string> echo;
  bool skip_special_tokens = true;  // special tokens add no text (vLLM's skip_special_tokens)
  std::vector<int32_t> stop_ids;    // ids that end generation: the one that does adds no text
  int min_tokens = 0;               // stop strings are not looked for before this many tokens
};

// One candidate in a token's top log-probabilities.
struct TopLogprob {
  std::string token;  // the token decoded on its own, with its leading space ("" never)
  std::string bytes;  // its raw bytes (may be part of a UTF-8 character)
  float logprob = 0;
};

// One token of the log-probability table. Prompt tokens and generated ones alike. The
// `token` strings of a table concatenate to the text, each starting at its text_offset: a
// token whose bytes end inside a UTF-8 character is "" and the next one carries the whole
// character; a special token skipped from the text is "".
struct LogprobEntry {
  std::string token;                // the text this token adds
  std::string bytes;                // the token's raw bytes
  std::optional<float> logprob;     // absent for the first prompt token
  std::vector<TopLogprob> top;      // best first, plus the chosen token when it is not among them (as OpenAI does)
  bool has_top = true;              // false for the first prompt token
  size_t text_offset = 0;           // where the token's text starts in the output
};

// What became final since the last TakeDelta.
struct OutputDelta {
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<LogprobEntry> logprobs;
  bool finished = false;
};

// Thread-compatible: one request's worker at a time.
class OutputProcessor {
 public:
  // `tokenizer` may be null (token-id models): the text is then empty.
  OutputProcessor(const tokenizer::Tokenizer* tokenizer, OutputSpec spec);

  // Consumes the next event of the sequence. Returns true when this event ended the output
  // (its final event, or a stop string matched); later events are ignored.
  bool Add(const sched::GenerationEvent& event);

  bool done() const { return done_; }
  // A stop string matched: the request can be ended early.
  bool stopped() const { return stopped_; }
  // "stop", "length" or "abort" once done; empty while running or when it failed.
  const std::string& finish_reason() const { return finish_reason_; }
  const Status& error() const { return error_; }
  const std::string& failure_reason() const { return failure_reason_; }

  // For streaming: everything that can no longer change. Text that could still turn into a
  // stop string, and a partial UTF-8 character, are held back until they are decided.
  OutputDelta TakeDelta();

  const std::string& text() const { return text_; }          // echo + generated (cut at a stop string)
  const std::vector<int32_t>& token_ids() const { return ids_; }
  const std::vector<LogprobEntry>& logprobs() const { return logprobs_; }
  int64_t generated_tokens() const { return static_cast<int64_t>(ids_.size()); }

 private:
  // The token decoded on its own (with a leading space where it has one) and its raw bytes.
  TopLogprob Candidate(int32_t id, float logprob) const;
  LogprobEntry Entry(const sched::TokenOutput& t, bool first_prompt_token, std::string text, size_t offset) const;
  // Rebuilds the echoed prompt from its tokens (echo with log-probabilities).
  void EchoPromptTokens(const std::vector<sched::TokenOutput>& prompt);
  // Cuts the text at the earliest stop string; true when one matched.
  bool CheckStops();

  const tokenizer::Tokenizer* tokenizer_;
  const OutputSpec spec_;
  size_t max_stop_ = 0;
  std::unique_ptr<tokenizer::IncrementalDetokenizer> detok_;
  std::string text_;
  size_t echo_len_ = 0;
  size_t checked_ = 0;   // stop strings searched up to here
  std::vector<int32_t> ids_;
  std::vector<LogprobEntry> logprobs_;
  size_t text_emitted_ = 0;
  size_t ids_emitted_ = 0;
  size_t logprobs_emitted_ = 0;
  bool stopped_ = false;
  bool echo_listed_ = false;
  bool done_ = false;
  std::string finish_reason_;
  Status error_;
  std::string failure_reason_;
};

}  // namespace ferry::serve
