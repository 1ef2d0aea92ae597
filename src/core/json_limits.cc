#include "core/json_limits.h"

namespace ferry {

namespace {

// Appends compact JSON for `value` to `out`; returns false when it stopped because `out`
// grew past `max_chars`. Every level appends a bracket before it descends, so the
// recursion is at most `max_chars` deep.
bool AppendSnippet(const nlohmann::json& value, size_t max_chars, std::string& out) {
  if (out.size() > max_chars) return false;
  if (value.is_array()) {
    out += '[';
    bool first = true;
    for (const nlohmann::json& item : value) {
      if (!first) out += ',';
      first = false;
      if (!AppendSnippet(item, max_chars, out)) return false;
    }
    out += ']';
  } else if (value.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (!first) out += ',';
      first = false;
      // A key is a string: dumping it is flat.
      out += nlohmann::json(it.key()).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      out += ':';
      if (!AppendSnippet(it.value(), max_chars, out)) return false;
    }
    out += '}';
  } else {
    // A scalar dumps without recursion; a long string is cut by the caller.
    out += value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return out.size() <= max_chars;
}

}  // namespace

int JsonNestingDepth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > deepest) {
          deepest = depth;
          if (deepest > limit) return limit + 1;
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;  // unbalanced text is the parser's to report
        break;
      default:
        break;
    }
  }
  return deepest;
}

Result<nlohmann::json> ParseUntrustedJson(std::string_view text, int max_depth) {
  if (JsonNestingDepth(text, max_depth) > max_depth) {
    return InvalidArgument("arrays and objects nested deeper than " + std::to_string(max_depth) + " levels");
  }
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(JsonErrorText(e.what()));
  }
}

std::string JsonErrorText(const char* what) {
  constexpr size_t kMaxChars = 240;
  std::string text(what);
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
  return text;
}

std::string JsonSnippet(const nlohmann::json& value, size_t max_chars) {
  std::string out;
  if (AppendSnippet(value, max_chars, out)) return out;
  out.resize(max_chars);
  return out + "...";
}

}  // namespace ferry
