// From an OpenAI chat request to the prompt a decoder reads: the model's chat templates
// (tokenizer_config.json's, chat_template.jinja, or a file from the config), the request's
// messages normalized as vLLM normalizes them (text parts joined, tool-call arguments as
// objects), the tools and tool_choice, and the template rendered with transformers'
// semantics.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "serve/config.h"
#include "serve/request_fields.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferry::serve {

// A decoder's chat setup, loaded once with the model. Immutable; thread-safe.
struct ChatSetup {
  std::map<std::string, jinja::ChatTemplate> templates;  // "default", "tool_use", ...
  std::map<std::string, std::string> special_tokens;     // bos_token, eos_token, ...
  ToolCallParser parser = ToolCallParser::kNone;         // resolved (never kAuto)
  std::string origin;                                     // where the template came from, for messages

  bool has_template() const { return !templates.empty(); }
  // transformers' choice among named templates: "tool_use" when tools are given and it
  // exists, else "default" (or the only one).
  const jinja::ChatTemplate* Select(bool with_tools) const;
};

// The config's `chat_template` file if set, else the model's own templates; the tool-call
// parser from the config, or detected from the template. A template that does not parse
// fails the model's load, naming the line and column.
Result<ChatSetup> LoadChatSetup(const ModelConfig& config, const engine::Engine& engine);

// kRequired and kNamed constrain the output to tool calls (structured outputs).
enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

// The chat part of a request, validated.
struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  std::optional<nlohmann::ordered_json> tools;      // given to the template (absent with tool_choice "none")
  std::optional<nlohmann::ordered_json> documents;
  ToolChoice tool_choice = ToolChoice::kNone;
  std::string tool_name;  // kNamed: the function to call
  bool parallel_tool_calls = true;
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
  std::optional<std::string> template_source;  // the request's own chat_template (vLLM's)
  std::string echo;                            // `echo`: the final assistant message's text, repeated first
};

// Reads messages, tools, tool_choice, parallel_tool_calls, response_format, documents,
// add_generation_prompt, continue_final_message, chat_template, chat_template_kwargs and
// echo. Image, audio and file content parts are a 400 naming the model's limits.
// (response_format's constraint is read by serve/structured_fields.h.)
MaybeError ReadChatRequest(const nlohmann::ordered_json& body, const std::string& model_name, const ChatSetup& setup,
                           ChatRequest& out);

// The prompt text (the template's rendering); a template error is a 400 naming it.
Result<std::string> RenderChatPrompt(const ChatSetup& setup, const ChatRequest& request);

// The rendering and the byte ranges of it where the request's own strings (message contents,
// tools, documents, template kwargs) wrote special-token text: encoded with
// Tokenizer::EncodeWithLiteralRanges, that text stays text, so a message cannot close its
// turn or open a system one by writing "<|eot_id|>" or "<|im_start|>". The request's strings
// go through the template with each such stretch replaced by a placeholder of private-use
// characters (with a random nonce), which the template copies like any text; the
// placeholders are then put back and their ranges recorded. No special-token text in the
// request, or `mode` kParse (vLLM's behaviour): exactly RenderChatPrompt's result and no ranges.
struct GuardedChatPrompt {
  std::string text;
  std::vector<std::pair<size_t, size_t>> literal;
};
Result<GuardedChatPrompt> RenderGuardedChatPrompt(const ChatSetup& setup, const ChatRequest& request,
                                                  const tokenizer::Tokenizer& tok, ChatSpecialTokens mode);

}  // namespace ferry::serve
