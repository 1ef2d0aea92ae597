// JSON Schema → grammar. Supported (docs/structured-outputs.md): type (object, array,
// string, number, integer, boolean, null, and lists of them), properties, required,
// additionalProperties (false, true or a schema), items, minItems, maxItems, enum, const,
// string pattern (the regex subset of structured/regex.h), minLength, maxLength, format
// (date, time, date-time, uuid, email, ipv4), number and integer minimum and maximum
// (exclusive bounds for integers), anyOf, oneOf, allOf of one schema, $ref into $defs or
// definitions (recursion allowed). Annotations (title, description, examples, ...) are
// ignored; any other keyword is refused with its name and place, never silently dropped.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/status.h"
#include "structured/grammar.h"

namespace ferry::structured {

struct JsonGrammarOptions {
  JsonGrammarOptions() = default;
  explicit JsonGrammarOptions(bool whitespace) : any_whitespace(whitespace) {}

  // Whitespace between tokens: nothing, one space, or a line break followed by at most
  // kMaxIndent spaces or tabs, so that pretty-printed output is possible but a model cannot
  // pad with blanks. false (vLLM's disable_any_whitespace): none at all.
  bool any_whitespace = true;
  static constexpr int kMaxIndent = 16;
  // More than 1: the output is 1..max_values values of the schema, `separator` between them
  // (tool calls: Llama 3's "; ").
  int max_values = 1;
  std::string separator;
};

// Properties are written in the schema's order (parse it into an ordered_json).
Result<Grammar> JsonSchemaToGrammar(const nlohmann::ordered_json& schema, const JsonGrammarOptions& options);
// Any JSON object (response_format json_object).
Result<Grammar> JsonObjectGrammar(const JsonGrammarOptions& options);

}  // namespace ferry::structured
