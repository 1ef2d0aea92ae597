#include "serve/output_processor.h"

#include <algorithm>

namespace ferry::serve {

namespace {

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
    detok_ = std::make_unique<tokenizer::IncrementalDetokenizer>(*tokenizer_, true, false);
  }
  if (spec_.echo) {
    text_ = *spec_.echo;
    echo_len_ = text_.size();
  }
}

std::string OutputProcessor::TokenText(int32_t id) const {
  if (tokenizer_ == nullptr) return std::to_string(id);
  auto t = tokenizer_->Decode(std::span<const int32_t>(&id, 1), false);
  return t.ok() ? t.value() : std::string();
}

LogprobEntry OutputProcessor::Entry(const sched::TokenOutput& t, bool first_prompt_token, size_t offset) const {
  LogprobEntry e;
  e.token = TokenText(t.token);
  e.text_offset = offset;
  if (first_prompt_token) {
    e.has_top = false;
    return e;
  }
  e.logprob = t.logprob;
  for (const auto& [id, lp] : t.top_logprobs) e.top.emplace_back(TokenText(id), lp);
  return e;
}

bool OutputProcessor::CheckStops() {
  if (spec_.stops.empty() || stopped_) return stopped_;
  const size_t from = std::max(echo_len_, checked_ >= max_stop_ ? checked_ - max_stop_ + 1 : 0);
  size_t best = std::string::npos;
  for (const std::string& s : spec_.stops) {
    const size_t at = text_.find(s, from);
    if (at != std::string::npos) best = std::min(best, at);
  }
  checked_ = text_.size();
  if (best == std::string::npos) return false;
  text_.resize(best);
  stopped_ = true;
  return true;
}

bool OutputProcessor::Add(const sched::GenerationEvent& ev) {
  if (done_) return false;
  if (!ev.prompt_tokens.empty() && spec_.logprobs >= 0 && spec_.echo) {
    size_t offset = 0;
    for (size_t k = 0; k < ev.prompt_tokens.size(); ++k) {
      logprobs_.push_back(Entry(ev.prompt_tokens[k], k == 0, offset));
      offset += logprobs_.back().token.size();
    }
  }
  for (const sched::TokenOutput& t : ev.tokens) {
    ids_.push_back(t.token);
    const size_t offset = text_.size();
    if (detok_ != nullptr) detok_->Add(t.token, &text_);
    if (spec_.logprobs >= 0) logprobs_.push_back(Entry(t, false, offset));
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
      text_ += detok_->Flush();
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
