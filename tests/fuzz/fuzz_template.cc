// Chat templates from untrusted text (a model's tokenizer_config.json, or a request's
// chat_template): the input up to its first NUL is the template, what follows (when it is a
// JSON array) the conversation; the first byte picks the options. Parsing either succeeds or
// refuses with InvalidArgument; a parsed template renders, or fails with InvalidArgument
// naming the error, within the render limits; and it renders the same text twice.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "template/chat_template.h"

namespace {

using ferry::StatusCode;
using ferry::jinja::ChatRenderInput;
using ferry::jinja::ChatTemplate;
using ferry::jinja::RenderLimits;
using ordered_json = nlohmann::ordered_json;

ordered_json DefaultMessages() {
  return ordered_json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2+2? <|eot_id|>"},
    {"role": "assistant", "content": "4", "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
    {"role": "tool", "content": "{\"sum\": 4}", "tool_call_id": "call_1"},
    {"role": "user", "content": [{"type": "text", "text": "and 3+3?"}]}
  ])");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 65536) return 0;
  const uint8_t flags = data[0];
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t cut = in.find('\0');
  const std::string source(in.substr(0, cut));
  auto parsed = ChatTemplate::Parse(source);
  if (!parsed.ok()) {
    if (parsed.status().code() != StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  ChatRenderInput input;
  input.messages = DefaultMessages();
  if (cut != std::string_view::npos) {
    ordered_json j = ordered_json::parse(in.substr(cut + 1), nullptr, /*allow_exceptions=*/false);
    if (j.is_array()) input.messages = std::move(j);
  }
  if (flags & 1) {
    input.tools = ordered_json::parse(
        R"([{"type": "function", "function": {"name": "add", "description": "Adds.", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}])");
  }
  if (flags & 2) input.documents = ordered_json::parse(R"([{"title": "t", "text": "body"}])");
  input.add_generation_prompt = (flags & 4) != 0;
  input.continue_final_message = (flags & 8) != 0 && !input.add_generation_prompt;
  input.special_tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  input.now = "2024-07-26T12:00:00";
  // Tighter than the serving limits, so that one input costs milliseconds, not seconds.
  RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_loop_iterations = 100000;
  limits.max_steps = 500000;
  auto first = parsed->Render(input, limits);
  if (!first.ok()) {
    if (first.status().code() != StatusCode::kInvalidArgument) std::abort();
    if (first.status().message().empty()) std::abort();
    return 0;
  }
  if (first->size() > limits.max_output_bytes) std::abort();
  auto second = parsed->Render(input, limits);
  if (!second.ok() || *second != *first) std::abort();
  return 0;
}
