// tokenize, classify and embed: commands over a tokenizer or an encoder model.
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>

#include "chunk/offline.h"
#include "cli/subcommands.h"
#include "core/device_spec.h"
#include "core/mapped_file.h"
#include "engine/engine.h"
#include "engine/encoder_runner.h"
#include "tokenizer/tokenizer.h"

namespace ferry::cli {

namespace {

void PrintJson(const nlohmann::json& j) {
  std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

struct TokenizeOptions {
  std::string model;
  std::string text;
  std::string text_file;
  bool special = false;
  bool offsets = false;
  int chunk_tokens = 0;
  int chunk_overlap = -1;
};

int RunTokenize(const TokenizeOptions& o) {
  auto tok = engine::LoadTokenizerFor(o.model);
  if (!tok.ok()) return Fail(tok.status());
  std::string text = o.text;
  if (!o.text_file.empty()) {
    auto read = ReadFileToString(o.text_file);
    if (!read.ok()) return Fail(read.status());
    text = std::move(read).value();
  }
  if (o.chunk_tokens > 0) {
    // The windows /v1/classify cuts with truncation "chunk": each with its special tokens.
    auto ids = (*tok)->Encode(text);
    if (!ids.ok()) return Fail(ids.status());
    auto g = chunk::ResolveWindow(o.chunk_tokens, o.chunk_overlap, o.chunk_tokens);
    if (!g.ok()) return Fail(g.status());
    auto plan = chunk::PlanInput(chunk::TemplateOf(tok->get()), *ids, std::nullopt, chunk::Truncation::kChunk, *g);
    if (!plan.ok()) return Fail(plan.status());
    nlohmann::json windows = nlohmann::json::array();
    for (const chunk::WindowInput& w : plan->windows) windows.push_back(w.ids);
    PrintJson({{"tokens", ids->size()}, {"windows", windows}});
    return 0;
  }
  if (o.offsets) {
    std::vector<tokenizer::TokenOffset> offsets;
    auto ids = (*tok)->EncodeWithOffsets(text, &offsets);
    if (!ids.ok()) return Fail(ids.status());
    nlohmann::json spans = nlohmann::json::array();
    for (const tokenizer::TokenOffset& off : offsets) spans.push_back({off.begin, off.end});
    PrintJson({{"ids", *ids}, {"offsets", spans}});
    return 0;
  }
  std::vector<int32_t> ids;
  if (o.special) {
    auto enc = (*tok)->EncodeWithSpecial(text);
    if (!enc.ok()) return Fail(enc.status());
    ids = enc->ids;
  } else {
    auto enc = (*tok)->Encode(text);
    if (!enc.ok()) return Fail(enc.status());
    ids = std::move(enc).value();
  }
  PrintJson({{"ids", ids}});
  return 0;
}

struct EncoderOptions {
  std::string model;
  std::string text;
  std::string text_file;
  std::string text_pair;
  std::string pooling = "cls";
  bool normalize = false;
  int threads = 0;
  std::string device = "cpu";
  // Long inputs (see chunk/offline.h): unset truncation keeps the plain one-input path.
  std::string truncation;
  int chunk_tokens = 0;
  int chunk_overlap = -1;
  std::string aggregate;
  bool tokens = false;
  std::string chunk_merge = "center";
  std::vector<std::string> ignore_labels = {"O"};
};

// --text, or the contents of --text-file.
Result<std::string> TextOf(const EncoderOptions& o) {
  if (!o.text_file.empty()) return ReadFileToString(o.text_file);
  return o.text;
}

Result<chunk::OfflineOptions> LongOptions(const EncoderOptions& o) {
  chunk::OfflineOptions l;
  if (!o.truncation.empty()) {
    auto t = chunk::ParseTruncation(o.truncation);
    if (!t) return InvalidArgument("--truncation must be error, end or chunk");
    l.truncation = *t;
  }
  l.chunk_tokens = o.chunk_tokens;
  l.chunk_overlap = o.chunk_overlap;
  return l;
}

// The engine, on --device (an engine file built for a GPU loads only there).
Result<std::shared_ptr<engine::Engine>> LoadEngine(const EncoderOptions& o) {
  FERRY_ASSIGN_OR_RETURN(const DeviceSpec device, ParseDevice(o.device));
  return engine::Engine::Load(o.model, {.threads = o.threads, .device = device});
}

nlohmann::json DocumentJson(const chunk::DocumentInfo& info) {
  return {{"windows", info.windows}, {"tokens", info.tokens}, {"truncated", info.truncated}};
}

// Long inputs and token classification through chunk/.
int RunLongClassify(const EncoderOptions& o) {
  auto text = TextOf(o);
  if (!text.ok()) return Fail(text.status());
  auto options = LongOptions(o);
  if (!options.ok()) return Fail(options.status());
  auto eng = LoadEngine(o);
  if (!eng.ok()) return Fail(eng.status());
  const auto& labels = (*eng)->config().id2label;
  if (o.tokens) {
    auto aggregation = chunk::ParseTokenAggregation(o.aggregate.empty() ? "simple" : o.aggregate);
    if (!aggregation) return Fail(InvalidArgument("--aggregate must be none, simple, first, average or max"));
    auto merge = chunk::ParseTokenMerge(o.chunk_merge);
    if (!merge) return Fail(InvalidArgument("--chunk-merge must be center or hf"));
    auto r = chunk::TokenClassifyDocument(**eng, *text, *options, *aggregation, *merge, o.ignore_labels);
    if (!r.ok()) return Fail(r.status());
    const chunk::CharText chars(*text);
    nlohmann::json entities = nlohmann::json::array();
    for (const chunk::Entity& e : r->entities) {
      nlohmann::json j = {{"label", e.label}, {"score", e.score}, {"start", e.start}, {"end", e.end},
                          {"text", std::string(chars.Slice(e.start, e.end))}, {"word", e.word}};
      if (*aggregation == chunk::TokenAggregation::kNone) j["index"] = e.index;
      entities.push_back(std::move(j));
    }
    nlohmann::json out = DocumentJson(r->info);
    out["entities"] = std::move(entities);
    PrintJson(out);
    return 0;
  }
  auto aggregate = chunk::ParseClassifyAggregate(o.aggregate.empty() ? "weighted_mean" : o.aggregate);
  if (!aggregate) return Fail(InvalidArgument("--aggregate must be weighted_mean, mean_probs or max"));
  std::optional<std::string_view> pair;
  if (!o.text_pair.empty()) pair = o.text_pair;
  auto r = chunk::ClassifyDocument(**eng, *text, pair, *options, *aggregate);
  if (!r.ok()) return Fail(r.status());
  const std::vector<double>& p = r->merged.probs;
  const size_t best = static_cast<size_t>(std::max_element(p.begin(), p.end()) - p.begin());
  nlohmann::json scores = nlohmann::json::object();
  auto name = [&labels](size_t k) {
    auto it = labels.find(static_cast<int>(k));
    return it != labels.end() ? it->second : "LABEL_" + std::to_string(k);
  };
  for (size_t k = 0; k < p.size(); ++k) scores[name(k)] = p[k];
  nlohmann::json out = DocumentJson(r->info);
  out["label"] = name(best);
  out["scores"] = scores;
  out["logits"] = r->merged.logits;
  PrintJson(out);
  return 0;
}

// Loads an encoder engine and tokenizes the text (with [CLS]/[SEP] and type ids).
Result<std::pair<std::shared_ptr<engine::Engine>, engine::EncodedInput>> Prepare(const EncoderOptions& o) {
  if (o.text.empty()) return InvalidArgument("--text is empty");
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<engine::Engine> eng, LoadEngine(o));
  if (eng->encoder() == nullptr) return InvalidArgument("'" + o.model + "' is not an encoder model");
  if (eng->tokenizer() == nullptr) return FailedPrecondition("'" + o.model + "' has no tokenizer files");
  std::optional<std::string_view> pair;
  if (!o.text_pair.empty()) pair = o.text_pair;
  FERRY_ASSIGN_OR_RETURN(tokenizer::Encoding enc, eng->tokenizer()->EncodeWithSpecial(o.text, pair));
  engine::EncodedInput in{enc.ids, enc.type_ids};
  return std::make_pair(eng, in);
}

int RunClassify(const EncoderOptions& o) {
  if (o.tokens || !o.truncation.empty() || !o.text_file.empty()) return RunLongClassify(o);
  auto prepared = Prepare(o);
  if (!prepared.ok()) return Fail(prepared.status());
  auto& [eng, input] = *prepared;
  auto logits_or = engine::Classify(*eng, {input});
  if (!logits_or.ok()) return Fail(logits_or.status());
  const Tensor& logits = *logits_or;
  const int64_t n = logits.dim(1);
  std::vector<float> l(logits.data<float>(), logits.data<float>() + n);
  std::vector<float> scores(n);
  const float mx = *std::max_element(l.begin(), l.end());
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(l[i] - mx));
  int64_t best = 0;
  for (int64_t i = 0; i < n; ++i) {
    scores[i] = static_cast<float>(std::exp(static_cast<double>(l[i] - mx)) / sum);
    if (l[i] > l[best]) best = i;
  }
  const auto& labels = eng->config().id2label;
  auto it = labels.find(static_cast<int>(best));
  nlohmann::json scores_json = nlohmann::json::object();
  for (int64_t i = 0; i < n; ++i) {
    auto li = labels.find(static_cast<int>(i));
    scores_json[li != labels.end() ? li->second : "LABEL_" + std::to_string(i)] = scores[i];
  }
  PrintJson({{"label", it != labels.end() ? it->second : "LABEL_" + std::to_string(best)},
             {"scores", scores_json},
             {"logits", l}});
  return 0;
}

int RunEmbed(const EncoderOptions& o) {
  const std::map<std::string, engine::Pooling> poolings = {{"cls", engine::Pooling::kCls}, {"mean", engine::Pooling::kMean},
                                                           {"max", engine::Pooling::kMax}, {"last", engine::Pooling::kLast}};
  if (poolings.count(o.pooling) == 0) return Fail(InvalidArgument("--pooling must be cls, mean, max or last"));
  if (!o.truncation.empty() || !o.text_file.empty()) {
    auto text = TextOf(o);
    if (!text.ok()) return Fail(text.status());
    auto options = LongOptions(o);
    if (!options.ok()) return Fail(options.status());
    auto aggregate = chunk::ParseEmbedAggregate(o.aggregate.empty() ? "weighted_mean" : o.aggregate);
    if (!aggregate) return Fail(InvalidArgument("--aggregate must be weighted_mean or first"));
    auto eng = LoadEngine(o);
    if (!eng.ok()) return Fail(eng.status());
    auto r = chunk::EmbedDocument(**eng, *text, *options, *aggregate, poolings.at(o.pooling), o.normalize);
    if (!r.ok()) return Fail(r.status());
    nlohmann::json out = DocumentJson(r->info);
    out["embedding"] = r->vector;
    PrintJson(out);
    return 0;
  }
  auto prepared = Prepare(o);
  if (!prepared.ok()) return Fail(prepared.status());
  auto& [eng, input] = *prepared;
  auto emb = engine::Embed(*eng, {input}, poolings.at(o.pooling), o.normalize);
  if (!emb.ok()) return Fail(emb.status());
  std::vector<float> v(emb->data<float>(), emb->data<float>() + emb->dim(1));
  PrintJson({{"embedding", v}});
  return 0;
}

void AddLongInputOptions(CLI::App* sub, EncoderOptions& o) {
  sub->add_option("--truncation", o.truncation, "Inputs longer than a window: error, end or chunk");
  sub->add_option("--chunk-tokens", o.chunk_tokens, "Window length with special tokens (default: the context)");
  sub->add_option("--chunk-overlap", o.chunk_overlap, "Tokens consecutive windows share (default: 1/8 of a window)");
  sub->add_option("--aggregate", o.aggregate,
                  "Merge: weighted_mean|mean_probs|max (classify), weighted_mean|first (embed), "
                  "none|simple|first|average|max (--tokens)");
}

}  // namespace

