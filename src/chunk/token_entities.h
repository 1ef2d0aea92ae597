// Token classification results as entities, with the semantics of transformers'
// token-classification pipeline (gather_pre_entities, aggregate, group_entities; the
// aggregation strategies none, simple, first, average and max), and the merge of a long
// document's windows. Pure: probabilities and offsets in, entities out.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chunk/long_input_options.h"
#include "chunk/windows.h"

namespace ferry::chunk {

// Text indexed by Unicode code points. Offsets reported to clients are code points (the
// str indices transformers reports); tokenizers work in bytes.
class CharText {
 public:
  explicit CharText(std::string_view text);
  size_t size() const { return char_begin_.size() - 1; }
  char32_t At(size_t i) const;
  // The code points a byte range touches: a byte inside a character counts for all of it.
  std::pair<uint32_t, uint32_t> FromBytes(uint32_t begin, uint32_t end) const;
  // The bytes of code points [begin, end).
  std::string_view Slice(uint32_t begin, uint32_t end) const;
  std::string_view text() const { return text_; }

 private:
  uint32_t CharOfByte(uint32_t byte) const;

  std::string_view text_;
  std::vector<uint32_t> char_begin_;  // byte offset of every code point, then the text's size
};

// One token as the grouping sees it.
struct TokenScores {
  int32_t id = 0;
  int index = 0;                 // reported `index`: the token's position in its model input
  uint32_t start = 0, end = 0;   // code point offsets into the text
  const float* probs = nullptr;  // one probability per label
};

struct EntityOptions {
  std::vector<std::string> labels;  // id2label in id order
  TokenAggregation aggregation = TokenAggregation::kSimple;
  std::vector<std::string> ignore_labels = {"O"};
  // From the tokenizer: the token's string, HF convert_tokens_to_string, whether its model
  // marks continuing subwords (WordPiece's "##"), its unknown token.
  std::function<std::string(int32_t)> token_string;
  std::function<std::string(const std::vector<std::string>&)> tokens_to_string;
  bool word_aware = true;
  std::optional<int32_t> unk_id;
};

struct Entity {
  std::string label;  // the label (none) or the entity group: the label without B-/I-
  double score = 0.0;
  uint32_t start = 0, end = 0;  // code point offsets into the text
  std::string word;             // transformers' `word`: the tokens joined back into text
  int index = -1;               // aggregation none only: the token's position in its input
};

// The pipeline's postprocess for one model input: pre-entities (special tokens already
// left out of `tokens`), aggregation, grouping, then the ignored labels dropped.
std::vector<Entity> AggregateTokens(const EntityOptions& options, const CharText& text,
                                    const std::vector<TokenScores>& tokens);

// transformers' aggregate_overlapping_entities: by start; an entity that starts inside the
// one kept before it replaces that one when longer, or as long and with a higher score.
std::vector<Entity> ResolveOverlapsHf(std::vector<Entity> entities);

// Non-maximum suppression over character spans: highest score first (ties: the longer
// span, then the earlier one); an entity overlapping one already kept is dropped. The
// result is ordered by start.
std::vector<Entity> SuppressOverlaps(std::vector<Entity> entities);

// One window's results: the probabilities of the content tokens it holds, in order,
// [content.size() x labels].
struct WindowScores {
  Span content;
  int content_at = 0;  // position of content.begin in the window's input
  std::vector<float> probs;
};

// The entities of a whole document from its windows (`ids` and `offsets`, in code points,
// are the document's tokens). One window: exactly the pipeline's output for it. Several:
//  - kCenter: every token takes the probabilities of the window where it is farthest from
//    an edge; entities are formed over the whole document, so one that crosses a window
//    boundary comes out whole; spans that still overlap (several tokens of one
//    character) are resolved by SuppressOverlaps. `index` counts from the first window's
//    content position, as if the document were one input.
//  - kHf: the pipeline with `stride`: entities per window, then ResolveOverlapsHf.
std::vector<Entity> DocumentEntities(const EntityOptions& options, const CharText& text,
                                     std::span<const int32_t> ids,
                                     std::span<const std::pair<uint32_t, uint32_t>> offsets,
                                     const std::vector<WindowScores>& windows, TokenMerge merge);

}  // namespace ferry::chunk
