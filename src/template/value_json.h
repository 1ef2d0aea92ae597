// JSON in and out of template values. In: an ordered JSON document (object keys keep their
// order, integers stay integers), as Python's json.loads gives transformers. Out: Python's
// json.dumps, which is what transformers' `tojson` filter calls.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "template/value.h"

namespace ferry::jinja {

Value FromJson(const nlohmann::ordered_json& j);

// json.dumps(value, ensure_ascii, indent, separators, sort_keys). `indent`: absent (None),
// a number of spaces, or a string; `item_sep`/`key_sep` default as Python's do (", " and
// ": ", or "," and ": " with an indent).
struct JsonDumpOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;  // the text of one level
  std::string item_sep;
  std::string key_sep;
  bool custom_separators = false;
  bool sort_keys = false;
};

// A TypeError for values JSON cannot hold (undefined, callables, objects).
std::string DumpJson(const Value& v, const JsonDumpOptions& options);

// A JSON string literal the way json.dumps writes it.
std::string JsonQuote(std::string_view s, bool ensure_ascii);

}  // namespace ferry::jinja
