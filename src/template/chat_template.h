// Chat templates rendered the way transformers' apply_chat_template renders them: the
// conversation as `messages`, `tools` (only when given) and `documents`, the special
// tokens (`bos_token`, `eos_token`, ...), `add_generation_prompt`, extra keyword
// arguments, and the globals `raise_exception(message)` and `strftime_now(format)`;
// `continue_final_message` cuts the rendering after the final message's content.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>

#include "core/status.h"
#include "template/template.h"

namespace ferry::jinja {

struct ChatRenderInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  std::optional<nlohmann::ordered_json> tools;      // absent: `tools` is undefined in the template
  std::optional<nlohmann::ordered_json> documents;  // absent: undefined
  bool add_generation_prompt = false;
  bool continue_final_message = false;
  // bos_token, eos_token, unk_token, pad_token, ... (what the tokenizer config defines).
  std::map<std::string, std::string> special_tokens;
  // chat_template_kwargs: more template variables (an object); they do not override the above.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // "Now" for strftime_now, ISO 8601 ("2024-07-26T12:00:00[.ffffff]"); absent: the local time.
  std::optional<std::string> now;
};

// Immutable after Parse; Render is thread-safe.
class ChatTemplate {
 public:
  static Result<ChatTemplate> Parse(std::string source);

  // The prompt text. A template that raises (raise_exception: "TemplateError: ...") or
  // fails is InvalidArgument naming the error, its line and column.
  Result<std::string> Render(const ChatRenderInput& input, const RenderLimits& limits = {}) const;

  const std::string& source() const { return source_; }

 private:
  Template template_;
  std::string source_;
};

// Python's datetime.strftime for a naive local time given as ISO 8601 text.
Result<std::string> StrftimeAt(const std::string& iso_time, const std::string& format);

}  // namespace ferry::jinja
