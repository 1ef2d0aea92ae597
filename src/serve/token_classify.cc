// POST /v1/token-classify: entities from a token-classification encoder, with character
// offsets into the text, grouped as transformers' token-classification pipeline groups them
// (`aggregation`), over windows of long texts merged by `chunk_merge`.
#include <algorithm>
#include <cmath>

#include "chunk/offline.h"
#include "chunk/token_entities.h"
#include "serve/encoder_job.h"
#include "serve/encoder_routes.h"
#include "serve/long_input_fields.h"
#include "serve/request_fields.h"

namespace ferry::serve {
namespace {

using json = nlohmann::json;

// Softmax of each [labels] row, in place, in float as transformers computes it.
void SoftmaxRows(float* rows, size_t n, size_t labels) {
  for (size_t r = 0; r < n; ++r) {
    float* row = rows + r * labels;
    const float mx = *std::max_element(row, row + labels);
    double sum = 0.0;
    for (size_t k = 0; k < labels; ++k) sum += row[k] = std::exp(row[k] - mx);
    for (size_t k = 0; k < labels; ++k) row[k] = static_cast<float>(row[k] / sum);
  }
}

// The entities of one input from its windows' logits ([window tokens x labels] each).
json InputEntities(const chunk::EntityOptions& options, const PlannedInput& in, std::vector<std::vector<float>> rows,
                   chunk::TokenMerge merge) {
  const size_t labels = options.labels.size();
  const chunk::CharText text(in.text);
  std::vector<std::pair<uint32_t, uint32_t>> offsets;
  offsets.reserve(in.offsets.size());
  for (const tokenizer::TokenOffset& o : in.offsets) offsets.push_back(text.FromBytes(o.begin, o.end));
  std::vector<chunk::WindowScores> windows;
  windows.reserve(rows.size());
  for (size_t w = 0; w < rows.size(); ++w) {
    const chunk::WindowInput& win = in.plan.windows[w];
    chunk::WindowScores s;
    s.content = win.content;
    s.content_at = win.content_at;
    const size_t from = static_cast<size_t>(win.content_at) * labels;
    const size_t count = static_cast<size_t>(win.content.size()) * labels;
    s.probs.assign(rows[w].begin() + static_cast<std::ptrdiff_t>(from),
                   rows[w].begin() + static_cast<std::ptrdiff_t>(from + count));
    rows[w].clear();
    SoftmaxRows(s.probs.data(), static_cast<size_t>(win.content.size()), labels);
    windows.push_back(std::move(s));
  }
  const std::vector<chunk::Entity> entities = chunk::DocumentEntities(options, text, in.ids, offsets, windows, merge);
  json out = json::array();
  for (const chunk::Entity& e : entities) {
    json j = {{"label", e.label},
              {"score", e.score},
              {"start", e.start},
              {"end", e.end},
              {"text", std::string(text.Slice(e.start, e.end))},
              {"word", e.word}};
    if (options.aggregation == chunk::TokenAggregation::kNone) j["index"] = e.index;
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

void HandleTokenClassify(std::shared_ptr<RequestContext> ctx, ServedModel& model, const json& body,
                         ThreadPool& workers) {
  EncoderCommon common;
  LongInputRequest req;
  std::vector<PlannedInput> inputs;
  const chunk::LongInputOptions& defaults = model.config().long_inputs;
  chunk::TokenAggregation aggregation = defaults.token_aggregation;
  chunk::TokenMerge merge = defaults.token_merge;
  std::vector<std::string> ignore_labels = {"O"};
  MaybeError err = RejectUnknownFields(body, {"model", "input", "user", "priority", "timeout_us", "truncation",
                                              "chunk_tokens", "chunk_overlap", "aggregation", "chunk_merge",
                                              "ignore_labels"});
  if (!err && !model.engine().encoder()->has_token_classifier()) {
    err = BadRequest("model '" + model.name() + "' has no token-classification head (" +
                         (model.engine().config().architecture.empty() ? std::string("no architectures")
                                                                       : model.engine().config().architecture) +
                         "); /v1/token-classify needs a ...ForTokenClassification model",
                     "model");
  }
  if (!err && model.engine().tokenizer() == nullptr) {
    err = BadRequest("model '" + model.name() + "' has no tokenizer; /v1/token-classify needs text", "model");
  }
  if (!err) err = ReadEncoderCommon(body, model, ctx->principal(), common);
  if (!err) err = ReadLongInputFields(body, model, AggregateKind::kNone, req);
  if (!err) {
    std::string name;
    err = ReadString(body, "aggregation", name);
    if (!err && !name.empty()) {
      if (auto a = chunk::ParseTokenAggregation(name)) {
        aggregation = *a;
      } else {
        err = BadRequest("aggregation must be one of \"none\", \"simple\", \"first\", \"average\" or \"max\", got \"" +
                             name + "\"",
                         "aggregation");
      }
    }
  }
  if (!err) {
    std::string name;
    err = ReadString(body, "chunk_merge", name);
    if (!err && !name.empty()) {
      if (auto m = chunk::ParseTokenMerge(name)) {
        merge = *m;
      } else {
        err = BadRequest("chunk_merge must be \"center\" or \"hf\", got \"" + name + "\"", "chunk_merge");
      }
    }
  }
  if (!err) {
    auto it = body.find("ignore_labels");
    if (it != body.end() && !it->is_null()) {
      ignore_labels.clear();
      if (!it->is_array()) err = BadRequest("ignore_labels must be an array of label names", "ignore_labels");
      for (size_t i = 0; !err && i < it->size(); ++i) {
        if (!(*it)[i].is_string()) {
          err = BadRequest("ignore_labels must be an array of label names", "ignore_labels");
        } else {
          ignore_labels.push_back((*it)[i].get<std::string>());
        }
      }
    }
  }
  if (!err) err = PlanInputs(body, "input", model, req, nullptr, /*with_offsets=*/true, inputs);
  if (err) return RejectEncoderRequest(ctx, model, *err);

  chunk::EntityOptions options = chunk::EntityOptionsFor(model.engine(), aggregation, std::move(ignore_labels));

  auto plans = std::make_shared<std::vector<PlannedInput>>(std::move(inputs));
  EncoderJobSpec spec;
  spec.kind = EncoderWork::Kind::kTokens;
  spec.priority = common.priority;
  spec.timeout_us = common.timeout_us;
  spec.inputs = static_cast<int>(plans->size());
  std::vector<size_t> first;
  for (PlannedInput& in : *plans) {
    first.push_back(spec.items.size());
    spec.prompt_tokens += in.plan.TotalTokens();
    for (chunk::WindowInput& w : in.plan.windows) {
      spec.items.push_back(engine::EncodedInput{std::move(w.ids), std::move(w.type_ids)});
    }
  }
  first.push_back(spec.items.size());
  ctx->SetUserLog(common.user);
  spec.finish = [name = model.name(), options = std::move(options), merge, truncation = req.truncation, plans, first,
                 tokens = spec.prompt_tokens](std::vector<std::vector<float>>& rows) -> Result<json> {
    json data = json::array();
    for (size_t i = 0; i < plans->size(); ++i) {
      std::vector<std::vector<float>> mine;
      for (size_t k = first[i]; k < first[i + 1]; ++k) mine.push_back(std::move(rows[k]));
      json item = {{"index", i}, {"entities", InputEntities(options, (*plans)[i], std::move(mine), merge)}};
      if (truncation == chunk::Truncation::kChunk) item["windows"] = (*plans)[i].plan.windows.size();
      if (truncation == chunk::Truncation::kEnd) item["truncated"] = (*plans)[i].plan.truncated;
      data.push_back(std::move(item));
    }
    return json{{"object", "list"}, {"data", data}, {"model", name},
                {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
  };
  RunEncoderJob(std::move(ctx), model, workers, std::move(spec));
}

}  // namespace ferry::serve
