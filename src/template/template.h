// A Jinja template engine for chat templates, written for ferry: the language as Jinja 3
// defines it, with the semantics transformers renders chat templates with (an immutable
// sandbox, trim_blocks and lstrip_blocks, loop controls, `tojson` as json.dumps) and
// Python's behaviour for the values templates touch. Renders are bounded (loop iterations,
// nesting, evaluation steps, output size) and every error names its line and column.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "template/ast.h"
#include "template/interpreter.h"
#include "template/value.h"

namespace ferry::jinja {

// The largest template source accepted.
inline constexpr size_t kMaxTemplateBytes = 1 << 20;

// Immutable after Parse; Render is thread-safe.
class Template {
 public:
  // InvalidArgument "TemplateSyntaxError: ... (line L, column C)" for bad templates.
  static Result<Template> Parse(std::string_view source);

  // Renders with `variables` (messages, tools, ...) and Jinja's globals (range, dict,
  // namespace, cycler, joiner) plus `extra_globals`. A failure is InvalidArgument
  // "<Kind>: <message> (line L, column C)", Kind being what Python would raise
  // (TemplateError from raise_exception, UndefinedError, TypeError, SecurityError for a
  // sandbox limit, ...).
  Result<std::string> Render(const DictData& variables, const std::map<std::string, GlobalFn>& extra_globals = {},
                             const RenderLimits& limits = {}) const;

 private:
  std::shared_ptr<const Body> body_;
};

// range, dict, namespace, cycler, joiner.
void AddBuiltinGlobals(std::map<std::string, GlobalFn>& globals);

}  // namespace ferry::jinja
