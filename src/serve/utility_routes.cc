#include "serve/utility_routes.h"

#include "serve/chat_prompt.h"
#include "serve/request_fields.h"
#include "tokenizer/tokenizer.h"

namespace ferry::serve {

namespace {

using json = nlohmann::json;

// Each id's text on its own (as vLLM's return_token_strs gives them).
json TokenStrings(const tokenizer::Tokenizer& tok, const std::vector<int32_t>& ids) {
  json out = json::array();
  for (int32_t id : ids) out.push_back(tok.IdToToken(id));
  return out;
}

}  // namespace

void HandleTokenize(std::shared_ptr<RequestContext> ctx, ServedModel& model, const std::string& raw_body,
                    const json& body, const RouteEnv& env) {
  const tokenizer::Tokenizer* tok = model.engine().tokenizer();
  auto fail = [&](const ApiError& e) {
    ctx->metrics().RecordFailure(model.name(), ctx->principal().tier, kFailureInvalidRequest);
    ctx->ReplyError(e);
  };
  if (tok == nullptr) return fail(BadRequest("model '" + model.name() + "' has no tokenizer", "model"));
  if (auto e = CheckUnknownFields(body,
                                  {"prompt", "messages", "add_special_tokens", "return_token_strs",
                                   "add_generation_prompt", "continue_final_message", "tools", "tool_choice",
                                   "documents", "chat_template", "chat_template_kwargs"},
                                  *ctx, env.unknown_fields)) {
    return fail(*e);
  }
  bool return_strs = false;
  if (auto e = ReadBool(body, "return_token_strs", return_strs)) return fail(*e);
  const bool chat = body.contains("messages") && !body["messages"].is_null();
  if (chat == (body.contains("prompt") && !body["prompt"].is_null())) {
    return fail(BadRequest("give either prompt or messages", "prompt"));
  }
  std::vector<int32_t> ids;
  if (chat) {
    // As the chat route renders it: the template writes the special tokens.
    bool add_special = false;
    if (auto e = ReadBool(body, "add_special_tokens", add_special)) return fail(*e);
    const ChatSetup& setup = model.chat();
    if (!setup.has_template() && !body.contains("chat_template")) {
      return fail(BadRequest("model '" + model.name() + "' has no chat template", "messages", "chat_template_missing"));
    }
    nlohmann::ordered_json ordered;
    try {
      ordered = nlohmann::ordered_json::parse(raw_body);
    } catch (const nlohmann::json::exception&) {
      return fail(BadRequest("the request body is not valid JSON"));
    }
    ChatRequest request;
    if (auto e = ReadChatRequest(ordered, model.name(), setup, request)) return fail(*e);
    auto prompt = RenderGuardedChatPrompt(setup, request, *tok, env.chat_special_tokens);
    if (!prompt.ok()) {
      return fail(BadRequest("the chat template refused this conversation: " + prompt.status().message(), "messages",
                             "chat_template_error"));
    }
    auto enc = tok->EncodeWithLiteralRanges(prompt->text, prompt->literal);
    if (!enc.ok()) return fail(BadRequest(enc.status().message(), "messages"));
    ids = std::move(enc).value();
    if (add_special) {
      auto templated = tok->ApplyTemplate(ids);
      if (!templated.ok()) return fail(BadRequest(templated.status().message(), "messages"));
      ids = templated->ids;
    }
  } else {
    std::string prompt;
    if (auto e = ReadString(body, "prompt", prompt)) return fail(*e);
    bool add_special = true;
    if (auto e = ReadBool(body, "add_special_tokens", add_special)) return fail(*e);
    if (add_special && model.is_decoder()) {
      auto enc = model.engine().EncodePrompt(prompt);  // BOS as the tokenizer's settings say
      if (!enc.ok()) return fail(BadRequest(enc.status().message(), "prompt"));
      ids = std::move(enc).value();
    } else if (add_special) {
      auto enc = tok->EncodeWithSpecial(prompt);  // [CLS] ... [SEP]
      if (!enc.ok()) return fail(BadRequest(enc.status().message(), "prompt"));
      ids = enc->ids;
    } else {
      auto enc = tok->Encode(prompt);
      if (!enc.ok()) return fail(BadRequest(enc.status().message(), "prompt"));
      ids = std::move(enc).value();
    }
  }
  json out = {{"count", ids.size()}, {"max_model_len", model.max_seq_len()}, {"tokens", ids}};
  out["token_strs"] = return_strs ? TokenStrings(*tok, ids) : json(nullptr);
  ctx->SetLog("prompt_tokens", ids.size());
  ctx->ReplyJson(200, out);
}

void HandleDetokenize(std::shared_ptr<RequestContext> ctx, ServedModel& model, const json& body, const RouteEnv& env) {
  const tokenizer::Tokenizer* tok = model.engine().tokenizer();
  auto fail = [&](const ApiError& e) {
    ctx->metrics().RecordFailure(model.name(), ctx->principal().tier, kFailureInvalidRequest);
    ctx->ReplyError(e);
  };
  if (tok == nullptr) return fail(BadRequest("model '" + model.name() + "' has no tokenizer", "model"));
  if (auto e = CheckUnknownFields(body, {"tokens"}, *ctx, env.unknown_fields)) return fail(*e);
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) return fail(BadRequest("tokens must be an array of token ids", "tokens"));
  std::vector<int32_t> ids;
  for (const json& v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tok->vocab_size()) {
      return fail(BadRequest("tokens must be token ids in [0, " + std::to_string(tok->vocab_size()) + ")", "tokens"));
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  auto text = tok->Decode(ids, /*skip_special=*/false);
  if (!text.ok()) return fail(BadRequest(text.status().message(), "tokens"));
  ctx->ReplyJson(200, json{{"prompt", *text}});
}

}  // namespace ferry::serve
