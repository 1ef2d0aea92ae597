#include "serve/long_input_fields.h"

namespace ferry::serve {
namespace {

using json = nlohmann::json;

template <typename E>
MaybeError ReadChoice(const json& body, const char* field, std::optional<E> (*parse)(std::string_view),
                      const char* expected, E& out) {
  std::string name;
  if (auto e = ReadString(body, field, name)) return e;
  if (name.empty()) return std::nullopt;
  const std::optional<E> value = parse(name);
  if (!value) return BadRequest(std::string(field) + " must be one of " + expected + ", got \"" + name + "\"", field);
  out = *value;
  return std::nullopt;
}

// An error from chunk/ as the client sees it.
ApiError PlanError(const Status& s, size_t index, const char* field, int context) {
  if (s.code() == StatusCode::kOutOfRange) {
    return BadRequest(std::string(field) + " " + std::to_string(index) + ": " + s.message() +
                          " (this model's maximum context length is " + std::to_string(context) +
                          "; truncation \"end\" or \"chunk\" accepts longer inputs)",
                      field, "context_length_exceeded");
  }
  const std::string_view named = chunk::ErrorField(s);
  if (!named.empty()) return BadRequest(s.message(), std::string(named));
  return FromStatus(s, field);
}

MaybeError CheckLimit(const LongInputRequest& req, size_t index, const char* field, int64_t tokens) {
  if (req.max_input_tokens <= 0 || tokens <= req.max_input_tokens) return std::nullopt;
  ApiError e = BadRequest(std::string(field) + " " + std::to_string(index) + " has " + std::to_string(tokens) +
                              " tokens, over this model's max_input_tokens of " + std::to_string(req.max_input_tokens),
                          field, "max_input_tokens_exceeded");
  e.http_status = 413;
  return e;
}

MaybeError Plan(const ServedModel& model, const LongInputRequest& req, size_t index, const char* field,
                const chunk::TemplateFn& apply, std::span<const int32_t> first,
                std::optional<std::span<const int32_t>> second, PlannedInput& out) {
  auto plan = chunk::PlanInput(apply, first, second, req.truncation, req.geometry);
  if (!plan.ok()) {
    // An input over the limit is refused for that, whatever else is wrong with it.
    const int64_t tokens = static_cast<int64_t>(first.size()) + (second ? static_cast<int64_t>(second->size()) : 0);
    if (auto e = CheckLimit(req, index, field, tokens)) return e;
    return PlanError(plan.status(), index, field, model.max_seq_len());
  }
  if (auto e = CheckLimit(req, index, field, plan->input_tokens)) return e;
  out.plan = std::move(plan).value();
  return std::nullopt;
}

}  // namespace

MaybeError ReadLongInputFields(const json& body, const ServedModel& model, AggregateKind aggregate,
                               LongInputRequest& out) {
  const chunk::LongInputOptions& d = model.config().long_inputs;
  out.truncation = d.truncation;
  out.classify_aggregate = d.classify_aggregate;
  out.embed_aggregate = d.embeddings_aggregate;
  out.max_input_tokens = d.max_input_tokens;
  out.max_inputs = d.max_inputs;
  if (auto e = ReadChoice(body, "truncation", chunk::ParseTruncation, "\"error\", \"end\" or \"chunk\"", out.truncation)) {
    return e;
  }
  const int context = model.max_seq_len();
  int64_t chunk_tokens = d.chunk_tokens;
  int64_t chunk_overlap = d.chunk_overlap;
  if (auto e = ReadInt(body, "chunk_tokens", 1, context, chunk_tokens)) return e;
  if (auto e = ReadInt(body, "chunk_overlap", 0, context, chunk_overlap)) return e;
  auto geometry = chunk::ResolveWindow(static_cast<int>(chunk_tokens), static_cast<int>(chunk_overlap), context);
  if (!geometry.ok()) {
    const std::string_view named = chunk::ErrorField(geometry.status());
    return BadRequest(geometry.status().message(), named.empty() ? "chunk_tokens" : std::string(named));
  }
  out.geometry = *geometry;
  if (out.truncation == chunk::Truncation::kError) out.geometry = {context, 0};
  if (aggregate == AggregateKind::kClassify) {
    if (auto e = ReadChoice(body, "aggregate", chunk::ParseClassifyAggregate,
                            "\"weighted_mean\", \"mean_probs\" or \"max\"", out.classify_aggregate)) {
      return e;
    }
  } else if (aggregate == AggregateKind::kEmbed) {
    if (auto e = ReadChoice(body, "aggregate", chunk::ParseEmbedAggregate, "\"weighted_mean\" or \"first\"",
                            out.embed_aggregate)) {
      return e;
    }
  }
  return std::nullopt;
}

MaybeError PlanText(const ServedModel& model, const LongInputRequest& req, size_t index, const char* field,
                    const std::string& text, const std::optional<std::string>& pair, bool with_offsets,
                    PlannedInput& out, const char* pair_field) {
  const tokenizer::Tokenizer* tok = model.engine().tokenizer();
  if (tok == nullptr) return BadRequest("this model has no tokenizer; send token ids", field);
  if (text.empty() || (pair && pair->empty())) {
    return BadRequest(std::string(field) + " " + std::to_string(index) + " is empty; inputs must not be empty strings",
                      pair && pair->empty() && !text.empty() ? pair_field : field);
  }
  Result<std::vector<int32_t>> first = with_offsets ? tok->EncodeWithOffsets(text, &out.offsets) : tok->Encode(text);
  if (!first.ok()) return BadRequest("cannot tokenize " + std::string(field) + ": " + first.status().message(), field);
  std::vector<int32_t> second;
  if (pair) {
    auto encoded = tok->Encode(*pair);
    if (!encoded.ok()) return BadRequest("cannot tokenize the pair text: " + encoded.status().message(), pair_field);
    second = std::move(encoded).value();
  }
  if (auto e = Plan(model, req, index, field, chunk::TemplateOf(tok), *first,
                    pair ? std::optional<std::span<const int32_t>>(second) : std::nullopt, out)) {
    return e;
  }
  if (with_offsets) {
    out.text = text;
    out.ids = std::move(first).value();
  }
  return std::nullopt;
}

MaybeError PlanIds(const ServedModel& model, const LongInputRequest& req, size_t index, const char* field,
                   const json& arr, PlannedInput& out) {
  if (arr.empty()) return BadRequest("token-id inputs must not be empty", field);
  const int vocab = model.engine().config().vocab_size;
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (const json& v : arr) {
    if (!v.is_number_integer()) return BadRequest("token ids must be integers", field);
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id >= vocab) return BadRequest("token id " + std::to_string(id) + " is outside the vocabulary", field);
    ids.push_back(static_cast<int32_t>(id));
  }
  const chunk::TemplateFn apply =
      chunk::TemplateOf(req.truncation == chunk::Truncation::kChunk ? model.engine().tokenizer() : nullptr);
  return Plan(model, req, index, field, apply, ids, std::nullopt, out);
}

