// How an encoder treats inputs longer than one window: the truncation mode, the window
// geometry and how window results are merged. Plain typed values: the server's config
// parser and request parsers fill them, chunk/ obeys them.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/status.h"

namespace ferry::chunk {

// What happens to an input longer than a window.
enum class Truncation {
  kError,  // refuse it (400, context_length_exceeded)
  kEnd,    // keep the first window's worth of tokens (pairs: trim the longer sequence first)
  kChunk,  // overlapping windows, run as separate inputs, results merged
};

// Sequence classification over several windows.
enum class ClassifyAggregate {
  kWeightedMean,  // logits averaged, each window weighted by its content tokens
  kMeanProbs,     // probabilities averaged with the same weights
  kMax,           // per label, the largest logit of any window
};

// Embeddings over several windows.
enum class EmbedAggregate {
  kWeightedMean,  // pooled window vectors averaged, weighted by content tokens (then normalized)
  kFirst,         // the first window's vector
};

// Token classification: how tokens become entities (transformers' pipeline semantics).
enum class TokenAggregation { kNone, kSimple, kFirst, kAverage, kMax };

// Token classification over several windows.
enum class TokenMerge {
  kCenter,  // each token from the window where it is farthest from an edge; entities formed
            // over the whole document; overlapping spans resolved by score (NMS)
  kHf,      // transformers' pipeline with `stride`: entities per window, overlapping ones
            // resolved by its rule (the longer span, then the higher score)
};

// The per-model defaults (config `long_inputs:`). Values a request may override are
// resolved against the model by ResolveWindow.
struct LongInputOptions {
  Truncation truncation = Truncation::kError;
  int chunk_tokens = 0;    // window length including special tokens; 0: the model's context
  int chunk_overlap = -1;  // content tokens consecutive windows share; -1: chunk_tokens / 8
  ClassifyAggregate classify_aggregate = ClassifyAggregate::kWeightedMean;
  EmbedAggregate embeddings_aggregate = EmbedAggregate::kWeightedMean;
  TokenAggregation token_aggregation = TokenAggregation::kSimple;
  TokenMerge token_merge = TokenMerge::kCenter;
  int64_t max_input_tokens = 0;  // tokens of one input (all its windows' content); 0: no limit
  int64_t max_inputs = 2048;     // inputs in one request (each text, pair or token-id array)

  Status Validate() const;
};

// The window geometry of one request, checked against the model.
struct WindowGeometry {
  int chunk_tokens = 0;   // including special tokens
  int chunk_overlap = 0;  // content tokens
};

// Fills the defaults of `chunk_tokens` (0: `context`) and `chunk_overlap` (-1: an eighth of
// the window) and checks them: 1 <= chunk_tokens <= context, 0 <= chunk_overlap. Whether a
// window still holds a content token depends on the input (special tokens, a pair's first
// sequence) and is checked when it is cut. Errors name the field.
Result<WindowGeometry> ResolveWindow(int chunk_tokens, int chunk_overlap, int context);

std::string_view TruncationName(Truncation t);
std::string_view ClassifyAggregateName(ClassifyAggregate a);
std::string_view EmbedAggregateName(EmbedAggregate a);
std::string_view TokenAggregationName(TokenAggregation a);
std::string_view TokenMergeName(TokenMerge m);
std::optional<Truncation> ParseTruncation(std::string_view name);
std::optional<ClassifyAggregate> ParseClassifyAggregate(std::string_view name);
std::optional<EmbedAggregate> ParseEmbedAggregate(std::string_view name);
std::optional<TokenAggregation> ParseTokenAggregation(std::string_view name);
std::optional<TokenMerge> ParseTokenMerge(std::string_view name);

}  // namespace ferry::chunk
