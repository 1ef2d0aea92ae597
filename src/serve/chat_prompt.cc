#include "serve/chat_prompt.h"

#include <cstdio>
#include <random>

#include "core/mapped_file.h"
#include "serve/tool_parser.h"

namespace ferry::serve {

namespace {

using ojson = nlohmann::ordered_json;

std::string Path(size_t i, const std::string& rest = "") { return "messages[" + std::to_string(i) + "]" + rest; }

// A content part's text, or a 400 for the kinds a text model cannot read.
MaybeError PartText(const ojson& part, size_t i, size_t j, const std::string& model, std::string& text) {
  const std::string where = Path(i, ".content[" + std::to_string(j) + "]");
  if (!part.is_object()) return BadRequest(where + " must be an object", where);
  auto type = part.find("type");
  if (type == part.end() || !type->is_string()) return BadRequest(where + ".type is required", where + ".type");
  const std::string t = type->get<std::string>();
  if (t == "text" || t == "refusal") {
    auto value = part.find(t);
    if (value == part.end() || !value->is_string()) return BadRequest(where + "." + t + " must be a string", where);
    text = value->get<std::string>();
    return std::nullopt;
  }
  return BadRequest("model '" + model + "' reads text only: content parts of type '" + t +
                        "' (images, audio, files) are not supported",
                    where + ".type", "unsupported_content");
}

MaybeError NormalizeMessage(const ojson& in, size_t i, const std::string& model, ojson& out) {
  if (!in.is_object()) return BadRequest(Path(i) + " must be an object", Path(i));
  auto role = in.find("role");
  if (role == in.end() || !role->is_string() || role->get<std::string>().empty()) {
    return BadRequest(Path(i, ".role") + " must be a non-empty string", Path(i, ".role"));
  }
  out = in;  // fields the template may read (name, tool_call_id, reasoning_content, ...) pass through
  auto content = in.find("content");
  if (content != in.end() && content->is_array()) {
    // vLLM's "string" content format: text parts joined by newlines.
    std::string joined;
    for (size_t j = 0; j < content->size(); ++j) {
      std::string text;
      if (auto e = PartText((*content)[j], i, j, model, text)) return e;
      joined += (j == 0 ? "" : "\n") + text;
    }
    out["content"] = joined;
  } else if (content != in.end() && !content->is_string() && !content->is_null()) {
    return BadRequest(Path(i, ".content") + " must be a string, an array of content parts or null",
                      Path(i, ".content"));
  }
  if (auto calls = in.find("tool_calls"); calls != in.end() && !calls->is_null()) {
    if (!calls->is_array()) return BadRequest(Path(i, ".tool_calls") + " must be an array", Path(i, ".tool_calls"));
    for (size_t k = 0; k < calls->size(); ++k) {
      const std::string where = Path(i, ".tool_calls[" + std::to_string(k) + "]");
      const ojson& call = (*calls)[k];
      auto fn = call.is_object() ? call.find("function") : call.end();
      if (fn == call.end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
        return BadRequest(where + " must have function.name", where);
      }
      // Templates expect the arguments as an object (transformers' convention; vLLM converts them too).
      auto args = fn->find("arguments");
      if (args != fn->end() && args->is_string()) {
        try {
          out["tool_calls"][k]["function"]["arguments"] = ojson::parse(args->get<std::string>());
        } catch (const nlohmann::json::exception&) {
          // Not JSON: left as the string the client sent.
        }
      }
    }
  }
  return std::nullopt;
}

MaybeError ReadBoolField(const ojson& body, const char* name, bool& out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return BadRequest(std::string(name) + " must be a boolean", name);
  out = it->get<bool>();
  return std::nullopt;
}

}  // namespace

const jinja::ChatTemplate* ChatSetup::Select(bool with_tools) const {
  if (with_tools) {
    if (auto it = templates.find("tool_use"); it != templates.end()) return &it->second;
  }
  if (auto it = templates.find("default"); it != templates.end()) return &it->second;
  return templates.size() == 1 ? &templates.begin()->second : nullptr;
}

Result<ChatSetup> LoadChatSetup(const ModelConfig& config, const engine::Engine& engine) {
  ChatSetup s;
  const tokenizer::TokenizerConfig& tc = engine.tokenizer_config();
  std::map<std::string, std::string> sources;
  if (!config.chat_template.empty()) {
    FERRY_ASSIGN_OR_RETURN(sources["default"], ReadFileToString(config.chat_template));
    s.origin = config.chat_template;
  } else {
    sources = tc.chat_templates;
    s.origin = "the model's tokenizer_config.json / chat_template.jinja";
  }
  for (auto& [name, text] : sources) {
    auto t = jinja::ChatTemplate::Parse(text);
    if (!t.ok()) return t.status().WithContext("chat template '" + name + "' from " + s.origin);
    s.templates.emplace(name, std::move(t).value());
  }
  const std::pair<const char*, const std::optional<std::string>*> named[] = {
      {"bos_token", &tc.bos_token}, {"eos_token", &tc.eos_token}, {"unk_token", &tc.unk_token},
      {"pad_token", &tc.pad_token}, {"sep_token", &tc.sep_token}, {"cls_token", &tc.cls_token},
      {"mask_token", &tc.mask_token}};
  for (const auto& [key, value] : named) {
    if (*value) s.special_tokens[key] = **value;
  }
  s.parser = config.tool_call_parser;
  if (s.parser == ToolCallParser::kAuto) {
    s.parser = ToolCallParser::kNone;
    for (const auto& [name, text] : sources) {
      const ToolCallParser found = DetectToolCallParser(text);
      if (found != ToolCallParser::kNone) s.parser = found;
    }
  }
  return s;
}

MaybeError ReadChatRequest(const ojson& body, const std::string& model, const ChatSetup& setup, ChatRequest& out) {
  auto messages = body.find("messages");
  if (messages == body.end() || messages->is_null()) return BadRequest("missing required field: messages", "messages");
  if (!messages->is_array() || messages->empty()) return BadRequest("messages must be a non-empty array", "messages");
  if (messages->size() > 4096) return BadRequest("at most 4096 messages are accepted", "messages");
  for (size_t i = 0; i < messages->size(); ++i) {
    ojson m;
    if (auto e = NormalizeMessage((*messages)[i], i, model, m)) return e;
    out.messages.push_back(std::move(m));
  }
  for (const char* old : {"functions", "function_call"}) {
    if (body.contains(old) && !body[old].is_null()) {
      return BadRequest(std::string(old) + " is deprecated and not supported; use tools and tool_choice", old);
    }
  }
  auto tools = body.find("tools");
  const bool has_tools = tools != body.end() && !tools->is_null();
  if (has_tools) {
    if (!tools->is_array()) return BadRequest("tools must be an array", "tools");
    for (size_t k = 0; k < tools->size(); ++k) {
      const ojson& t = (*tools)[k];
      const std::string where = "tools[" + std::to_string(k) + "]";
      if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") || !t["function"].is_object() ||
          !t["function"].contains("name") || !t["function"]["name"].is_string()) {
        return BadRequest(where + " must be {\"type\": \"function\", \"function\": {\"name\": ...}}", where);
      }
    }
  }
  out.tool_choice = has_tools && !tools->empty() ? ToolChoice::kAuto : ToolChoice::kNone;
  if (auto choice = body.find("tool_choice"); choice != body.end() && !choice->is_null()) {
    const std::string kind = choice->is_string() ? choice->get<std::string>() : choice->is_object() ? "named" : "";
    if (kind == "none") {
      out.tool_choice = ToolChoice::kNone;
    } else if (kind == "auto") {
      if (!has_tools) return BadRequest("tool_choice 'auto' needs tools", "tool_choice");
      out.tool_choice = ToolChoice::kAuto;
    } else if (kind == "required") {
      if (!has_tools || tools->empty()) return BadRequest("tool_choice 'required' needs tools", "tool_choice");
      out.tool_choice = ToolChoice::kRequired;
    } else if (kind == "named") {
      const ojson& c = *choice;
      if (c.value("type", "") != "function" || !c.contains("function") || !c["function"].is_object() ||
          !c["function"].contains("name") || !c["function"]["name"].is_string()) {
        return BadRequest("tool_choice must be {\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice");
      }
      out.tool_name = c["function"]["name"].get<std::string>();
      bool found = false;
      for (const ojson& t : has_tools ? *tools : ojson::array()) found = found || t["function"]["name"] == out.tool_name;
      if (!found) return BadRequest("tool_choice names '" + out.tool_name + "', which is not among the tools", "tool_choice");
      out.tool_choice = ToolChoice::kNamed;
    } else {
      return BadRequest("tool_choice must be 'none', 'auto', 'required' or {\"type\": \"function\", ...}",
                        "tool_choice");
    }
  }
  if (out.tool_choice == ToolChoice::kAuto) {
    if (setup.parser == ToolCallParser::kNone) {
      return BadRequest("model '" + model + "' has no tool-call parser, so tool calls could not be returned; set "
                            "tool_call_parser in its config (hermes, llama3_json or mistral) or use tool_choice 'none'",
                        "tools", "tool_calls_unsupported");
    }
    out.tools = *tools;
  }
  // Forced calls are written in one format whatever the model's parser (structured outputs
  // make the model write it); the template still shows the model its tools.
  if (out.tool_choice == ToolChoice::kRequired || out.tool_choice == ToolChoice::kNamed) out.tools = *tools;
  if (auto e = ReadBoolField(body, "parallel_tool_calls", out.parallel_tool_calls)) return e;
  if (auto rf = body.find("response_format"); rf != body.end() && !rf->is_null()) {
    const std::string type = rf->is_object() && (*rf)["type"].is_string() ? (*rf)["type"].get<std::string>() : "";
    // json_object and json_schema are read with the other structured-output fields.
    if (type != "text" && type != "json_object" && type != "json_schema") return BadRequest("response_format.type must be text, json_object or json_schema", "response_format");
  }
  if (auto docs = body.find("documents"); docs != body.end() && !docs->is_null()) {
    if (!docs->is_array()) return BadRequest("documents must be an array", "documents");
    out.documents = *docs;
  }
  if (auto e = ReadBoolField(body, "add_generation_prompt", out.add_generation_prompt)) return e;
  if (auto e = ReadBoolField(body, "continue_final_message", out.continue_final_message)) return e;
  if (out.continue_final_message) {
    if (body.contains("add_generation_prompt") && out.add_generation_prompt) {
      return BadRequest("continue_final_message and add_generation_prompt cannot both be true", "continue_final_message");
    }
    out.add_generation_prompt = false;
  }
  if (auto kw = body.find("chat_template_kwargs"); kw != body.end() && !kw->is_null()) {
    if (!kw->is_object()) return BadRequest("chat_template_kwargs must be an object", "chat_template_kwargs");
    for (const char* reserved : {"messages", "tools", "documents", "add_generation_prompt"}) {
      if (kw->contains(reserved)) {
        return BadRequest(std::string("chat_template_kwargs may not set '") + reserved + "'", "chat_template_kwargs");
      }
    }
    out.template_kwargs = *kw;
  }
  if (auto t = body.find("chat_template"); t != body.end() && !t->is_null()) {
    if (!t->is_string()) return BadRequest("chat_template must be a string", "chat_template");
    out.template_source = t->get<std::string>();
  }
  bool echo = false;
  if (auto e = ReadBoolField(body, "echo", echo)) return e;
  const ojson& last = out.messages.back();
  if (echo && last.value("role", "") == "assistant" && last.contains("content") && last["content"].is_string()) {
    out.echo = last["content"].get<std::string>();
  }
  return std::nullopt;
}

