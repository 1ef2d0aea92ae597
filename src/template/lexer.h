// Jinja's lexer with the settings transformers renders chat templates with: trim_blocks
// and lstrip_blocks on, the default delimiters, newlines normalized to "\n" and one
// trailing newline dropped (keep_trailing_newline off). Whitespace control (`{%-`, `-%}`,
// `{%+`, `+%}`), comments and `{% raw %}` are resolved here, so the parser sees text,
// tag delimiters and expression tokens only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ferry::jinja {

enum class TokenType {
  kData,           // literal template text
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string value;  // text, name, unescaped string, operator; numbers as written (no underscores)
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
  int column = 1;
};

// TemplateSyntaxError (as InvalidArgument) with the line and column.
Result<std::vector<Token>> Tokenize(std::string_view source);

// "line L, column C"
std::string Where(int line, int column);

}  // namespace ferry::jinja
