#include "serve/encoder_routes.h"

#include <algorithm>
#include <cmath>

#include "chunk/merge.h"
#include "serve/encoder_job.h"
#include "serve/long_input_fields.h"
#include "serve/request_fields.h"

namespace ferry::serve {

namespace {

using json = nlohmann::json;

// OpenAI's base64 embeddings: the little-endian float32 bytes, base64-encoded.
std::string Base64Floats(const std::vector<float>& v) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* bytes = reinterpret_cast<const unsigned char*>(v.data());
  const size_t n = v.size() * sizeof(float);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t b0 = bytes[i];
    const uint32_t b1 = i + 1 < n ? bytes[i + 1] : 0;
    const uint32_t b2 = i + 2 < n ? bytes[i + 2] : 0;
    const uint32_t triple = (b0 << 16) | (b1 << 8) | b2;
    out += kAlphabet[(triple >> 18) & 63];
    out += kAlphabet[(triple >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(triple >> 6) & 63] : '=';
    out += i + 2 < n ? kAlphabet[triple & 63] : '=';
  }
  return out;
}

// Every window of every input, in order, and where each input's windows start.
struct JobItems {
  std::vector<engine::EncodedInput> items;
  std::vector<size_t> first;  // per input: index of its first item; then the total
  int64_t tokens = 0;
};

JobItems Flatten(std::vector<PlannedInput>& inputs) {
  JobItems j;
  for (PlannedInput& in : inputs) {
    j.first.push_back(j.items.size());
    j.tokens += in.plan.TotalTokens();
    for (chunk::WindowInput& w : in.plan.windows) {
      j.items.push_back(engine::EncodedInput{std::move(w.ids), std::move(w.type_ids)});
      w.ids.clear();
      w.type_ids.clear();
    }
  }
  j.first.push_back(j.items.size());
  return j;
}

// The rows of input i's windows.
std::vector<std::vector<float>> RowsOf(std::vector<std::vector<float>>& rows, const std::vector<size_t>& first,
                                       size_t i) {
  std::vector<std::vector<float>> out;
  for (size_t k = first[i]; k < first[i + 1]; ++k) out.push_back(std::move(rows[k]));
  return out;
}

// Fields a chunked or truncated result reports about its input.
void AddWindowFields(json& item, const PlannedInput& in, chunk::Truncation truncation) {
  if (truncation == chunk::Truncation::kChunk) item["windows"] = in.plan.windows.size();
  if (truncation == chunk::Truncation::kEnd) item["truncated"] = in.plan.truncated;
}

std::string LabelName(const std::map<int, std::string>& labels, size_t k) {
  auto it = labels.find(static_cast<int>(k));
  return it == labels.end() ? "LABEL_" + std::to_string(k) : it->second;
}

}  // namespace

MaybeError ReadEncoderCommon(const json& body, const ServedModel& model, const Principal& who, EncoderCommon& out) {
  if (auto e = ReadString(body, "user", out.user)) return e;
  const int levels = model.config().dynamic_batching.priority_levels;
  // The tenant's tier sets the level; a request may ask for a lower one (a larger number).
  int64_t level = std::min(who.priority, levels);
  if (auto e = ReadInt(body, "priority", 1, levels, level)) return e;
  out.priority = std::max(std::min(who.priority, levels), static_cast<int>(level));
  if (auto e = ReadInt(body, "timeout_us", 1, int64_t{1} << 40, out.timeout_us)) return e;
  return std::nullopt;
}

void RejectEncoderRequest(const std::shared_ptr<RequestContext>& ctx, const ServedModel& model, const ApiError& e) {
  ctx->metrics().RecordFailure(model.name(), ctx->principal().tier, kFailureInvalidRequest);
  ctx->ReplyError(e);
}