Result<std::string> RenderChatPrompt(const ChatSetup& setup, const ChatRequest& request) {
  std::optional<jinja::ChatTemplate> own;
  const jinja::ChatTemplate* t = nullptr;
  if (request.template_source) {
    auto parsed = jinja::ChatTemplate::Parse(*request.template_source);
    if (!parsed.ok()) return parsed.status().WithContext("the request's chat_template");
    own = std::move(parsed).value();
    t = &*own;
  } else {
    t = setup.Select(request.tools.has_value());
  }
  if (t == nullptr) return FailedPrecondition("no chat template");
  jinja::ChatRenderInput in;
  in.messages = request.messages;
  in.tools = request.tools;
  in.documents = request.documents;
  in.add_generation_prompt = request.add_generation_prompt;
  in.continue_final_message = request.continue_final_message;
  in.special_tokens = setup.special_tokens;
  in.extra = request.template_kwargs;
  return t->Render(in);
}

namespace {

// U+E000 and U+E001, private-use characters no tokenizer gives a meaning to.
constexpr std::string_view kOpen = "\xEE\x80\x80";
constexpr std::string_view kClose = "\xEE\x80\x81";

// Replaces the special-token text of every string in `v` by placeholders, recording it.
void Mask(nlohmann::ordered_json& v, const tokenizer::Tokenizer& tok, const std::string& nonce,
          std::vector<std::string>& originals) {
  if (v.is_string()) {
    const std::string& str = v.get_ref<const std::string&>();
    const auto ranges = tok.FindSpecialTokenText(str);
    if (ranges.empty()) return;
    std::string out;
    size_t at = 0;
    for (const auto& [b, e] : ranges) {
      out.append(str, at, b - at);
      out.append(kOpen).append(nonce).append(std::to_string(originals.size())).append(kClose);
      originals.push_back(str.substr(b, e - b));
      at = e;
    }
    out.append(str, at, std::string::npos);
    v = std::move(out);
  } else if (v.is_structured()) {
    for (auto& child : v) Mask(child, tok, nonce, originals);
  }
}

// Whether any string in `v` holds special-token text (the common answer, no, costs no copy).
bool HasSpecialTokenText(const nlohmann::ordered_json& v, const tokenizer::Tokenizer& tok) {
  if (v.is_string()) return !tok.FindSpecialTokenText(v.get_ref<const std::string&>()).empty();
  if (v.is_structured()) {
    for (const auto& child : v) {
      if (HasSpecialTokenText(child, tok)) return true;
    }
  }
  return false;
}

}  // namespace

