// Rendering helpers for the template tests. Expected outputs come from Python's jinja2
// 3.1.6 with transformers' chat-template settings (ImmutableSandboxedEnvironment,
// trim_blocks, lstrip_blocks, loopcontrols, tojson = json.dumps), rendered with the same
// variables as kTestVariables.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "template/template.h"
#include "template/value_json.h"

namespace ferry::jinja {

// The variables every test renders with.
inline constexpr const char* kTestVariables = R"({
  "ms": [{"role": "user", "content": " hi "}, {"role": "assistant", "content": "yo"}, {"role": "user", "content": "bye"}],
  "d": {"a": 1, "b": 2}
})";

// The output, or "ERROR Kind: message (line L, column C)".
inline std::string Render(const std::string& source, const std::string& variables = kTestVariables) {
  auto t = Template::Parse(source);
  if (!t.ok()) return "ERROR " + t.status().message();
  DictData vars;
  const auto j = nlohmann::ordered_json::parse(variables);
  for (auto it = j.begin(); it != j.end(); ++it) vars.Set(Value(it.key()), FromJson(it.value()));
  std::map<std::string, GlobalFn> globals;
  globals["raise_exception"] = [](Interpreter&, CallArgs& a) -> Value { Raise("TemplateError", Str(a.Take("m"))); };
  auto r = t->Render(vars, globals);
  return r.ok() ? *r : "ERROR " + r.status().message();
}

// "TypeError" from "ERROR TypeError: ..."; empty when the render succeeded.
inline std::string ErrorKind(const std::string& rendered) {
  if (rendered.rfind("ERROR ", 0) != 0) return "";
  return rendered.substr(6, rendered.find(':') - 6);
}

}  // namespace ferry::jinja
