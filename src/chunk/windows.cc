#include "chunk/windows.h"

#include <algorithm>
#include <limits>

namespace ferry::chunk {
namespace {

Result<tokenizer::TemplatedEncoding> Plain(std::span<const int32_t> a, std::optional<std::span<const int32_t>> b) {
  tokenizer::TemplatedEncoding out;
  for (size_t i = 0; i < a.size(); ++i) {
    out.ids.push_back(a[i]);
    out.type_ids.push_back(0);
    out.sequence.push_back(0);
    out.position.push_back(static_cast<int32_t>(i));
  }
  if (b) {
    for (size_t i = 0; i < b->size(); ++i) {
      out.ids.push_back((*b)[i]);
      out.type_ids.push_back(1);
      out.sequence.push_back(1);
      out.position.push_back(static_cast<int32_t>(i));
    }
  }
  return out;
}

// One model input from the template's output; `windowed` is the sequence index whose tokens
// [content.begin, ...) this window holds.
WindowInput MakeWindow(tokenizer::TemplatedEncoding enc, int windowed, Span content) {
  WindowInput w;
  w.content = content;
  for (size_t i = 0; i < enc.ids.size(); ++i) {
    if (enc.sequence[i] == windowed) {
      w.content_at = static_cast<int>(i);
      break;
    }
  }
  w.ids = std::move(enc.ids);
  w.type_ids = std::move(enc.type_ids);
  return w;
}

}  // namespace

Result<std::vector<Span>> PlanWindows(int content_tokens, int window_content, int overlap) {
  if (window_content < 1) {
    return InvalidArgument("chunk_tokens: a window has no room for content tokens (it holds " +
                           std::to_string(window_content) + " after the special tokens and the first sequence)");
  }
  if (overlap < 0 || overlap >= window_content) {
    return InvalidArgument("chunk_overlap: " + std::to_string(overlap) + " must be below the " +
                           std::to_string(window_content) +
                           " content tokens a window holds, or windows would hold no new content token");
  }
  std::vector<Span> windows;
  if (content_tokens <= window_content) {
    windows.push_back({0, std::max(content_tokens, 0)});
    return windows;
  }
  const int step = window_content - overlap;
  for (int start = 0;; start += step) {
    const int end = std::min(start + window_content, content_tokens);
    windows.push_back({start, end});
    if (end == content_tokens) break;
  }
  return windows;
}

std::vector<int> CenterOwners(const std::vector<Span>& windows, int content_tokens) {
  constexpr int kFar = std::numeric_limits<int>::max();
  std::vector<int> owner(static_cast<size_t>(std::max(content_tokens, 0)), -1);
  std::vector<int> best(owner.size(), -1);
  for (size_t w = 0; w < windows.size(); ++w) {
    const Span& s = windows[w];
    for (int t = std::max(s.begin, 0); t < std::min(s.end, content_tokens); ++t) {
      const int left = s.begin == 0 ? kFar : t - s.begin;
      const int right = s.end == content_tokens ? kFar : s.end - 1 - t;
      const int distance = std::min(left, right);
      if (distance > best[static_cast<size_t>(t)]) {
        best[static_cast<size_t>(t)] = distance;
        owner[static_cast<size_t>(t)] = static_cast<int>(w);
      }
    }
  }
  return owner;
}

TemplateFn TemplateOf(const tokenizer::Tokenizer* tokenizer) {
  if (tokenizer == nullptr) return Plain;
  return [tokenizer](std::span<const int32_t> a, std::optional<std::span<const int32_t>> b) {
    return tokenizer->ApplyTemplate(a, b);
  };
}

int64_t InputPlan::TotalTokens() const {
  int64_t total = 0;
  for (const WindowInput& w : windows) total += static_cast<int64_t>(w.ids.size());
  return total;
}

std::vector<int> InputPlan::ContentWeights() const {
  std::vector<int> weights;
  weights.reserve(windows.size());
  for (const WindowInput& w : windows) weights.push_back(std::max(w.content.size(), 1));
  return weights;
}

Result<InputPlan> PlanInput(const TemplateFn& apply_template, std::span<const int32_t> first,
                            std::optional<std::span<const int32_t>> second, Truncation truncation,
                            const WindowGeometry& geometry) {
  const bool pair = second.has_value();
  const int windowed = pair ? 1 : 0;
  const std::span<const int32_t> seq = pair ? *second : first;
  InputPlan plan;
  plan.windowed_tokens = static_cast<int>(seq.size());

  // The template's own tokens: what it adds around empty sequences.
  const std::vector<int32_t> none;
  FERRY_ASSIGN_OR_RETURN(const tokenizer::TemplatedEncoding empty,
                         apply_template(none, pair ? std::optional<std::span<const int32_t>>(none) : std::nullopt));
  const int specials = static_cast<int>(empty.ids.size());
  const int64_t full = specials + static_cast<int64_t>(first.size()) + (pair ? static_cast<int64_t>(second->size()) : 0);
  plan.input_tokens = full;

  if (full <= geometry.chunk_tokens || truncation == Truncation::kError) {
    if (full > geometry.chunk_tokens) {
      return OutOfRange("the input has " + std::to_string(full) + " tokens; this model reads at most " +
                        std::to_string(geometry.chunk_tokens) + " at once");
    }
    FERRY_ASSIGN_OR_RETURN(tokenizer::TemplatedEncoding enc, apply_template(first, second));
    plan.windows.push_back(MakeWindow(std::move(enc), windowed, {0, static_cast<int>(seq.size())}));
    return plan;
  }

  if (truncation == Truncation::kEnd) {
    const int budget = geometry.chunk_tokens - specials;
    if (budget < 0) return InvalidArgument("chunk_tokens: " + std::to_string(geometry.chunk_tokens) +
                                           " cannot hold the model's " + std::to_string(specials) + " special tokens");
    plan.truncated = true;
    if (!pair) {
      const std::span<const int32_t> kept = first.first(static_cast<size_t>(std::min<int64_t>(budget, first.size())));
      FERRY_ASSIGN_OR_RETURN(tokenizer::TemplatedEncoding enc, apply_template(kept, std::nullopt));
      plan.windows.push_back(MakeWindow(std::move(enc), 0, {0, static_cast<int>(kept.size())}));
      return plan;
    }
    // HF tokenizers' longest_first: the shorter sequence keeps what it can of the budget
    // and the longer one the rest; when both are too long they split it, the longer one
    // taking the odd token.
    int64_t n1 = static_cast<int64_t>(first.size());
    int64_t n2 = static_cast<int64_t>(second->size());
    const bool swap = n1 > n2;
    if (swap) std::swap(n1, n2);
    n2 = n1 > budget ? n1 : std::max<int64_t>(n1, budget - n1);
    if (n1 + n2 > budget) {
      n1 = budget / 2;
      n2 = n1 + budget % 2;
    }
    if (swap) std::swap(n1, n2);
    const int64_t n_first = std::min<int64_t>(n1, first.size());
    const int64_t n_second = std::min<int64_t>(n2, second->size());
    FERRY_ASSIGN_OR_RETURN(tokenizer::TemplatedEncoding enc,
                           apply_template(first.first(static_cast<size_t>(n_first)),
                                          second->first(static_cast<size_t>(n_second))));
    plan.windows.push_back(MakeWindow(std::move(enc), 1, {0, static_cast<int>(n_second)}));
    return plan;
  }

  // kChunk.
  const int64_t room = geometry.chunk_tokens - specials - (pair ? static_cast<int64_t>(first.size()) : 0);
  if (room < 1) {
    return InvalidArgument("chunk_tokens: a " + std::to_string(geometry.chunk_tokens) + "-token window holds the " +
                           std::to_string(specials) + " special tokens" +
                           (pair ? " and the " + std::to_string(first.size()) + " tokens of the first text" : "") +
                           " and no content token");
  }
  FERRY_ASSIGN_OR_RETURN(const std::vector<Span> spans,
                         PlanWindows(static_cast<int>(seq.size()), static_cast<int>(room), geometry.chunk_overlap));
  plan.windows.reserve(spans.size());
  for (const Span& s : spans) {
    const std::span<const int32_t> part = seq.subspan(static_cast<size_t>(s.begin), static_cast<size_t>(s.size()));
    Result<tokenizer::TemplatedEncoding> enc =
        pair ? apply_template(first, part) : apply_template(part, std::nullopt);
    if (!enc.ok()) return enc.status();
    plan.windows.push_back(MakeWindow(std::move(enc).value(), windowed, s));
  }
  return plan;
}

std::string_view ErrorField(const Status& status) {
  const std::string& m = status.message();
  for (std::string_view field : {"chunk_tokens", "chunk_overlap"}) {
    if (m.size() > field.size() && m.compare(0, field.size(), field) == 0 && m[field.size()] == ':') return field;
  }
  return {};
}

}  // namespace ferry::chunk
