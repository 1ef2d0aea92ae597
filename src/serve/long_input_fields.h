// The long-input fields of the encoder routes (truncation, chunk_tokens, chunk_overlap,
// aggregate) resolved against a model's `long_inputs` defaults, and each request input
// tokenized and cut into model inputs by chunk/. Errors are 400s naming the field, and a
// 413 for an input over max_input_tokens.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "chunk/long_input_options.h"
#include "chunk/windows.h"
#include "serve/model_repository.h"
#include "serve/request_fields.h"
#include "tokenizer/tokenizer.h"

namespace ferry::serve {

// What the route's `aggregate` field chooses.
enum class AggregateKind { kClassify, kEmbed, kNone };

struct LongInputRequest {
  chunk::Truncation truncation = chunk::Truncation::kError;
  chunk::WindowGeometry geometry;  // kError: the model's context, no overlap
  chunk::ClassifyAggregate classify_aggregate = chunk::ClassifyAggregate::kWeightedMean;
  chunk::EmbedAggregate embed_aggregate = chunk::EmbedAggregate::kWeightedMean;
  int64_t max_input_tokens = 0;
  int64_t max_inputs = 2048;  // the model's long_inputs.max_inputs
};

// The field names ReadLongInputFields reads (for RejectUnknownFields): truncation,
// chunk_tokens, chunk_overlap and, unless kNone, aggregate.
MaybeError ReadLongInputFields(const nlohmann::json& body, const ServedModel& model, AggregateKind aggregate,
                               LongInputRequest& out);

// One request input, tokenized and cut.
struct PlannedInput {
  chunk::InputPlan plan;
  // With offsets (the token route): the text, its tokens (no special tokens) and their
  // byte offsets into it.
  std::string text;
  std::vector<int32_t> ids;
  std::vector<tokenizer::TokenOffset> offsets;
};

// A text (and optionally the text it is paired with, whose tokens are the ones windowed:
// pairs keep the first text whole in every window). `index` and `field` name the input in
// errors. `with_offsets`: keep the text's token offsets (single texts only).
MaybeError PlanText(const ServedModel& model, const LongInputRequest& req, size_t index, const char* field,
                    const std::string& text, const std::optional<std::string>& pair, bool with_offsets,
                    PlannedInput& out, const char* pair_field = "text_pair");

// Token ids as sent. Under kError and kEnd they are the model's input as they are; under
// kChunk they are content, and every window gets the model's special tokens (when it has a
// tokenizer), since a client cannot know where windows are cut.
MaybeError PlanIds(const ServedModel& model, const LongInputRequest& req, size_t index, const char* field,
                   const nlohmann::json& ids, PlannedInput& out);

// `input`-style fields (string | string[] | int[] | int[][]), each planned; `pairs` (a
// string, or strings one per input) pairs every text with a second text.
MaybeError PlanInputs(const nlohmann::json& body, const char* field, const ServedModel& model,
                      const LongInputRequest& req, const nlohmann::json* pairs, bool with_offsets,
                      std::vector<PlannedInput>& out);

}  // namespace ferry::serve