void HandleEmbeddings(std::shared_ptr<RequestContext> ctx, ServedModel& model, const json& body, ThreadPool& workers) {
  EncoderCommon common;
  LongInputRequest req;
  std::vector<PlannedInput> inputs;
  std::string encoding = "float";
  bool normalize = model.embedding_pooling().normalize;
  MaybeError err = RejectUnknownFields(body, {"model", "input", "encoding_format", "dimensions", "user", "priority",
                                              "timeout_us", "truncation", "chunk_tokens", "chunk_overlap",
                                              "aggregate", "normalize"});
  if (!err && !model.embedding_pooling().unsupported.empty()) {
    std::string what;
    for (const std::string& u : model.embedding_pooling().unsupported) what += (what.empty() ? "" : ", ") + u;
    err = BadRequest("model '" + model.name() + "' is a sentence-transformers model whose pipeline ferry cannot run (" +
                         what + "), so it serves no embeddings",
                     "model");
  }
  if (!err) err = ReadEncoderCommon(body, model, ctx->principal(), common);
  if (!err) err = ReadLongInputFields(body, model, AggregateKind::kEmbed, req);
  if (!err) err = ReadString(body, "encoding_format", encoding);
  if (!err && encoding != "float" && encoding != "base64") {
    err = BadRequest("encoding_format must be \"float\" or \"base64\"", "encoding_format");
  }
  const int hidden = model.engine().config().hidden_size;
  int64_t dims = hidden;
  if (!err) err = ReadInt(body, "dimensions", 1, 1 << 20, dims);
  if (!err && dims != hidden) {
    err = BadRequest("this model's embeddings have " + std::to_string(hidden) + " dimensions", "dimensions");
  }
  if (!err) err = ReadBool(body, "normalize", normalize);
  if (!err) err = PlanInputs(body, "input", model, req, nullptr, false, inputs);
  if (err) return RejectEncoderRequest(ctx, model, *err);

  auto plans = std::make_shared<std::vector<PlannedInput>>(std::move(inputs));
  JobItems items = Flatten(*plans);
  EncoderJobSpec spec;
  spec.kind = EncoderWork::Kind::kEmbed;
  spec.priority = common.priority;
  spec.timeout_us = common.timeout_us;
  spec.inputs = static_cast<int>(plans->size());
  spec.prompt_tokens = items.tokens;
  spec.items = std::move(items.items);
  ctx->SetUserLog(common.user);
  spec.finish = [name = model.name(), base64 = encoding == "base64", normalize, req, plans, first = items.first,
                 tokens = items.tokens](std::vector<std::vector<float>>& rows) -> Result<json> {
    json data = json::array();
    for (size_t i = 0; i < plans->size(); ++i) {
      std::vector<float> v =
          chunk::MergeEmbeddings(RowsOf(rows, first, i), (*plans)[i].plan.ContentWeights(), req.embed_aggregate);
      if (normalize) chunk::L2Normalize(v);
      json item = {{"object", "embedding"}, {"index", i}, {"embedding", base64 ? json(Base64Floats(v)) : json(v)}};
      AddWindowFields(item, (*plans)[i], req.truncation);
      data.push_back(std::move(item));
    }
    return json{{"object", "list"}, {"data", data}, {"model", name},
                {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
  };
  RunEncoderJob(std::move(ctx), model, workers, std::move(spec));
}

void HandleClassify(std::shared_ptr<RequestContext> ctx, ServedModel& model, const json& body, ThreadPool& workers) {
  EncoderCommon common;
  LongInputRequest req;
  std::vector<PlannedInput> inputs;
  MaybeError err = RejectUnknownFields(body, {"model", "input", "text_pair", "user", "priority", "timeout_us",
                                              "truncation", "chunk_tokens", "chunk_overlap", "aggregate"});
  if (!err && !model.engine().encoder()->has_classifier()) {
    err = BadRequest("model '" + model.name() + "' has no sequence-classification head", "model");
  }
  if (!err) err = ReadEncoderCommon(body, model, ctx->principal(), common);
  if (!err) err = ReadLongInputFields(body, model, AggregateKind::kClassify, req);
  const auto pairs = body.find("text_pair");
  if (!err) err = PlanInputs(body, "input", model, req, pairs == body.end() ? nullptr : &*pairs, false, inputs);
  if (err) return RejectEncoderRequest(ctx, model, *err);

  auto plans = std::make_shared<std::vector<PlannedInput>>(std::move(inputs));
  JobItems items = Flatten(*plans);
  EncoderJobSpec spec;
  spec.kind = EncoderWork::Kind::kClassify;
  spec.priority = common.priority;
  spec.timeout_us = common.timeout_us;
  spec.inputs = static_cast<int>(plans->size());
  spec.prompt_tokens = items.tokens;
  spec.items = std::move(items.items);
  ctx->SetUserLog(common.user);
  spec.finish = [name = model.name(), labels = model.engine().config().id2label, req, plans, first = items.first,
                 tokens = items.tokens](std::vector<std::vector<float>>& rows) -> Result<json> {
    json data = json::array();
    for (size_t i = 0; i < plans->size(); ++i) {
      const chunk::MergedClassification m =
          chunk::MergeClassification(RowsOf(rows, first, i), (*plans)[i].plan.ContentWeights(), req.classify_aggregate);
      size_t best = 0;
      json scores = json::object();
      for (size_t k = 0; k < m.probs.size(); ++k) {
        if (m.probs[k] > m.probs[best]) best = k;
        scores[LabelName(labels, k)] = m.probs[k];
      }
      json item = {{"index", i},         {"label", LabelName(labels, best)}, {"score", m.probs[best]},
                   {"scores", scores},   {"probs", m.probs},                 {"num_classes", m.probs.size()}};
      AddWindowFields(item, (*plans)[i], req.truncation);
      data.push_back(std::move(item));
    }
    return json{{"object", "list"}, {"data", data}, {"model", name},
                {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
  };
  RunEncoderJob(std::move(ctx), model, workers, std::move(spec));
}

}  // namespace ferry::serve
