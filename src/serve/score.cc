// POST /v1/score in vLLM's format: {model, text_1, text_2} -> one score per pair. A
// cross-encoder (a sequence classifier with one label) reads each pair and scores it with
// the sigmoid of its logit, windowed like /v1/classify when long (the second text is
// windowed, the first repeated); any other encoder without a head scores the cosine
// similarity of the two texts' embeddings (each embedded, and windowed, on its own).
#include <chrono>
#include <cmath>
#include <random>

#include "chunk/merge.h"
#include "serve/encoder_job.h"
#include "serve/encoder_routes.h"
#include "serve/long_input_fields.h"
#include "serve/request_fields.h"

namespace ferry::serve {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxPairs = 2048;

MaybeError ReadTexts(const json& body, const char* field, std::vector<std::string>& out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return BadRequest(std::string("missing required field: ") + field, field);
  if (it->is_string()) {
    out.push_back(it->get<std::string>());
    return std::nullopt;
  }
  if (!it->is_array() || it->empty()) {
    return BadRequest(std::string(field) + " must be a string or a non-empty array of strings", field);
  }
  if (it->size() > kMaxPairs) return BadRequest("at most " + std::to_string(kMaxPairs) + " items in " + field, field);
  for (const json& t : *it) {
    if (!t.is_string()) return BadRequest(std::string(field) + " must be a string or an array of strings", field);
    out.push_back(t.get<std::string>());
  }
  return std::nullopt;
}

std::string ScoreId() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[40];
  std::snprintf(buf, sizeof(buf), "score-%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

json Response(const std::string& model, const std::vector<double>& scores, int64_t tokens) {
  json data = json::array();
  for (size_t i = 0; i < scores.size(); ++i) data.push_back({{"index", i}, {"object", "score"}, {"score", scores[i]}});
  const int64_t created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  return json{{"id", ScoreId()},
              {"object", "list"},
              {"created", created},
              {"model", model},
              {"data", data},
              {"usage",
               {{"prompt_tokens", tokens}, {"total_tokens", tokens}, {"completion_tokens", 0},
                {"prompt_tokens_details", nullptr}}}};
}

}  // namespace

void HandleScore(std::shared_ptr<RequestContext> ctx, ServedModel& model, const json& body, ThreadPool& workers) {
  EncoderCommon common;
  LongInputRequest req;
  std::vector<std::string> first_texts, second_texts;
  const model::EncoderModel& encoder = *model.engine().encoder();
  const bool cross = encoder.has_classifier();
  MaybeError err = RejectUnknownFields(body, {"model", "text_1", "text_2", "user", "priority", "timeout_us",
                                              "truncation", "chunk_tokens", "chunk_overlap", "aggregate"});
  if (!err && cross && model.engine().config().num_labels != 1) {
    err = BadRequest("model '" + model.name() + "' classifies into " + std::to_string(model.engine().config().num_labels) +
                         " labels; /v1/score needs a cross-encoder with one label (or an embedding model)",
                     "model");
  }
  if (!err && encoder.has_token_classifier()) {
    err = BadRequest("model '" + model.name() + "' is a token classifier; /v1/score needs a cross-encoder or an "
                     "embedding model", "model");
  }
  if (!err && !cross && !model.embedding_pooling().unsupported.empty()) {
    err = BadRequest("model '" + model.name() + "' serves no embeddings (its sentence-transformers pipeline has parts "
                     "ferry cannot run), so it cannot score pairs", "model");
  }
  if (!err) err = ReadEncoderCommon(body, model, ctx->principal(), common);
  if (!err) err = ReadLongInputFields(body, model, cross ? AggregateKind::kClassify : AggregateKind::kEmbed, req);
  if (!err) err = ReadTexts(body, "text_1", first_texts);
  if (!err) err = ReadTexts(body, "text_2", second_texts);
  // vLLM's shapes: 1 x N (text_1 broadcast) or N x N.
  if (!err && first_texts.size() != 1 && first_texts.size() != second_texts.size()) {
    err = BadRequest("text_1 has " + std::to_string(first_texts.size()) + " texts and text_2 " +
                         std::to_string(second_texts.size()) + "; give one text_1 or as many as text_2",
                     "text_2");
  }
  const size_t pairs = second_texts.size();
  std::vector<PlannedInput> plans;
  if (!err && cross) {
    for (size_t i = 0; i < pairs && !err; ++i) {
      PlannedInput p;
      err = PlanText(model, req, i, "text_1", first_texts[first_texts.size() == 1 ? 0 : i], second_texts[i], false, p,
                     "text_2");
      plans.push_back(std::move(p));
    }
  } else if (!err) {
    // Embeddings: every distinct text_1 once, then every text_2.
    for (size_t i = 0; i < first_texts.size() && !err; ++i) {
      PlannedInput p;
      err = PlanText(model, req, i, "text_1", first_texts[i], std::nullopt, false, p);
      plans.push_back(std::move(p));
    }
    for (size_t i = 0; i < pairs && !err; ++i) {
      PlannedInput p;
      err = PlanText(model, req, i, "text_2", second_texts[i], std::nullopt, false, p);
      plans.push_back(std::move(p));
    }
  }
  if (err) return RejectEncoderRequest(ctx, model, *err);

  auto shared = std::make_shared<std::vector<PlannedInput>>(std::move(plans));
  EncoderJobSpec spec;
  spec.kind = cross ? EncoderWork::Kind::kClassify : EncoderWork::Kind::kEmbed;
  spec.priority = common.priority;
  spec.timeout_us = common.timeout_us;
  spec.inputs = static_cast<int>(shared->size());
  std::vector<size_t> first;
  for (PlannedInput& in : *shared) {
    first.push_back(spec.items.size());
    spec.prompt_tokens += in.plan.TotalTokens();
    for (chunk::WindowInput& w : in.plan.windows) {
      spec.items.push_back(engine::EncodedInput{std::move(w.ids), std::move(w.type_ids)});
    }
  }
  first.push_back(spec.items.size());
  ctx->SetUserLog(common.user);
  const size_t n_first = first_texts.size();
  spec.finish = [name = model.name(), cross, req, shared, first, pairs, n_first,
                 tokens = spec.prompt_tokens](std::vector<std::vector<float>>& rows) -> Result<json> {
    auto rows_of = [&](size_t i) {
      std::vector<std::vector<float>> out;
      for (size_t k = first[i]; k < first[i + 1]; ++k) out.push_back(rows[k]);
      return out;
    };
    std::vector<double> scores;
    if (cross) {
      for (size_t i = 0; i < pairs; ++i) {
        const chunk::MergedClassification m =
            chunk::MergeClassification(rows_of(i), (*shared)[i].plan.ContentWeights(), req.classify_aggregate);
        scores.push_back(1.0 / (1.0 + std::exp(-static_cast<double>(m.logits[0]))));
      }
    } else {
      std::vector<std::vector<float>> vectors;
      for (size_t i = 0; i < shared->size(); ++i) {
        std::vector<float> v =
            chunk::MergeEmbeddings(rows_of(i), (*shared)[i].plan.ContentWeights(), req.embed_aggregate);
        chunk::L2Normalize(v);
        vectors.push_back(std::move(v));
      }
      for (size_t i = 0; i < pairs; ++i) {
        const std::vector<float>& a = vectors[n_first == 1 ? 0 : i];
        const std::vector<float>& b = vectors[n_first + i];
        double dot = 0.0;
        for (size_t j = 0; j < a.size(); ++j) dot += static_cast<double>(a[j]) * b[j];
        scores.push_back(dot);
      }
    }
    return Response(name, scores, tokens);
  };
  RunEncoderJob(std::move(ctx), model, workers, std::move(spec));
}

}  // namespace ferry::serve
