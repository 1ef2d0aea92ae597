// ferry render-chat: renders a chat template for one conversation, as transformers'
// apply_chat_template(tokenize=False) would.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/subcommands.h"
#include "core/json_limits.h"
#include "template/chat_template.h"

namespace ferry::cli {

namespace {

struct RenderChatOptions {
  std::string template_path;
  std::string input_path;
};

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open " + path);
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) return DataLoss("cannot read " + path);
  return s.str();
}

// CASE: {"messages": [...], "tools"?: [...], "add_generation_prompt"?: bool,
// "bos_token"?: str, "eos_token"?: str, "now"?: ISO time, "documents"?: [...],
// "continue_final_message"?: bool, "chat_template_kwargs"?: {...}}; other keys are ignored.
Result<jinja::ChatRenderInput> ReadCase(const std::string& text, const std::string& path) {
  nlohmann::ordered_json c;
  if (JsonNestingDepth(text, kMaxJsonDepth) > kMaxJsonDepth) {
    return InvalidArgument(path + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  try {
    c = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(path + ": invalid JSON: " + e.what());
  }
  if (!c.is_object()) return InvalidArgument(path + ": expected a JSON object");
  jinja::ChatRenderInput in;
  auto messages = c.find("messages");
  if (messages == c.end() || !messages->is_array()) return InvalidArgument(path + ": 'messages' must be an array");
  in.messages = *messages;
  if (auto t = c.find("tools"); t != c.end() && !t->is_null()) in.tools = *t;
  if (auto d = c.find("documents"); d != c.end() && !d->is_null()) in.documents = *d;
  for (const char* key : {"add_generation_prompt", "continue_final_message"}) {
    auto it = c.find(key);
    if (it == c.end() || it->is_null()) continue;
    if (!it->is_boolean()) return InvalidArgument(path + ": '" + key + "' must be a boolean");
    (std::string(key) == "add_generation_prompt" ? in.add_generation_prompt : in.continue_final_message) =
        it->get<bool>();
  }
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    auto it = c.find(key);
    if (it == c.end() || it->is_null()) continue;
    if (!it->is_string()) return InvalidArgument(path + ": '" + key + "' must be a string");
    in.special_tokens[key] = it->get<std::string>();
  }
  if (auto now = c.find("now"); now != c.end() && !now->is_null()) {
    if (!now->is_string()) return InvalidArgument(path + ": 'now' must be an ISO 8601 string");
    in.now = now->get<std::string>();
  }
  if (auto kw = c.find("chat_template_kwargs"); kw != c.end() && !kw->is_null()) {
    if (!kw->is_object()) return InvalidArgument(path + ": 'chat_template_kwargs' must be an object");
    in.extra = *kw;
  }
  return in;
}

int RunRenderChat(const RenderChatOptions& o) {
  auto source = ReadFile(o.template_path);
  if (!source.ok()) return Fail(source.status());
  auto input_text = ReadFile(o.input_path);
  if (!input_text.ok()) return Fail(input_text.status());
  auto input = ReadCase(*input_text, o.input_path);
  if (!input.ok()) return Fail(input.status());
  auto tmpl = jinja::ChatTemplate::Parse(std::move(source).value());
  if (!tmpl.ok()) return Fail(tmpl.status().WithContext(o.template_path));
  auto prompt = tmpl->Render(*input);
  if (!prompt.ok()) return Fail(prompt.status());
  nlohmann::json out = {{"prompt", *prompt}};
  std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}

}  // namespace

void RegisterRenderChat(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<RenderChatOptions>();
  CLI::App* sub = app.add_subcommand("render-chat", "Render a chat template for a conversation (as transformers does)");
  sub->add_option("--template", o->template_path, "Jinja chat template file")->required();
  sub->add_option("--input", o->input_path,
                  "JSON case: messages, tools, add_generation_prompt, bos_token, eos_token, now")
      ->required();
  sub->callback([o, &exit_code] { exit_code = RunRenderChat(*o); });
}

}  // namespace ferry::cli
