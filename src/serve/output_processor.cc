#include "serve/output_processor.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace ferry::serve {

namespace {

// `bytes` with every invalid or truncated UTF-8 sequence replaced by U+FFFD.
std::string ValidUtf8(const std::string& bytes) {
  std::string out;
  tokenizer::AppendValidUtf8(bytes, /*keep_truncated_tail=*/false, &out);
  return out;
}

// Largest cut <= `end` that does not split a UTF-8 character of `s`.
size_t Utf8Boundary(const std::string& s, size_t end) {
  while (end > 0 && end < s.size() && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return end;
}

}  // namespace

OutputProcessor::OutputProcessor(const tokenizer::Tokenizer* tokenizer, OutputSpec spec)
    : tokenizer_(tokenizer), spec_(std::move(spec)) {
  for (const std::string& s : spec_.stops) max_stop_ = std::max(max_stop_, s.size());
  if (tokenizer_ != nullptr) {
    detok_ = std::make_unique<tokenizer::IncrementalDetokenizer>(*tokenizer_, spec_.skip_special_tokens, false);
  }
  if (spec_.echo) {
    text_ = *spec_.echo;
    echo_len_ = text_.size();
  }
}

TopLogprob OutputProcessor::Candidate(int32_t id, float logprob) const {
  TopLogprob c;
  c.logprob = logprob;
  if (tokenizer_ == nullptr) {
    c.token = std::to_string(id);
    return c;
  }
  tokenizer_->AppendTokenBytes(id, /*first=*/false, &c.bytes);
  c.token = ValidUtf8(c.bytes);
  return c;
}

LogprobEntry OutputProcessor::Entry(const sched::TokenOutput& t, bool first_prompt_token, std::string text,
                                    size_t offset) const {
  LogprobEntry e;
  e.token = std::move(text);
  e.text_offset = offset;
  if (tokenizer_ != nullptr) {
    tokenizer_->AppendTokenBytes(t.token, false, &e.bytes);
  } else {
    e.token = std::to_string(t.token);
  }
  if (first_prompt_token) {
    e.has_top = false;
    return e;
  }
  e.logprob = t.logprob;
  bool chosen_listed = false;
  for (const auto& [id, lp] : t.top_logprobs) {
    e.top.push_back(Candidate(id, lp));
    chosen_listed = chosen_listed || id == t.token;
  }
  if (!chosen_listed) e.top.push_back(Candidate(t.token, t.logprob));
  return e;
}

void OutputProcessor::EchoPromptTokens(const std::vector<sched::TokenOutput>& prompt) {
  if (tokenizer_ == nullptr) {
    for (size_t k = 0; k < prompt.size(); ++k) logprobs_.push_back(Entry(prompt[k], k == 0, "", 0));
    return;
  }
  tokenizer::IncrementalDetokenizer d(*tokenizer_, spec_.skip_special_tokens, true);
  std::string text;
  for (size_t k = 0; k < prompt.size(); ++k) {
    const size_t offset = text.size();
    d.Add(prompt[k].token, &text);
    logprobs_.push_back(Entry(prompt[k], k == 0, text.substr(offset), offset));
  }
  const std::string rest = d.Flush();
  if (!rest.empty() && !logprobs_.empty()) logprobs_.back().token += rest;
  text += rest;
  text_ = std::move(text);
  echo_len_ = text_.size();
}

bool OutputProcessor::CheckStops() {
  if (spec_.stops.empty() || stopped_) return stopped_;
  if (static_cast<int>(ids_.size()) < spec_.min_tokens) {
    checked_ = text_.size();  // stop strings in the first min_tokens tokens do not count
    return false;
  }
  const size_t from = std::max(echo_len_, checked_ >= max_stop_ ? checked_ - max_stop_ + 1 : 0);
  size_t best = std::string::npos;
  for (const std::string& s : spec_.stops) {
    const size_t at = text_.find(s, from);
    if (at != std::string::npos) best = std::min(best, at);
  }
  checked_ = text_.size();
  if (best == std::string::npos) return false;
  text_.resize(best);
  // The log-probability table keeps every token, its strings cut where the text now ends.
  for (auto it = logprobs_.rbegin(); it != logprobs_.rend() && it->text_offset + it->token.size() > best; ++it) {
    it->token.resize(it->text_offset >= best ? 0 : best - it->text_offset);
    it->text_offset = std::min(it->text_offset, best);
  }
  stopped_ = true;
  return true;
}

bool OutputProcessor::Add(const sched::GenerationEvent& ev) {
  if (done_) return false;
  if (!ev.prompt_tokens.empty() && spec_.logprobs >= 0 && spec_.echo && !echo_listed_) {
    echo_listed_ = true;
    EchoPromptTokens(ev.prompt_tokens);
  }
  for (size_t k = 0; k < ev.tokens.size(); ++k) {
    const sched::TokenOutput& t = ev.tokens[k];
    ids_.push_back(t.token);
    const size_t offset = text_.size();
    // The stop id that ended the sequence adds no text (a stop_token_ids entry may be an
    // ordinary token).
    const bool ending_stop = ev.finished && ev.finish_reason == sched::FinishReason::kStop &&
                             k + 1 == ev.tokens.size() &&
                             std::find(spec_.stop_ids.begin(), spec_.stop_ids.end(), t.token) != spec_.stop_ids.end();
    if (detok_ != nullptr && !ending_stop) detok_->Add(t.token, &text_);
    if (spec_.logprobs >= 0) logprobs_.push_back(Entry(t, false, text_.substr(offset), offset));
    if (CheckStops()) break;
  }
  if (stopped_) {
    done_ = true;
    finish_reason_ = "stop";
    return true;
  }
  if (!ev.finished) return false;
  done_ = true;
  if (!ev.error.ok()) {
    error_ = ev.error;
    failure_reason_ = ev.failure_reason;
  } else if (ev.finish_reason == sched::FinishReason::kAbort) {
    finish_reason_ = "abort";
  } else {
    if (detok_ != nullptr) {
      const std::string rest = detok_->Flush();
      if (!rest.empty() && spec_.logprobs >= 0 && !logprobs_.empty()) logprobs_.back().token += rest;
      text_ += rest;
      CheckStops();
    }
    finish_reason_ = stopped_ || ev.finish_reason == sched::FinishReason::kStop ? "stop" : "length";
  }
  return true;
}

OutputDelta OutputProcessor::TakeDelta() {
  OutputDelta d;
  size_t safe = text_.size();
  if (!done_ && max_stop_ > 1) safe = safe > max_stop_ - 1 ? safe - (max_stop_ - 1) : 0;
  safe = std::max(Utf8Boundary(text_, safe), std::min(text_emitted_, text_.size()));
  if (safe > text_emitted_) d.text = text_.substr(text_emitted_, safe - text_emitted_);
  text_emitted_ = std::max(text_emitted_, safe);
  d.token_ids.assign(ids_.begin() + static_cast<std::ptrdiff_t>(ids_emitted_), ids_.end());
  ids_emitted_ = ids_.size();
  d.logprobs.assign(logprobs_.begin() + static_cast<std::ptrdiff_t>(logprobs_emitted_), logprobs_.end());
  logprobs_emitted_ = logprobs_.size();
  d.finished = done_;
  return d;
}

}  // namespace ferry::serve
