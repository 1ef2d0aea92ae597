// tokenize, classify and embed: commands over a tokenizer or an encoder model.
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>

#include "cli/subcommands.h"
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
  bool special = false;
};

int RunTokenize(const TokenizeOptions& o) {
  auto tok = engine::LoadTokenizerFor(o.model);
  if (!tok.ok()) return Fail(tok.status());
  std::vector<int32_t> ids;
  if (o.special) {
    auto enc = (*tok)->EncodeWithSpecial(o.text);
    if (!enc.ok()) return Fail(enc.status());
    ids = enc->ids;
  } else {
    auto enc = (*tok)->Encode(o.text);
    if (!enc.ok()) return Fail(enc.status());
    ids = std::move(enc).value();
  }
  PrintJson({{"ids", ids}});
  return 0;
}

struct EncoderOptions {
  std::string model;
  std::string text;
  std::string text_pair;
  std::string pooling = "cls";
  bool normalize = false;
  int threads = 0;
};

// Loads an encoder engine and tokenizes the text (with [CLS]/[SEP] and type ids).
Result<std::pair<std::shared_ptr<engine::Engine>, engine::EncodedInput>> Prepare(const EncoderOptions& o) {
  if (o.text.empty()) return InvalidArgument("--text is empty");
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<engine::Engine> eng, engine::Engine::Load(o.model, {.threads = o.threads}));
  if (eng->encoder() == nullptr) return InvalidArgument("'" + o.model + "' is not an encoder model");
  if (eng->tokenizer() == nullptr) return FailedPrecondition("'" + o.model + "' has no tokenizer files");
  std::optional<std::string_view> pair;
  if (!o.text_pair.empty()) pair = o.text_pair;
  FERRY_ASSIGN_OR_RETURN(tokenizer::Encoding enc, eng->tokenizer()->EncodeWithSpecial(o.text, pair));
  engine::EncodedInput in{enc.ids, enc.type_ids};
  return std::make_pair(eng, in);
}

int RunClassify(const EncoderOptions& o) {
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
  if (o.pooling != "cls" && o.pooling != "mean") return Fail(InvalidArgument("--pooling must be cls or mean"));
  auto prepared = Prepare(o);
  if (!prepared.ok()) return Fail(prepared.status());
  auto& [eng, input] = *prepared;
  auto emb = engine::Embed(*eng, {input}, o.pooling == "cls" ? engine::Pooling::kCls : engine::Pooling::kMean,
                           o.normalize);
  if (!emb.ok()) return Fail(emb.status());
  std::vector<float> v(emb->data<float>(), emb->data<float>() + emb->dim(1));
  PrintJson({{"embedding", v}});
  return 0;
}

}  // namespace

void RegisterTokenize(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* sub = app.add_subcommand("tokenize", "Print the token ids of a text");
  sub->add_option("--model", o->model, "Model or tokenizer directory, or engine file")->required();
  sub->add_option("--text", o->text, "Text to tokenize")->required();
  sub->add_flag("--special", o->special, "Add the model's special tokens (BOS, [CLS]/[SEP])");
  sub->callback([o, &exit_code] { exit_code = RunTokenize(*o); });
}

void RegisterClassify(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<EncoderOptions>();
  CLI::App* sub = app.add_subcommand("classify", "Classify a text with a sequence-classification encoder");
  sub->add_option("--model", o->model, "Checkpoint directory")->required();
  sub->add_option("--text", o->text, "Text")->required();
  sub->add_option("--text-pair", o->text_pair, "Second text of a pair");
  sub->add_option("--threads", o->threads, "Compute threads (0 = all cores)");
  sub->callback([o, &exit_code] { exit_code = RunClassify(*o); });
}

void RegisterEmbed(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<EncoderOptions>();
  CLI::App* sub = app.add_subcommand("embed", "Embed a text with an encoder");
  sub->add_option("--model", o->model, "Checkpoint directory")->required();
  sub->add_option("--text", o->text, "Text")->required();
  sub->add_option("--pooling", o->pooling, "cls or mean");
  sub->add_flag("--normalize", o->normalize, "L2-normalise the embedding");
  sub->add_option("--threads", o->threads, "Compute threads (0 = all cores)");
  sub->callback([o, &exit_code] { exit_code = RunEmbed(*o); });
}

}  // namespace ferry::cli
