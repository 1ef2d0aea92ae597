// JSON from outside the process (files ferry did not write, request bodies): parsing with
// a bound on nesting, and short descriptions of values for error messages.
//
// nlohmann's parser and destructor are iterative, but dump(), copies and comparisons
// recurse once per level: a value nested 100,000 deep parses fine and then overflows the
// stack the first time an error message dumps it. So untrusted text is scanned for its
// nesting depth before it is parsed, and messages quote values through JsonSnippet, which
// stops after a fixed number of characters.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ferry {

// Deeper than any file or request ferry reads (engine manifests nest about 6 levels, JSON
// Schemas in tool definitions a few dozen), far shallower than what exhausts a stack.
inline constexpr int kMaxJsonDepth = 128;

// The deepest nesting of arrays and objects in `text`, counting brackets outside string
// literals; the scan stops as soon as it passes `limit` and returns limit + 1. Not a
// validator: malformed text is left for the parser to report.
int JsonNestingDepth(std::string_view text, int limit);

// Parses `text` (untrusted) into a value nested at most `max_depth` levels. On failure,
// InvalidArgument whose message says why in a form that reads after "is not valid JSON":
// the parser's error (shortened) or the nesting limit. Never throws.
Result<nlohmann::json> ParseUntrustedJson(std::string_view text, int max_depth = kMaxJsonDepth);

// Request bodies: as ParseUntrustedJson, and also refuses an object with a repeated key
// (which parsers resolve differently: nlohmann keeps the last, others the first) and a
// number that does not fit a double (1e400, a 10,000-digit integer), naming the key or the
// text. Never throws.
Result<nlohmann::json> ParseStrictJson(std::string_view text, int max_depth = kMaxJsonDepth);

// A parse error quotes the last token read, which in a corrupt file can be megabytes of
// garbage; this keeps only its head.
std::string JsonErrorText(const char* what);

// Compact JSON text of `value` for an error message, cut after about `max_chars`
// characters ("..." marks the cut). Its cost and its recursion are bounded by `max_chars`,
// whatever the size or depth of the value.
std::string JsonSnippet(const nlohmann::json& value, size_t max_chars = 64);

}  // namespace ferry