Result<GuardedChatPrompt> RenderGuardedChatPrompt(const ChatSetup& setup, const ChatRequest& request,
                                                  const tokenizer::Tokenizer& tok, ChatSpecialTokens mode) {
  if (mode == ChatSpecialTokens::kParse) {
    FERRY_ASSIGN_OR_RETURN(std::string text, RenderChatPrompt(setup, request));
    return GuardedChatPrompt{std::move(text), {}};
  }
  const bool any = HasSpecialTokenText(request.messages, tok) ||
                   (request.tools && HasSpecialTokenText(*request.tools, tok)) ||
                   (request.documents && HasSpecialTokenText(*request.documents, tok)) ||
                   HasSpecialTokenText(request.template_kwargs, tok);
  if (!any) {
    FERRY_ASSIGN_OR_RETURN(std::string text, RenderChatPrompt(setup, request));
    return GuardedChatPrompt{std::move(text), {}};
  }
  ChatRequest masked = request;
  std::vector<std::string> originals;
  std::random_device rd;
  char nonce[17];
  std::snprintf(nonce, sizeof(nonce), "%08x%08x", rd(), rd());
  Mask(masked.messages, tok, nonce, originals);
  if (masked.tools) Mask(*masked.tools, tok, nonce, originals);
  if (masked.documents) Mask(*masked.documents, tok, nonce, originals);
  Mask(masked.template_kwargs, tok, nonce, originals);
  FERRY_ASSIGN_OR_RETURN(const std::string rendered, RenderChatPrompt(setup, masked));
  GuardedChatPrompt out;
  const std::string open = std::string(kOpen) + nonce;
  size_t at = 0;
  for (;;) {
    const size_t p = rendered.find(open, at);
    out.text.append(rendered, at, p == std::string::npos ? std::string::npos : p - at);
    if (p == std::string::npos) break;
    const size_t digits = p + open.size();
    const size_t close = rendered.find(kClose, digits);
    size_t index = originals.size();
    if (close != std::string::npos && close > digits && close - digits <= 9 &&
        rendered.find_first_not_of("0123456789", digits) == close) {
      index = std::stoul(rendered.substr(digits, close - digits));
    }
    if (index >= originals.size()) {
      return InvalidArgument("the chat template altered the special-token text of the request's messages; "
                             "it cannot be kept apart from the template's own tokens");
    }
    out.literal.emplace_back(out.text.size(), out.text.size() + originals[index].size());
    out.text += originals[index];
    at = close + kClose.size();
  }
  // A placeholder the template cut or changed would leave its nonce behind.
  if (out.text.find(nonce) != std::string::npos) {
    return InvalidArgument("the chat template altered the special-token text of the request's messages; "
                           "it cannot be kept apart from the template's own tokens");
  }
  return out;
}

}  // namespace ferry::serve
