#include "serve/completions.h"

#include <algorithm>

#include "serve/generation_job.h"
#include "serve/request_fields.h"
#include "serve/structured_fields.h"
#include "tokenizer/tokenizer.h"

namespace ferry::serve {

namespace {

using json = nlohmann::json;

MaybeError ReadPrompts(const json& body, const ServedModel& model, int max_prompts, GenerationParams& p) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return BadRequest("missing required field: prompt", "prompt");
  const engine::Engine& e = model.engine();
  // A prompt that truncate_prompt_tokens will cut may be longer than the context.
  auto cut = body.find("truncate_prompt_tokens");
  const bool truncating = cut != body.end() && !cut->is_null();
  auto add_text = [&](const std::string& text) -> MaybeError {
    if (e.tokenizer() == nullptr) return BadRequest("this model has no tokenizer; send the prompt as token ids", "prompt");
    if (!truncating && e.TextSurelyLongerThan(text, model.max_seq_len())) {
      return BadRequest("the prompt has " + std::to_string(text.size()) + " bytes, more than " +
                            std::to_string(model.max_seq_len()) + " tokens (this model's maximum context length) "
                            "can hold", "prompt", "context_length_exceeded");
    }
    auto ids = e.EncodePrompt(text);
    if (!ids.ok()) return BadRequest("cannot tokenize the prompt: " + ids.status().message(), "prompt");
    if (ids.value().empty()) return BadRequest("the prompt is empty", "prompt");
    p.prompts.push_back(std::move(ids).value());
    p.prompt_texts.push_back(text);
    return std::nullopt;
  };
  auto add_ids = [&](const json& arr) -> MaybeError {
    if (arr.empty()) return BadRequest("a token-id prompt must not be empty", "prompt");
    std::vector<int32_t> ids;
    for (const json& v : arr) {
      if (!v.is_number_integer()) return BadRequest("prompt token ids must be integers", "prompt");
      const int64_t id = v.get<int64_t>();
      if (id < 0 || id >= e.config().vocab_size) {
        return BadRequest("prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(e.config().vocab_size) + ")", "prompt");
      }
      ids.push_back(static_cast<int32_t>(id));
    }
    std::string text;
    if (e.tokenizer() != nullptr) {
      auto t = e.tokenizer()->Decode(ids, false);
      if (t.ok()) text = t.value();
    }
    p.prompts.push_back(std::move(ids));
    p.prompt_texts.push_back(std::move(text));
    return std::nullopt;
  };
  return ForEachTextOrIds(*it, "prompt", static_cast<size_t>(max_prompts), add_text, add_ids);
}

// vLLM's truncate_prompt_tokens: keep the last N tokens of each prompt (-1: as many as the
// context leaves beside max_tokens).
MaybeError TruncatePrompts(const json& body, const ServedModel& model, GenerationParams& p) {
  auto it = body.find("truncate_prompt_tokens");
  if (it == body.end() || it->is_null()) return std::nullopt;
  int64_t keep = 0;
  if (auto e = ReadInt(body, "truncate_prompt_tokens", -1, model.max_seq_len(), keep)) return e;
  if (keep == 0) {
    return BadRequest("truncate_prompt_tokens must be >= 1, or -1 for the model's context", "truncate_prompt_tokens");
  }
  if (keep < 0) keep = std::max<int64_t>(1, model.max_seq_len() - p.max_tokens);
  const tokenizer::Tokenizer* tok = model.engine().tokenizer();
  for (size_t i = 0; i < p.prompts.size(); ++i) {
    std::vector<int32_t>& prompt = p.prompts[i];
    if (static_cast<int64_t>(prompt.size()) <= keep) continue;
    prompt.erase(prompt.begin(), prompt.end() - keep);
    p.prompt_texts[i].clear();  // echo shows what the model read
    if (tok != nullptr) {
      auto text = tok->Decode(prompt, false);
      if (text.ok()) p.prompt_texts[i] = std::move(text).value();
    }
  }
  return std::nullopt;
}

MaybeError ParseCompletion(const json& body, const ServedModel& model, RequestContext& ctx, const RouteEnv& env,
                           GenerationParams& p) {
  if (auto e = CheckUnknownFields(body,
                                  {"prompt", "max_tokens", "logprobs", "echo", "best_of", "suffix",
                                   "truncate_prompt_tokens"},
                                  ctx, env.unknown_fields)) {
    return e;
  }
  if (auto e = ReadPrompts(body, model, env.max_choices, p)) return e;
  if (auto e = ReadGenerationFields(body, model, ctx.principal(), env, p)) return e;
  int64_t v = p.max_tokens;
  if (auto e = ReadInt(body, "max_tokens", 1, 1 << 20, v)) return e;
  p.max_tokens = static_cast<int>(v);
  if (auto e = TruncatePrompts(body, model, p)) return e;
  if (body.contains("best_of") && !body["best_of"].is_null()) {
    int64_t best_of = p.n;
    if (auto e = ReadInt(body, "best_of", 1, env.max_choices, best_of)) return e;
    if (best_of != p.n) return BadRequest("best_of other than n is not supported", "best_of");
  }
  if (static_cast<int64_t>(p.prompts.size()) * p.n > env.max_choices) {
    return BadRequest("prompts x n must not exceed " + std::to_string(env.max_choices) + " (api.max_choices)", "n");
  }
  if (body.contains("logprobs") && !body["logprobs"].is_null()) {
    int64_t lp = 0;
    if (auto e = ReadInt(body, "logprobs", 0, env.max_logprobs, lp)) return e;
    p.logprobs = static_cast<int>(lp);
  }
  if (auto e = ReadBool(body, "echo", p.echo)) return e;
  if (auto it = body.find("suffix"); it != body.end() && !it->is_null()) {
    return BadRequest("suffix is not supported", "suffix");
  }
  return CheckContextLength(model, p);
}

json LogprobsJson(const std::vector<LogprobEntry>& entries) {
  json lp = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
             {"text_offset", json::array()}};
  for (const LogprobEntry& e : entries) {
    lp["tokens"].push_back(e.token);
    lp["token_logprobs"].push_back(e.logprob ? json(*e.logprob) : json(nullptr));
    if (e.has_top) {
      json top = json::object();
      for (const TopLogprob& t : e.top) {
        if (!top.contains(t.token)) top[t.token] = t.logprob;
      }
      lp["top_logprobs"].push_back(std::move(top));
    } else {
      lp["top_logprobs"].push_back(nullptr);
    }
    lp["text_offset"].push_back(e.text_offset);
  }
  return lp;
}

