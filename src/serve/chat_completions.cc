#include "serve/chat_completions.h"

#include "core/json_limits.h"
#include "serve/chat_prompt.h"
#include "serve/generation_job.h"
#include "serve/structured_fields.h"
#include "serve/tool_parser.h"

namespace ferry::serve {

namespace {

using json = nlohmann::json;

json BytesJson(const std::string& bytes) {
  json out = json::array();
  for (unsigned char c : bytes) out.push_back(static_cast<int>(c));
  return out;
}

// OpenAI's chat logprobs object: {"content": [{token, logprob, bytes, top_logprobs}]}.
json ChatLogprobs(const std::vector<LogprobEntry>& entries) {
  json content = json::array();
  for (const LogprobEntry& e : entries) {
    json top = json::array();
    for (const TopLogprob& t : e.top) {
      top.push_back({{"token", t.token}, {"logprob", t.logprob}, {"bytes", BytesJson(t.bytes)}});
    }
    content.push_back({{"token", e.token},
                       {"logprob", e.logprob.value_or(0.0f)},
                       {"bytes", BytesJson(e.bytes)},
                       {"top_logprobs", std::move(top)}});
  }
  return json{{"content", std::move(content)}};
}

json CallJson(const ToolCall& c) {
  return json{{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

// Chat completion objects: a message with content and tool calls, or streamed deltas (role
// first, then content and tool-call pieces, then the finish reason).
class ChatFormat : public GenerationFormat {
 public:
  ChatFormat(int choices, bool logprobs, ToolCallParser parser, bool parallel_tool_calls, std::string echo,
             bool return_token_ids)
      : logprobs_(logprobs), parser_(parser), parallel_(parallel_tool_calls), echo_(std::move(echo)),
        return_token_ids_(return_token_ids), state_(static_cast<size_t>(choices)) {}

  std::string IdPrefix() const override { return "chatcmpl-"; }
  std::string Object(bool chunk) const override { return chunk ? "chat.completion.chunk" : "chat.completion"; }

  void StreamChoice(int index, const OutputProcessor& out, OutputDelta& d, std::vector<json>& choices) override {
    State& s = Of(index);
    if (!s.role_sent) {
      s.role_sent = true;
      choices.push_back(Choice(index, json{{"role", "assistant"}, {"content", echo_}}, nullptr));
    }
    ToolParseDelta parsed = s.stream->Feed(d.text);
    if (out.done()) {
      ToolParseDelta rest = s.stream->Finish();
      parsed.content += rest.content;
      for (auto& c : rest.calls) parsed.calls.push_back(std::move(c));
    }
    json delta = json::object();
    if (!parsed.content.empty()) delta["content"] = parsed.content;
    json calls = json::array();
    for (const ToolParseDelta::Call& c : parsed.calls) {
      if (!parallel_ && c.index > 0) continue;
      json call = {{"index", c.index}};
      if (c.first) {
        call["id"] = c.id;
        call["type"] = "function";
        call["function"] = {{"name", c.name}, {"arguments", c.arguments}};
      } else {
        call["function"] = {{"arguments", c.arguments}};
      }
      calls.push_back(std::move(call));
    }
    if (!calls.empty()) delta["tool_calls"] = std::move(calls);
    const bool has_lp = logprobs_ && !d.logprobs.empty();
    const bool has_ids = return_token_ids_ && !d.token_ids.empty();
    if (!delta.empty() || has_lp || has_ids) {
      json choice = Choice(index, std::move(delta), has_lp ? ChatLogprobs(d.logprobs) : json(nullptr));
      if (return_token_ids_) choice["token_ids"] = d.token_ids;
      choices.push_back(std::move(choice));
    }
    if (out.done()) {
      json last = Choice(index, json::object(), nullptr);
      last["finish_reason"] = FinishReason(out, *s.stream);
      choices.push_back(std::move(last));
    }
  }

  json FinalChoice(int index, const OutputProcessor& out) override {
    State& s = Of(index);
    ToolParseDelta parsed = s.stream->Feed(out.text());
    parsed.content += s.stream->Finish().content;
    json message = {{"role", "assistant"}};
    const std::string content = echo_ + parsed.content;
    const std::vector<ToolCall>& calls = s.stream->calls();
    message["content"] = content.empty() && !calls.empty() ? json(nullptr) : json(content);
    if (!calls.empty()) {
      json list = json::array();
      for (size_t k = 0; k < calls.size() && (parallel_ || k == 0); ++k) list.push_back(CallJson(calls[k]));
      message["tool_calls"] = std::move(list);
    }
    json choice = Choice(index, nullptr, logprobs_ ? ChatLogprobs(out.logprobs()) : json(nullptr));
    choice.erase("delta");
    choice["message"] = std::move(message);
    choice["finish_reason"] = FinishReason(out, *s.stream);
    if (return_token_ids_) choice["token_ids"] = out.token_ids();
    return choice;
  }

 private:
  struct State {
    bool role_sent = false;
    std::unique_ptr<ToolCallStream> stream;
  };

  State& Of(int index) {
    State& s = state_[static_cast<size_t>(index)];
    if (!s.stream) s.stream = MakeToolCallStream(parser_);
    return s;
  }

  static json Choice(int index, json delta, json logprobs) {
    return json{{"index", index}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)}, {"finish_reason", nullptr}};
  }

  // "tool_calls" when the model stopped after calling tools, as OpenAI reports it.
  static std::string FinishReason(const OutputProcessor& out, const ToolCallStream& stream) {
    if (out.finish_reason() == "stop" && !stream.calls().empty()) return "tool_calls";
    return out.finish_reason();
  }

  const bool logprobs_;
  const ToolCallParser parser_;
  const bool parallel_;
  const std::string echo_;
  const bool return_token_ids_;
  std::vector<State> state_;
};

// tool_choice "required" or named: the output is written as Llama 3 JSON tool calls,
// {"name": ..., "parameters": {...}} (several separated by "; " when parallel calls are
// allowed), with each function's parameters schema enforced; the llama3_json parser then
// turns it into tool_calls whatever the model's own format.
constexpr int kMaxForcedCalls = 8;

MaybeError ToolCallGrammar(const ChatRequest& chat, ServedModel& model, GenerationParams& p) {
  using ojson = nlohmann::ordered_json;
  ojson calls = ojson::array();
  for (const ojson& t : *chat.tools) {
    const ojson& f = t["function"];
    const std::string name = f["name"].get<std::string>();
    if (chat.tool_choice == ToolChoice::kNamed && name != chat.tool_name) continue;
    ojson params = f.contains("parameters") && !f["parameters"].is_null() ? f["parameters"] : ojson{{"type", "object"}};
    ojson props = ojson::object();
    props["name"] = ojson{{"const", name}};
    props["parameters"] = std::move(params);
    ojson call = ojson::object();
    call["type"] = "object";
    call["properties"] = std::move(props);
    call["required"] = ojson::array({"name", "parameters"});
    call["additionalProperties"] = false;
    calls.push_back(std::move(call));
  }
  ojson schema = calls.size() == 1 ? calls[0] : ojson{{"anyOf", calls}};
  structured::Constraint c;
  c.kind = structured::ConstraintKind::kJsonSchema;
  c.text = schema.dump();
  if (chat.tool_choice == ToolChoice::kRequired && chat.parallel_tool_calls) {
    c.max_values = kMaxForcedCalls;
    c.separator = "; ";
  }
  return CompileFor(model, c, "tool_choice", p.grammar);
}

MaybeError ParseChat(const std::string& raw_body, const json& body, ServedModel& model, RequestContext& ctx,
                     const RouteEnv& env, GenerationParams& p, ChatRequest& chat) {
  if (auto e = CheckUnknownFields(body,
                                  {"messages", "max_tokens", "max_completion_tokens", "logprobs", "top_logprobs",
                                   "echo", "tools", "tool_choice", "parallel_tool_calls", "response_format",
                                   "documents", "add_generation_prompt", "continue_final_message", "chat_template",
                                   "chat_template_kwargs", "functions", "function_call", "truncate_prompt_tokens"},
                                  ctx, env.unknown_fields)) {
    return e;
  }
  const ChatSetup& setup = model.chat();
  if (!setup.has_template() && !(body.contains("chat_template") && body["chat_template"].is_string())) {
    return BadRequest("model '" + model.name() + "' has no chat template; give it one with chat_template in the "
                          "server config (or --chat-template), or use /v1/completions",
                      "model", "chat_template_missing");
  }
  if (model.engine().tokenizer() == nullptr) {
    return BadRequest("model '" + model.name() + "' has no tokenizer; chat needs one", "model");
  }
  // The request again, with its keys in order: templates print tool schemas as given.
  nlohmann::ordered_json ordered;
  try {
    ordered = nlohmann::ordered_json::parse(raw_body);
  } catch (const nlohmann::json::exception&) {
    return BadRequest("the request body is not valid JSON");
  }
  if (auto e = ReadChatRequest(ordered, model.name(), setup, chat)) return e;
  if (auto e = ReadGenerationFields(body, model, ctx.principal(), env, p)) return e;
  if (auto e = ReadStructuredOutputs(raw_body, body, model, p.grammar)) return e;
  if (chat.tool_choice == ToolChoice::kRequired || chat.tool_choice == ToolChoice::kNamed) {
    if (p.grammar) {
      return BadRequest("tool_choice '" + std::string(chat.tool_choice == ToolChoice::kNamed ? "named" : "required") +
                            "' already constrains the output; it cannot be combined with response_format or "
                            "structured outputs",
                        "tool_choice");
    }
    if (auto e = ToolCallGrammar(chat, model, p)) return e;
  }
  bool logprobs = false;
  if (auto e = ReadBool(body, "logprobs", logprobs)) return e;
  int64_t top = 0;
  if (auto e = ReadInt(body, "top_logprobs", 0, env.max_logprobs, top)) return e;
  if (body.contains("top_logprobs") && !body["top_logprobs"].is_null() && !logprobs) {
    return BadRequest("top_logprobs needs logprobs: true", "top_logprobs");
  }
  p.logprobs = logprobs ? static_cast<int>(top) : -1;
  // Tool calls are parsed from the text, with the markers special tokens may spell.
  if (chat.tool_choice == ToolChoice::kAuto && !body.contains("skip_special_tokens")) p.skip_special_tokens = false;

  const tokenizer::Tokenizer& tok = *model.engine().tokenizer();
  Result<GuardedChatPrompt> rendered = RenderGuardedChatPrompt(setup, chat, tok, env.chat_special_tokens);
  if (!rendered.ok()) {
    return BadRequest("the chat template refused this conversation: " + rendered.status().message(), "messages",
                      "chat_template_error");
  }
  const std::string* prompt = &rendered->text;
  // vLLM's truncate_prompt_tokens: keep the last N tokens of the rendered chat (-1: as many
  // as the context leaves beside max_tokens).
  int64_t keep = 0;
  const bool truncating = body.contains("truncate_prompt_tokens") && !body["truncate_prompt_tokens"].is_null();
  if (truncating) {
    if (auto e = ReadInt(body, "truncate_prompt_tokens", -1, model.max_seq_len(), keep)) return e;
    if (keep == 0) {
      return BadRequest("truncate_prompt_tokens must be >= 1, or -1 for the model's context", "truncate_prompt_tokens");
    }
  }
  if (!truncating && model.engine().TextSurelyLongerThan(*prompt, model.max_seq_len())) {
    return BadRequest("the rendered chat has " + std::to_string(prompt->size()) + " bytes, more than " +
                          std::to_string(model.max_seq_len()) + " tokens (this model's maximum context length) can hold",
                      "messages", "context_length_exceeded");
  }
  // The template writes the special tokens (BOS, turn markers) itself; those the request's
  // own strings wrote stay text (api.chat_special_tokens).
  auto ids = tok.EncodeWithLiteralRanges(*prompt, rendered->literal);
  if (!ids.ok()) return BadRequest("cannot tokenize the rendered chat: " + ids.status().message(), "messages");
  if (ids->empty()) return BadRequest("the chat template rendered an empty prompt", "messages");
  // max_completion_tokens (OpenAI's current name) wins over max_tokens; without either, the
  // rest of the context (as vLLM does).
  int64_t max_tokens = -1;
  if (auto e = ReadInt(body, "max_tokens", 1, 1 << 20, max_tokens)) return e;
  if (auto e = ReadInt(body, "max_completion_tokens", 1, 1 << 20, max_tokens)) return e;
  std::string prompt_text = *prompt;
  if (truncating) {
    if (keep < 0) keep = std::max<int64_t>(1, model.max_seq_len() - std::max<int64_t>(1, max_tokens));
    if (static_cast<int64_t>(ids->size()) > keep) {
      ids->erase(ids->begin(), ids->end() - keep);
      auto text = tok.Decode(*ids, false);  // echo shows what the model read
      prompt_text = text.ok() ? std::move(text).value() : std::string();
    }
  }
  const int64_t prompt_len = static_cast<int64_t>(ids->size());
  p.prompts.push_back(std::move(ids).value());
  p.prompt_texts.push_back(std::move(prompt_text));
  if (max_tokens < 0) {
    max_tokens = std::max<int64_t>(1, model.max_seq_len() - prompt_len);
    ctx.SetLog("max_tokens_default", max_tokens);
  }
  p.max_tokens = static_cast<int>(max_tokens);
  ctx.SetLog("chat_template_tools", chat.tools.has_value());
  return CheckContextLength(model, p);
}

}  // namespace

std::unique_ptr<GenerationFormat> MakeChatFormat(int choices, bool logprobs, ToolCallParser parser,
                                                 bool parallel_tool_calls, std::string echo, bool return_token_ids) {
  return std::make_unique<ChatFormat>(choices, logprobs, parser, parallel_tool_calls, std::move(echo),
                                      return_token_ids);
}

void HandleChatCompletion(std::shared_ptr<RequestContext> ctx, ServedModel& model, const std::string& raw_body,
                          const nlohmann::json& body, const RouteEnv& env) {
  GenerationParams params;
  ChatRequest chat;
  if (MaybeError e = ParseChat(raw_body, body, model, *ctx, env, params, chat)) {
    ctx->metrics().RecordFailure(model.name(), ctx->principal().tier, kFailureInvalidRequest);
    ctx->ReplyError(*e);
    return;
  }
  const ToolCallParser parser = chat.tool_choice == ToolChoice::kAuto ? model.chat().parser
                                : chat.tool_choice == ToolChoice::kNone ? ToolCallParser::kNone
                                                                        : ToolCallParser::kLlama3Json;
  auto format = MakeChatFormat(params.n, params.logprobs >= 0, parser, chat.parallel_tool_calls, chat.echo,
                               params.return_token_ids);
  RunGeneration(ctx, model, std::move(params), std::move(format), env.output_workers);
}

}  // namespace ferry::serve
