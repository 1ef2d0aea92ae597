#include "core/json_limits.h"

#include <cmath>
#include <unordered_set>
#include <vector>

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

// Builds the value from SAX events, refusing repeated keys and numbers that overflow.
class StrictBuilder {
 public:
  using json = nlohmann::json;
  explicit StrictBuilder(json& root) : root_(root) {}

  bool null() { return Put(json(nullptr)); }
  bool boolean(bool v) { return Put(json(v)); }
  bool number_integer(json::number_integer_t v) { return Put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return Put(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t& text) {
    if (!std::isfinite(v)) return Fail("the number " + Cut(text) + " is out of range");
    return Put(json(v));
  }
  bool string(json::string_t& v) { return Put(json(std::move(v))); }
  bool binary(json::binary_t& v) { return Put(json::binary(std::move(v))); }
  bool start_object(std::size_t) {
    if (!Put(json::object())) return false;
    keys_.emplace_back();
    return true;
  }
  bool key(json::string_t& k) {
    if (!keys_.back().insert(k).second) return Fail("the key \"" + Cut(k) + "\" appears twice in one object");
    key_ = std::move(k);
    return true;
  }
  bool end_object() {
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }
  bool start_array(std::size_t) { return Put(json::array()); }
  bool end_array() {
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string& token, const nlohmann::detail::exception& e) {
    if (!error_.empty()) return false;
    // 406: the lexer read a number no double holds.
    error_ = e.id == 406 ? "the number " + Cut(token) + " is out of range" : JsonErrorText(e.what());
    return false;
  }
  const std::string& error() const { return error_; }

 private:
  static std::string Cut(const std::string& s) { return s.size() > 40 ? s.substr(0, 40) + "..." : s; }
  bool Fail(std::string why) {
    error_ = std::move(why);
    return false;
  }
  // Adds a value where the parser is; containers become the new insertion point.
  bool Put(json value) {
    json* slot;
    if (stack_.empty()) {
      root_ = std::move(value);
      slot = &root_;
    } else if (stack_.back()->is_array()) {
      stack_.back()->push_back(std::move(value));
      slot = &stack_.back()->back();
    } else {
      slot = &(*stack_.back())[key_];
      *slot = std::move(value);
    }
    if (slot->is_array() || slot->is_object()) stack_.push_back(slot);
    return true;
  }

  json& root_;
  std::vector<json*> stack_;
  std::vector<std::unordered_set<std::string>> keys_;
  std::string key_;
  std::string error_;
};

}  // namespace

Result<nlohmann::json> ParseStrictJson(std::string_view text, int max_depth) {
  if (JsonNestingDepth(text, max_depth) > max_depth) {
    return InvalidArgument("arrays and objects nested deeper than " + std::to_string(max_depth) + " levels");
  }
  nlohmann::json root;
  StrictBuilder builder(root);
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(text.begin(), text.end(), &builder);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(JsonErrorText(e.what()));
  }
  if (!ok) return InvalidArgument(builder.error().empty() ? std::string("malformed JSON") : builder.error());
  return root;
}

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