// The legacy completions format: choices with text, logprobs and finish_reason.
class CompletionFormat : public GenerationFormat {
 public:
  CompletionFormat(int logprobs, bool return_token_ids) : logprobs_(logprobs), return_token_ids_(return_token_ids) {}

  std::string IdPrefix() const override { return "cmpl-"; }
  std::string Object(bool) const override { return "text_completion"; }

  void StreamChoice(int index, const OutputProcessor& out, OutputDelta& d, std::vector<json>& choices) override {
    const bool done = out.done();
    const bool has_lp = logprobs_ >= 0 && !d.logprobs.empty();
    const bool has_ids = return_token_ids_ && !d.token_ids.empty();
    if (d.text.empty() && !has_lp && !has_ids && !done) return;
    json choice = {{"index", index}, {"text", std::move(d.text)}};
    choice["logprobs"] = logprobs_ >= 0 ? LogprobsJson(d.logprobs) : json(nullptr);
    choice["finish_reason"] = done ? json(out.finish_reason()) : json(nullptr);
    if (return_token_ids_) choice["token_ids"] = std::move(d.token_ids);
    choices.push_back(std::move(choice));
  }

  json FinalChoice(int index, const OutputProcessor& out) override {
    json choice = {{"index", index},
                   {"text", out.text()},
                   {"logprobs", logprobs_ >= 0 ? LogprobsJson(out.logprobs()) : json(nullptr)},
                   {"finish_reason", out.finish_reason()}};
    if (return_token_ids_) choice["token_ids"] = out.token_ids();
    return choice;
  }

 private:
  const int logprobs_;
  const bool return_token_ids_;
};

}  // namespace

void HandleCompletion(std::shared_ptr<RequestContext> ctx, ServedModel& model, const std::string& raw_body,
                      const nlohmann::json& body, const RouteEnv& env) {
  GenerationParams params;
  MaybeError error = ParseCompletion(body, model, *ctx, env, params);
  if (!error) error = ReadStructuredOutputs(raw_body, body, model, params.grammar);
  if (MaybeError e = error) {
    ctx->metrics().RecordFailure(model.name(), ctx->principal().tier, kFailureInvalidRequest);
    ctx->ReplyError(*e);
    return;
  }
  auto format = std::make_unique<CompletionFormat>(params.logprobs, params.return_token_ids);
  RunGeneration(ctx, model, std::move(params), std::move(format), env.output_workers);
}

}  // namespace ferry::serve
