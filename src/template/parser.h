// Jinja's grammar over the lexer's tokens: statements (`if`, `for` with `else`, `if`
// filters and `recursive`, `set` and block `set`, `macro`, `call`, `filter`, `with`,
// `break`/`continue`, `block`, transformers' `generation`) and expressions with Jinja's
// precedence (conditional, or, and, not, comparisons, + -, ~, * / // %, **, unary,
// filters and tests, attribute, subscript, slice and call postfixes).
#pragma once

#include <string_view>
#include <vector>

#include "core/status.h"
#include "template/ast.h"
#include "template/lexer.h"

namespace ferry::jinja {

// The deepest nesting of statements and expressions a template may have.
inline constexpr int kMaxParseDepth = 200;

// TemplateSyntaxError (as InvalidArgument) naming the line and column.
Result<Body> Parse(const std::vector<Token>& tokens);

}  // namespace ferry::jinja
