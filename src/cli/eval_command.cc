// `ferry eval`: perplexity and classification accuracy on JSONL data with ferry's engine.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>

#include "cli/subcommands.h"
#include "core/thread_pool.h"
#include "tools/evaluation.h"

namespace ferry::cli {

namespace {

struct EvalOptions {
  std::string model;
  std::string reference;
  int steps = 64;
  int prompt_tokens = 32;
  int random_prompts = 0;
  std::string data;
  int window = 512;
  int max_tokens = 128;
  int limit = 0;
  int threads = 0;
  // Long inputs (classify, tokens): unset truncation keeps `--max-tokens` truncation.
  std::string truncation;
  int chunk_tokens = 0;
  int chunk_overlap = -1;
  std::string aggregate;
  std::string chunk_merge = "center";
  std::string device = "cpu";  // compare: where both models run (GPU engines need their GPU)
};

Result<chunk::OfflineOptions> LongOptions(const EvalOptions& o) {
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

// Reads JSON lines with a "text" field (and "label" when `want_labels`).
Status ReadJsonl(const std::string& path, bool want_labels, int limit, std::vector<std::string>& texts,
                 std::vector<int>& labels) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open '" + path + "'");
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string()) {
      return InvalidArgument(path + ":" + std::to_string(line_no) + ": expected an object with a \"text\" string");
    }
    if (want_labels && (!j.contains("label") || !j["label"].is_number_integer())) {
      return InvalidArgument(path + ":" + std::to_string(line_no) + ": expected an integer \"label\"");
    }
    texts.push_back(j["text"].get<std::string>());
    if (want_labels) labels.push_back(j["label"].get<int>());
    if (limit > 0 && static_cast<int>(texts.size()) >= limit) break;
  }
  if (texts.empty()) return InvalidArgument("'" + path + "' holds no records");
  return Status::Ok();
}