void RegisterTokenize(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* sub = app.add_subcommand("tokenize", "Print the token ids of a text");
  sub->add_option("--model", o->model, "Model or tokenizer directory, or engine file")->required();
  auto* text = sub->add_option("--text", o->text, "Text to tokenize");
  sub->add_option("--text-file", o->text_file, "Read the text from this file")->excludes(text);
  sub->add_flag("--special", o->special, "Add the model's special tokens (BOS, [CLS]/[SEP])");
  sub->add_flag("--offsets", o->offsets, "Also print each token's byte offsets into the text");
  sub->add_option("--chunk-tokens", o->chunk_tokens,
                  "Print the windows of this many tokens (special tokens included) that truncation \"chunk\" cuts");
  sub->add_option("--chunk-overlap", o->chunk_overlap, "Tokens consecutive windows share (default: 1/8 of a window)");
  sub->callback([o, &exit_code] { exit_code = RunTokenize(*o); });
}

void RegisterClassify(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<EncoderOptions>();
  CLI::App* sub = app.add_subcommand("classify", "Classify a text (or its tokens) with an encoder");
  sub->add_option("--model", o->model, "Checkpoint directory, GGUF file or engine file")->required();
  auto* text = sub->add_option("--text", o->text, "Text");
  sub->add_option("--text-file", o->text_file, "Read the text from this file")->excludes(text);
  sub->add_option("--text-pair", o->text_pair, "Second text of a pair (windowed when long)");
  sub->add_flag("--tokens", o->tokens, "Token classification: entities with character offsets");
  AddLongInputOptions(sub, *o);
  sub->add_option("--chunk-merge", o->chunk_merge, "--tokens over several windows: center or hf");
  sub->add_option("--ignore-labels", o->ignore_labels, "--tokens: labels left out (default O)");
  sub->add_option("--threads", o->threads, "Compute threads (0 = all cores)");
  sub->add_option("--device", o->device, "cpu, cuda or cuda:N");
  sub->callback([o, &exit_code] { exit_code = RunClassify(*o); });
}

void RegisterEmbed(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<EncoderOptions>();
  CLI::App* sub = app.add_subcommand("embed", "Embed a text with an encoder");
  sub->add_option("--model", o->model, "Checkpoint directory, GGUF file or engine file")->required();
  auto* text = sub->add_option("--text", o->text, "Text");
  sub->add_option("--text-file", o->text_file, "Read the text from this file")->excludes(text);
  sub->add_option("--pooling", o->pooling, "cls, mean, max or last");
  AddLongInputOptions(sub, *o);
  sub->add_flag("--normalize", o->normalize, "L2-normalise the embedding");
  sub->add_option("--threads", o->threads, "Compute threads (0 = all cores)");
  sub->add_option("--device", o->device, "cpu, cuda or cuda:N");
  sub->callback([o, &exit_code] { exit_code = RunEmbed(*o); });
}

}  // namespace ferry::cli
