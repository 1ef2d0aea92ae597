// The grammar language (GBNF-like; docs/structured-outputs.md has the full syntax):
//
//   # a comment
//   root   ::= "{" ws pair ("," ws pair)* ws "}"
//   pair   ::= key ws ":" ws value
//   key    ::= "\"" [a-z_]{1,16} "\""
//   value  ::= [0-9]+ | "true" | "false"
//   ws     ::= [ \t\n]{0,8}
//
// Strings in double quotes (escapes \n \t \r \\ \" \xHH \uHHHH), character classes and '.'
// with the regex syntax (structured/regex.h), rule names, groups, alternation, and the
// quantifiers * + ? {m} {m,} {m,n}. The root is the rule named `root`, else the first.
#pragma once

#include <string_view>

#include "core/status.h"
#include "structured/grammar.h"

namespace ferry::structured {

Result<Grammar> ParseEbnf(std::string_view text);

}  // namespace ferry::structured