MaybeError PlanInputs(const json& body, const char* field, const ServedModel& model, const LongInputRequest& req,
                      const json* pairs, bool with_offsets, std::vector<PlannedInput>& out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return BadRequest(std::string("missing required field: ") + field, field);
  // Pairs: one string for a single input, or one per input.
  std::vector<std::string> pair_texts;
  if (pairs != nullptr && !pairs->is_null()) {
    if (pairs->is_string()) {
      if (!it->is_string()) return BadRequest("text_pair must be an array with one text per input", "text_pair");
      pair_texts.push_back(pairs->get<std::string>());
    } else if (pairs->is_array()) {
      if (!it->is_array() || it->size() != pairs->size()) {
        return BadRequest("text_pair must hold one text per input (" + std::string(field) + ")", "text_pair");
      }
      for (const json& p : *pairs) {
        if (!p.is_string()) return BadRequest("text_pair must hold strings", "text_pair");
        pair_texts.push_back(p.get<std::string>());
      }
    } else {
      return BadRequest("text_pair must be a string or an array of strings", "text_pair");
    }
  }
  auto add_text = [&](const std::string& text) -> MaybeError {
    const size_t index = out.size();
    std::optional<std::string> pair;
    if (!pair_texts.empty()) pair = pair_texts[index];
    PlannedInput planned;
    if (auto e = PlanText(model, req, index, field, text, pair, with_offsets, planned)) return e;
    out.push_back(std::move(planned));
    return std::nullopt;
  };
  auto add_ids = [&](const json& arr) -> MaybeError {
    if (!pair_texts.empty()) return BadRequest("text_pair needs text inputs, not token ids", "text_pair");
    if (with_offsets) return BadRequest("this route needs text inputs (character offsets), not token ids", field);
    PlannedInput planned;
    if (auto e = PlanIds(model, req, out.size(), field, arr, planned)) return e;
    out.push_back(std::move(planned));
    return std::nullopt;
  };
  return ForEachTextOrIds(*it, field, static_cast<size_t>(req.max_inputs), add_text, add_ids);
}

}  // namespace ferry::serve
