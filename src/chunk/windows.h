// Cutting one input into model inputs: truncation at the end, or overlapping windows with
// the model's special tokens around each, as Hugging Face's stride tokenization cuts them
// (`return_overflowing_tokens=True, stride=S`; pairs with only_second truncation: the first
// sequence is repeated, the second windowed). Pure: token ids in, token ids out.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chunk/long_input_options.h"
#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace ferry::chunk {

// Tokens [begin, end) of the sequence being windowed.
struct Span {
  int begin = 0;
  int end = 0;
  int size() const { return end - begin; }
};

// Windows of `window_content` tokens that start every `window_content - overlap` tokens
// until one reaches the end of the content (HF tokenizers' Encoding::truncate with a
// stride). Content that fits gives one window; no content gives one empty window.
// InvalidArgument when window_content < 1 ("chunk_tokens: ...") or overlap >= window_content
// ("chunk_overlap: ...").
Result<std::vector<Span>> PlanWindows(int content_tokens, int window_content, int overlap);

// Per content token, the window in which it is farthest from a window edge. The start and
// the end of the content are not window edges (nothing was cut there). Ties go to the
// earlier window. `windows` as PlanWindows returns them.
std::vector<int> CenterOwners(const std::vector<Span>& windows, int content_tokens);

// Adds the model's special tokens around one or two sequences (Tokenizer::ApplyTemplate).
using TemplateFn = std::function<Result<tokenizer::TemplatedEncoding>(std::span<const int32_t>,
                                                                       std::optional<std::span<const int32_t>>)>;
// The template of a tokenizer, or, without one, the sequences as they are (type ids 0 and 1).
TemplateFn TemplateOf(const tokenizer::Tokenizer* tokenizer);

// One model input cut from an input.
struct WindowInput {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;
  Span content;        // the tokens of the windowed sequence it holds
  int content_at = 0;  // index in `ids` of token content.begin
};

// Every model input of one request input.
struct InputPlan {
  std::vector<WindowInput> windows;
  int windowed_tokens = 0;   // tokens of the windowed sequence before any cut
  int64_t input_tokens = 0;  // the whole input with its special tokens, before any cut
  bool truncated = false;    // kEnd dropped tokens

  int64_t TotalTokens() const;
  // Per window, its content tokens (at least 1): the weights of the merges.
  std::vector<int> ContentWeights() const;
};

// The model inputs of `first` alone (windowed) or of the pair (first, second), whose
// second sequence is windowed and whose first is repeated in every window.
//  - kError: one input; OutOfRange when it is longer than chunk_tokens.
//  - kEnd: one input of at most chunk_tokens: the first tokens of a single sequence; a
//    pair loses tokens from its longer sequence, one at a time (HF's longest_first).
//  - kChunk: PlanWindows over what the template and a pair's first sequence leave of
//    chunk_tokens; InvalidArgument naming chunk_tokens or chunk_overlap when a window
//    would hold no new content token.
Result<InputPlan> PlanInput(const TemplateFn& apply_template, std::span<const int32_t> first,
                            std::optional<std::span<const int32_t>> second, Truncation truncation,
                            const WindowGeometry& geometry);

// The request field an error of PlanWindows or PlanInput is about ("chunk_tokens",
// "chunk_overlap"), or empty.
std::string_view ErrorField(const Status& status);

}  // namespace ferry::chunk
