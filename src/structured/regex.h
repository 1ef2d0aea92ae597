// Regular expressions → grammar rules. The subset (documented in docs/structured-outputs.md):
// literals, escapes (\d \w \s and their negations, \n \t \r \f \v \xHH \uHHHH, escaped
// punctuation), classes [...] with ASCII ranges and negation, '.', groups (plain,
// non-capturing, named), alternation, and the quantifiers * + ? {m} {m,} {m,n} (greedy or
// lazy: the language of a whole-output match is the same). The whole output must match;
// '^' and '$' are accepted at the ends only. Backreferences, lookaround, word boundaries,
// possessive quantifiers and non-ASCII class ranges are refused with the construct named.
#pragma once

#include <string_view>

#include "core/status.h"
#include "structured/grammar.h"

namespace ferry::structured {

struct RegexOptions {
  // Inside a JSON string: '"', '\' and control characters are written as JSON escapes, so
  // that the string's decoded value matches the pattern.
  bool json_string = false;
};

// Adds rules that match exactly `pattern`'s language; returns the top rule.
Result<int32_t> AddRegex(GrammarBuilder& b, std::string_view pattern, const RegexOptions& options,
                         std::string_view name = "regex");

}  // namespace ferry::structured
