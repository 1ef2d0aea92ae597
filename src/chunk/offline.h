// Long inputs without a server: one document's windows run through the engine in batches
// of at most `batch_windows` (so memory is bounded by one batch whatever the length) and
// are merged exactly as the server merges them. For `ferry classify`, `ferry embed` and
// `ferry eval`.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chunk/long_input_options.h"
#include "chunk/merge.h"
#include "chunk/token_entities.h"
#include "chunk/windows.h"
#include "engine/encoder_runner.h"
#include "engine/engine.h"

namespace ferry::chunk {

struct OfflineOptions {
  Truncation truncation = Truncation::kChunk;
  int chunk_tokens = 0;    // 0: the model's context
  int chunk_overlap = -1;  // -1: an eighth of the window
  int batch_windows = 32;  // windows per engine pass
};

struct DocumentInfo {
  int windows = 0;
  int64_t tokens = 0;  // tokens the model read
  bool truncated = false;
};

struct DocumentClassification {
  MergedClassification merged;
  DocumentInfo info;
};

// The text (or the pair: `pair` windowed, `text` repeated) classified.
Result<DocumentClassification> ClassifyDocument(const engine::Engine& engine, std::string_view text,
                                                std::optional<std::string_view> pair, const OfflineOptions& options,
                                                ClassifyAggregate aggregate);

struct DocumentEmbedding {
  std::vector<float> vector;
  DocumentInfo info;
};

Result<DocumentEmbedding> EmbedDocument(const engine::Engine& engine, std::string_view text,
                                        const OfflineOptions& options, EmbedAggregate aggregate,
                                        engine::Pooling pooling, bool normalize);

struct DocumentTokens {
  std::vector<Entity> entities;  // code point offsets into the text
  DocumentInfo info;
};

Result<DocumentTokens> TokenClassifyDocument(const engine::Engine& engine, std::string_view text,
                                               const OfflineOptions& options, TokenAggregation aggregation,
                                               TokenMerge merge, std::vector<std::string> ignore_labels = {"O"});

// What the token routes and tools need from a model for EntityOptions.
EntityOptions EntityOptionsFor(const engine::Engine& engine, TokenAggregation aggregation,
                               std::vector<std::string> ignore_labels);

}  // namespace ferry::chunk
