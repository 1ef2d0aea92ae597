#include "chunk/offline.h"

#include <algorithm>
#include <cmath>

namespace ferry::chunk {
namespace {

struct Planned {
  InputPlan plan;
  std::vector<int32_t> ids;
  std::vector<tokenizer::TokenOffset> offsets;
};

Result<Planned> Plan(const engine::Engine& engine, std::string_view text, std::optional<std::string_view> pair,
                     const OfflineOptions& o, bool offsets) {
  const tokenizer::Tokenizer* tok = engine.tokenizer();
  if (tok == nullptr) return FailedPrecondition("model '" + engine.path() + "' has no tokenizer");
  if (engine.encoder() == nullptr) return InvalidArgument("model '" + engine.path() + "' is not an encoder");
  if (text.empty() || (pair && pair->empty())) return InvalidArgument("empty text");
  const int context = engine.config().max_position_embeddings;
  FERRY_ASSIGN_OR_RETURN(WindowGeometry g, ResolveWindow(o.chunk_tokens, o.chunk_overlap, context));
  if (o.truncation == Truncation::kError) g = {context, 0};
  Planned p;
  FERRY_ASSIGN_OR_RETURN(p.ids, offsets ? tok->EncodeWithOffsets(text, &p.offsets) : tok->Encode(text));
  std::vector<int32_t> second;
  if (pair) {
    FERRY_ASSIGN_OR_RETURN(second, tok->Encode(*pair));
  }
  FERRY_ASSIGN_OR_RETURN(p.plan, PlanInput(TemplateOf(tok), p.ids,
                                           pair ? std::optional<std::span<const int32_t>>(second) : std::nullopt,
                                           o.truncation, g));
  return p;
}

DocumentInfo Info(const InputPlan& plan) {
  return {static_cast<int>(plan.windows.size()), plan.TotalTokens(), plan.truncated};
}

// Runs `run` over the windows in batches and returns one row block per window.
template <typename Run>
Result<std::vector<std::vector<float>>> RunWindows(const InputPlan& plan, int batch_windows, bool per_token, Run run) {
  std::vector<std::vector<float>> rows;
  const size_t batch = static_cast<size_t>(std::max(1, batch_windows));
  for (size_t i = 0; i < plan.windows.size(); i += batch) {
    std::vector<engine::EncodedInput> inputs;
    for (size_t j = i; j < std::min(plan.windows.size(), i + batch); ++j) {
      inputs.push_back({plan.windows[j].ids, plan.windows[j].type_ids});
    }
    FERRY_ASSIGN_OR_RETURN(Tensor out, run(inputs));
    const int64_t width = out.dim(1);
    int64_t row = 0;
    for (const engine::EncodedInput& in : inputs) {
      const int64_t n = per_token ? static_cast<int64_t>(in.ids.size()) : 1;
      const float* begin = out.data<float>() + row * width;
      for (int64_t k = 0; k < n * width; ++k) {
        if (!std::isfinite(begin[k])) return Internal("the model produced non-finite outputs");
      }
      rows.emplace_back(begin, begin + n * width);
      row += n;
    }
  }
  return rows;
}

}  // namespace

Result<DocumentClassification> ClassifyDocument(const engine::Engine& engine, std::string_view text,
                                                std::optional<std::string_view> pair, const OfflineOptions& options,
                                                ClassifyAggregate aggregate) {
  FERRY_ASSIGN_OR_RETURN(Planned p, Plan(engine, text, pair, options, false));
  FERRY_ASSIGN_OR_RETURN(auto rows, RunWindows(p.plan, options.batch_windows, false, [&](const auto& in) {
                           return engine::Classify(engine, in);
                         }));
  return DocumentClassification{MergeClassification(rows, p.plan.ContentWeights(), aggregate), Info(p.plan)};
}

Result<DocumentEmbedding> EmbedDocument(const engine::Engine& engine, std::string_view text,
                                        const OfflineOptions& options, EmbedAggregate aggregate,
                                        engine::Pooling pooling, bool normalize) {
  FERRY_ASSIGN_OR_RETURN(Planned p, Plan(engine, text, std::nullopt, options, false));
  FERRY_ASSIGN_OR_RETURN(auto rows, RunWindows(p.plan, options.batch_windows, false, [&](const auto& in) {
                           return engine::Embed(engine, in, pooling, false);
                         }));
  DocumentEmbedding out{MergeEmbeddings(rows, p.plan.ContentWeights(), aggregate), Info(p.plan)};
  if (normalize) L2Normalize(out.vector);
  return out;
}

EntityOptions EntityOptionsFor(const engine::Engine& engine, TokenAggregation aggregation,
                               std::vector<std::string> ignore_labels) {
  const tokenizer::Tokenizer* tok = engine.tokenizer();
  EntityOptions o;
  for (const auto& [id, label] : engine.config().id2label) o.labels.push_back(label);
  o.aggregation = aggregation;
  o.ignore_labels = std::move(ignore_labels);
  if (tok != nullptr) {
    o.token_string = [tok](int32_t id) { return tok->IdToToken(id); };
    o.tokens_to_string = [tok](const std::vector<std::string>& tokens) { return tok->TokensToString(tokens); };
    o.word_aware = !tok->continuing_subword_prefix().empty();
    o.unk_id = tok->unk_id();
  }
  return o;
}

Result<DocumentTokens> TokenClassifyDocument(const engine::Engine& engine, std::string_view text,
                                               const OfflineOptions& options, TokenAggregation aggregation,
                                               TokenMerge merge, std::vector<std::string> ignore_labels) {
  if (engine.encoder() == nullptr || !engine.encoder()->has_token_classifier()) {
    return InvalidArgument("model '" + engine.path() + "' has no token-classification head");
  }
  FERRY_ASSIGN_OR_RETURN(Planned p, Plan(engine, text, std::nullopt, options, true));
  FERRY_ASSIGN_OR_RETURN(auto rows, RunWindows(p.plan, options.batch_windows, true, [&](const auto& in) {
                           return engine::ClassifyTokens(engine, in);
                         }));
  const EntityOptions o = EntityOptionsFor(engine, aggregation, std::move(ignore_labels));
  const size_t labels = o.labels.size();
  const CharText chars(text);
  std::vector<std::pair<uint32_t, uint32_t>> offsets;
  for (const tokenizer::TokenOffset& off : p.offsets) offsets.push_back(chars.FromBytes(off.begin, off.end));
  std::vector<WindowScores> windows;
  for (size_t w = 0; w < rows.size(); ++w) {
    const WindowInput& win = p.plan.windows[w];
    WindowScores s{win.content, win.content_at, {}};
    s.probs.assign(rows[w].begin() + static_cast<std::ptrdiff_t>(win.content_at * labels),
                   rows[w].begin() + static_cast<std::ptrdiff_t>((win.content_at + win.content.size()) * labels));
    for (size_t r = 0; r < static_cast<size_t>(win.content.size()); ++r) {
      float* row = s.probs.data() + r * labels;
      const float mx = *std::max_element(row, row + labels);
      double sum = 0.0;
      for (size_t k = 0; k < labels; ++k) sum += row[k] = std::exp(row[k] - mx);
      for (size_t k = 0; k < labels; ++k) row[k] = static_cast<float>(row[k] / sum);
    }
    windows.push_back(std::move(s));
  }
  return DocumentTokens{chunk::DocumentEntities(o, chars, p.ids, offsets, windows, merge), Info(p.plan)};
}

}  // namespace ferry::chunk