int RunPerplexity(const EvalOptions& o) {
  std::vector<std::string> texts;
  std::vector<int> labels;
  if (Status st = ReadJsonl(o.data, false, o.limit, texts, labels); !st.ok()) return Fail(st);
  auto engine = engine::Engine::Load(o.model, {.threads = o.threads});
  if (!engine.ok()) return Fail(engine.status());
  std::vector<std::vector<int32_t>> docs;
  for (const std::string& t : texts) {
    auto ids = (*engine)->EncodePrompt(t);  // BOS as the tokenizer adds it, no EOS
    if (!ids.ok()) return Fail(ids.status());
    docs.push_back(std::move(ids).value());
  }
  auto r = tools::Perplexity(*engine, docs, o.window);
  if (!r.ok()) return Fail(r.status());
  nlohmann::json j = {{"perplexity", r->perplexity}, {"tokens", r->tokens}, {"documents", docs.size()},
                      {"windows", r->windows}, {"window", o.window}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

int RunClassifyEval(const EvalOptions& o) {
  std::vector<std::string> texts;
  std::vector<int> labels;
  if (Status st = ReadJsonl(o.data, true, o.limit, texts, labels); !st.ok()) return Fail(st);
  auto engine = engine::Engine::Load(o.model, {.threads = o.threads});
  if (!engine.ok()) return Fail(engine.status());
  if (!o.truncation.empty()) {
    auto options = LongOptions(o);
    if (!options.ok()) return Fail(options.status());
    auto aggregate = chunk::ParseClassifyAggregate(o.aggregate.empty() ? "weighted_mean" : o.aggregate);
    if (!aggregate) return Fail(InvalidArgument("--aggregate must be weighted_mean, mean_probs or max"));
    auto r = tools::EvaluateChunkedClassifier(**engine, texts, labels, *options, *aggregate);
    if (!r.ok()) return Fail(r.status());
    nlohmann::json j = {{"accuracy", r->result.accuracy()}, {"correct", r->result.correct},
                        {"total", r->result.total},        {"truncation", o.truncation},
                        {"chunk_tokens", o.chunk_tokens},  {"chunk_overlap", o.chunk_overlap},
                        {"aggregate", chunk::ClassifyAggregateName(*aggregate)},
                        {"windows", r->windows},           {"tokens", r->tokens}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  auto r = tools::EvaluateClassifier(**engine, texts, labels, o.max_tokens);
  if (!r.ok()) return Fail(r.status());
  nlohmann::json j = {{"accuracy", r->accuracy()}, {"correct", r->correct}, {"total", r->total},
                      {"truncated", r->truncated}, {"max_tokens", o.max_tokens}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

// {"text": ..., "entities": [{"start", "end", "label"}, ...]} lines, offsets in code points.
Status ReadTaggedJsonl(const std::string& path, int limit, std::vector<std::string>& texts,
                       std::vector<std::vector<tools::GoldEntity>>& gold) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open '" + path + "'");
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    const std::string where = path + ":" + std::to_string(line_no);
    if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string() ||
        !j.contains("entities") || !j["entities"].is_array()) {
      return InvalidArgument(where + ": expected an object with \"text\" and \"entities\"");
    }
    std::vector<tools::GoldEntity> entities;
    for (const nlohmann::json& e : j["entities"]) {
      if (!e.is_object() || !e.contains("start") || !e["start"].is_number_unsigned() || !e.contains("end") ||
          !e["end"].is_number_unsigned() || !e.contains("label") || !e["label"].is_string()) {
        return InvalidArgument(where + ": every entity needs start, end and label");
      }
      entities.push_back({e["start"].get<uint32_t>(), e["end"].get<uint32_t>(), e["label"].get<std::string>()});
    }
    texts.push_back(j["text"].get<std::string>());
    gold.push_back(std::move(entities));
    if (limit > 0 && static_cast<int>(texts.size()) >= limit) break;
  }
  if (texts.empty()) return InvalidArgument("'" + path + "' holds no records");
  return Status::Ok();
}

int RunTokensEval(const EvalOptions& o) {
  std::vector<std::string> texts;
  std::vector<std::vector<tools::GoldEntity>> gold;
  if (Status st = ReadTaggedJsonl(o.data, o.limit, texts, gold); !st.ok()) return Fail(st);
  auto options = LongOptions(o);
  if (!options.ok()) return Fail(options.status());
  auto aggregation = chunk::ParseTokenAggregation(o.aggregate.empty() ? "simple" : o.aggregate);
  if (!aggregation) return Fail(InvalidArgument("--aggregate must be none, simple, first, average or max"));
  auto merge = chunk::ParseTokenMerge(o.chunk_merge);
  if (!merge) return Fail(InvalidArgument("--chunk-merge must be center or hf"));
  auto engine = engine::Engine::Load(o.model, {.threads = o.threads});
  if (!engine.ok()) return Fail(engine.status());
  auto r = tools::EvaluateTokenClassifier(**engine, texts, gold, *options, *aggregation, *merge);
  if (!r.ok()) return Fail(r.status());
  nlohmann::json j = {{"f1", r->f1()},
                      {"precision", r->precision()},
                      {"recall", r->recall()},
                      {"true_positives", r->true_positives},
                      {"predicted", r->predicted},
                      {"gold", r->gold},
                      {"documents", texts.size()},
                      {"windows", r->windows},
                      {"truncation", o.truncation.empty() ? "chunk" : o.truncation},
                      {"chunk_tokens", o.chunk_tokens},
                      {"chunk_overlap", o.chunk_overlap},
                      {"aggregation", chunk::TokenAggregationName(*aggregation)},
                      {"chunk_merge", chunk::TokenMergeName(*merge)}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

int RunCompare(const EvalOptions& o) {
  auto device = ParseDevice(o.device);
  if (!device.ok()) return Fail(device.status());
  auto ref = engine::Engine::Load(o.reference, {.threads = o.threads, .device = *device});
  if (!ref.ok()) return Fail(ref.status());
  auto cand = engine::Engine::Load(o.model, {.threads = o.threads, .device = *device});
  if (!cand.ok()) return Fail(cand.status());
  std::vector<std::vector<int32_t>> prompts;
  if (o.random_prompts > 0 || o.data.empty()) {
    // Deterministic pseudo-random prompts (models without a tokenizer, e.g. the fixtures).
    const int n = o.random_prompts > 0 ? o.random_prompts : 8;
    const int vocab = (*ref)->config().vocab_size;
    uint64_t h = 12345;
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t> p;
      for (int t = 0; t < o.prompt_tokens; ++t) {
        h = h * 6364136223846793005ull + 1442695040888963407ull;
        p.push_back(static_cast<int32_t>((h >> 33) % static_cast<uint64_t>(vocab)));
      }
      prompts.push_back(std::move(p));
    }
  } else {
    std::vector<std::string> texts;
    std::vector<int> labels;
    if (Status st = ReadJsonl(o.data, false, o.limit > 0 ? o.limit : 16, texts, labels); !st.ok()) return Fail(st);
    for (const std::string& t : texts) {
      auto ids = (*ref)->EncodePrompt(t);
      if (!ids.ok()) return Fail(ids.status());
      if (static_cast<int>(ids->size()) > o.prompt_tokens) ids->resize(o.prompt_tokens);
      prompts.push_back(std::move(ids).value());
    }
  }
  auto r = tools::CompareDecoders(*ref, *cand, prompts, o.steps);
  if (!r.ok()) return Fail(r.status());
  nlohmann::json j = {{"max_abs_error", r->max_abs_error},
                      {"mean_abs_error", r->mean_abs_error},
                      {"max_abs_error_rel", r->max_abs_reference > 0 ? r->max_abs_error / r->max_abs_reference : 0},
                      {"teacher_forced_agreement", r->teacher_forced_agreement},
                      {"mean_prefix_match", r->mean_prefix_match},
                      {"prompts", r->prompts},
                      {"steps", r->steps},
                      {"positions", r->positions}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace

void RegisterEval(CLI::App& app, int& exit_code) {
  CLI::App* eval = app.add_subcommand("eval", "Measure model quality on JSONL data");
  eval->require_subcommand(1);
  auto o = std::make_shared<EvalOptions>();
  CLI::App* ppl = eval->add_subcommand("perplexity", "Decoder perplexity over documents ({\"text\": ...} lines)");
  ppl->add_option("--model", o->model, "Model directory")->required();
  ppl->add_option("--data", o->data, "JSONL file")->required();
  ppl->add_option("--window", o->window, "Window length (non-overlapping)");
  ppl->add_option("--limit", o->limit, "Use only the first N records");
  ppl->add_option("--threads", o->threads, "Compute threads (0 = all cores)");
  ppl->callback([o, &exit_code] { exit_code = RunPerplexity(*o); });
  CLI::App* cls = eval->add_subcommand("classify", "Classifier accuracy ({\"text\": ..., \"label\": id} lines)");
  cls->add_option("--model", o->model, "Model directory")->required();
  cls->add_option("--data", o->data, "JSONL file")->required();
  cls->add_option("--max-tokens", o->max_tokens, "Tokens read per input (special tokens included)");
  cls->add_option("--truncation", o->truncation, "error, end or chunk: whole texts through chunk/ (not --max-tokens)");
  cls->add_option("--chunk-tokens", o->chunk_tokens, "Window length (default: the model's context)");
  cls->add_option("--chunk-overlap", o->chunk_overlap, "Tokens consecutive windows share (default: 1/8 of a window)");
  cls->add_option("--aggregate", o->aggregate, "weighted_mean, mean_probs or max");
  cls->add_option("--limit", o->limit, "Use only the first N records");
  cls->add_option("--threads", o->threads, "Compute threads (0 = all cores)");
  cls->callback([o, &exit_code] { exit_code = RunClassifyEval(*o); });
  CLI::App* tok = eval->add_subcommand(
      "tokens", "Token classifier entity F1 ({\"text\": ..., \"entities\": [{start, end, label}]} lines)");
  tok->add_option("--model", o->model, "Model directory")->required();
  tok->add_option("--data", o->data, "JSONL file")->required();
  tok->add_option("--truncation", o->truncation, "end (the first window only) or chunk (default)");
  tok->add_option("--chunk-tokens", o->chunk_tokens, "Window length (default: the model's context)");
  tok->add_option("--chunk-overlap", o->chunk_overlap, "Tokens consecutive windows share (default: 1/8 of a window)");
  tok->add_option("--aggregate", o->aggregate, "none, simple (default), first, average or max");
  tok->add_option("--chunk-merge", o->chunk_merge, "center (default) or hf");
  tok->add_option("--limit", o->limit, "Use only the first N records");
  tok->add_option("--threads", o->threads, "Compute threads (0 = all cores)");
  tok->callback([o, &exit_code] { exit_code = RunTokensEval(*o); });
  CLI::App* cmp = eval->add_subcommand("compare", "Logit error and greedy agreement of a variant against a reference");
  cmp->add_option("--model", o->model, "Candidate (e.g. an int8 engine)")->required();
  cmp->add_option("--reference", o->reference, "Reference (e.g. the fp32 engine or checkpoint)")->required();
  cmp->add_option("--data", o->data, "JSONL prompts (first --prompt-tokens tokens of each text)");
  cmp->add_option("--limit", o->limit, "Prompts taken from --data (default 16)");
  cmp->add_option("--random-prompts", o->random_prompts, "Use N pseudo-random prompts instead");
  cmp->add_option("--prompt-tokens", o->prompt_tokens, "Prompt length");
  cmp->add_option("--steps", o->steps, "Greedy tokens compared per prompt");
  cmp->add_option("--threads", o->threads, "Compute threads (0 = all cores)");
  cmp->add_option("--device", o->device, "cpu, cuda or cuda:N: where both models run")->capture_default_str();
  cmp->callback([o, &exit_code] { exit_code = RunCompare(*o); });
}

}  // namespace ferry::cli
