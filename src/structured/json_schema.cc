#include "structured/json_schema.h"

#include <array>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "structured/regex.h"

namespace ferry::structured {
namespace {

using json = nlohmann::ordered_json;

// Integers without bounds have at most this many digits (and so do bounded ranges' open
// ends): every engine bounds them somewhere, and a model must not write digits forever.
constexpr int kMaxIntegerDigits = 16;
constexpr int kMaxFractionDigits = 16;

const std::set<std::string>& Annotations() {
  static const std::set<std::string> k = {"title",    "description", "default",   "examples",   "$schema",
                                          "$id",      "$comment",    "deprecated", "readOnly",  "writeOnly",
                                          "$defs",    "definitions", "strict",    "contentEncoding"};
  return k;
}

const std::set<std::string>& Supported() {
  static const std::set<std::string> k = {
      "type",      "properties", "required", "additionalProperties", "items",     "minItems", "maxItems",
      "enum",      "const",      "pattern",  "minLength",            "maxLength", "format",   "minimum",
      "maximum",   "anyOf",      "oneOf",    "allOf",                "$ref",      "exclusiveMinimum",
      "exclusiveMaximum", "uniqueItems"};
  return k;
}

std::string Digits9(size_t n) { return std::string(n, '9'); }
std::string Digits0(size_t n) { return std::string(n, '0'); }

class SchemaCompiler {
 public:
  SchemaCompiler(const json& root, const JsonGrammarOptions& o) : root_(root), opt_(o) {}

  Result<Grammar> Compile() {
    MakeBasics();
    FERRY_ASSIGN_OR_RETURN(int32_t value, Value(root_, "#"));
    const int32_t top = b_.AddRule("root");
    Sequence seq = {GrammarBuilder::Ref(value)};
    if (opt_.max_values > 1) {
      Sequence more = b_.Literal(opt_.separator);
      more.push_back(GrammarBuilder::Ref(value));
      FERRY_ASSIGN_OR_RETURN(int32_t rest, b_.Repeat("more_values", more, 0, opt_.max_values - 1));
      seq.push_back(GrammarBuilder::Ref(rest));
    }
    b_.AddAlternative(top, std::move(seq));
    return b_.Build(top);
  }

  Result<Grammar> AnyObject() {
    MakeBasics();
    return b_.Build(any_object_);
  }

 private:
  Status Refuse(const std::string& path, const std::string& what) const {
    return InvalidArgument("JSON schema at " + path + ": " + what);
  }

  void MakeBasics() {
    ws_ = b_.AddRule("ws");
    if (opt_.any_whitespace) {
      // Nothing, one space, or a line break and an indentation (as llama.cpp's JSON
      // grammars): pretty-printed output is possible, padding a line with blanks is not.
      ByteSet indent;
      indent.set(' ');
      indent.set('\t');
      const int32_t rep = b_.Repeat("ws_indent", {b_.Bytes(indent)}, 0, JsonGrammarOptions::kMaxIndent).value();
      b_.AddAlternative(ws_, {});
      b_.AddAlternative(ws_, {b_.Byte(' ')});
      b_.AddAlternative(ws_, {b_.Byte('\n'), GrammarBuilder::Ref(rep)});
    } else {
      b_.AddAlternative(ws_, {});
    }
    // A character of a JSON string: unescaped UTF-8 (not '"', '\', controls) or an escape.
    ByteSet excluded;
    for (int c = 0; c < 0x20; ++c) excluded.set(static_cast<size_t>(c));
    excluded.set('"');
    excluded.set('\\');
    excluded.set(0x7F);
    const int32_t plain = AnyUtf8Char(b_, excluded, "string_char_plain");
    ByteSet simple;
    for (char c : {'"', '\\', '/', 'b', 'f', 'n', 'r', 't'}) simple.set(static_cast<uint8_t>(c));
    ByteSet hex;
    for (char c : std::string("0123456789abcdefABCDEF")) hex.set(static_cast<uint8_t>(c));
    const Element h = b_.Bytes(hex);
    char_ = b_.Choice("string_char", {{GrammarBuilder::Ref(plain)},
                                      {b_.Byte('\\'), b_.Bytes(simple)},
                                      {b_.Byte('\\'), b_.Byte('u'), h, h, h, h}});
    Sequence s = {b_.Byte('"'), GrammarBuilder::Ref(b_.Star("string_chars", {GrammarBuilder::Ref(char_)})), b_.Byte('"')};
    string_ = b_.Choice("string", {std::move(s)});
    integer_ = IntegerRule(std::nullopt, std::nullopt);
    number_ = UnboundedNumber();
    boolean_ = b_.Choice("boolean", {b_.Literal("true"), b_.Literal("false")});
    null_ = b_.Choice("null", {b_.Literal("null")});
    // Any value, for schemas without a type and for json_object.
    any_ = b_.AddRule("value");
    any_object_ = b_.AddRule("object");
    const int32_t any_array = b_.AddRule("array");
    for (int32_t r : {any_object_, any_array, string_, number_, boolean_, null_}) {
      b_.AddAlternative(any_, {GrammarBuilder::Ref(r)});
    }
    const Sequence pair = {GrammarBuilder::Ref(string_), Ws(), b_.Byte(':'), Ws(), GrammarBuilder::Ref(any_)};
    b_.AddAlternative(any_object_, Concat({b_.Byte('{'), Ws()}, SeparatedList("members", pair, 0, -1).value(),
                                          {Ws(), b_.Byte('}')}));
    b_.AddAlternative(any_array, Concat({b_.Byte('['), Ws()},
                                        SeparatedList("elements", {GrammarBuilder::Ref(any_)}, 0, -1).value(),
                                        {Ws(), b_.Byte(']')}));
  }

  Element Ws() const { return GrammarBuilder::Ref(ws_); }

  static Sequence Concat(Sequence a, const Sequence& b2, const Sequence& c = {}) {
    a.insert(a.end(), b2.begin(), b2.end());
    a.insert(a.end(), c.begin(), c.end());
    return a;
  }

  // item (ws "," ws item){min-1, max-1}, or nothing when min is 0 (max < 0: unbounded).
  Result<Sequence> SeparatedList(const std::string& name, const Sequence& item, int64_t min, int64_t max) {
    if (max == 0) return Sequence{};
    const Sequence more = Concat({Ws(), b_.Byte(','), Ws()}, item);
    FERRY_ASSIGN_OR_RETURN(int32_t rest, b_.Repeat(name + "_rest", more, std::max<int64_t>(min - 1, 0),
                                                   max < 0 ? -1 : max - 1));
    Sequence list = Concat(item, {GrammarBuilder::Ref(rest)});
    if (min > 0) return list;
    return Sequence{GrammarBuilder::Ref(b_.Optional(name, std::move(list)))};
  }

  // Digit patterns for the integers [lo, hi] written with the same number of digits.
  void SameLength(const std::string& lo, const std::string& hi, Sequence prefix, std::vector<Sequence>& out) {
    if (lo.empty()) {
      out.push_back(std::move(prefix));
      return;
    }
    const size_t rest = lo.size() - 1;
    if (lo[0] == hi[0]) {
      prefix.push_back(b_.Byte(static_cast<uint8_t>(lo[0])));
      SameLength(lo.substr(1), hi.substr(1), std::move(prefix), out);
      return;
    }
    ByteSet digit;
    for (char c = '0'; c <= '9'; ++c) digit.set(static_cast<uint8_t>(c));
    auto span = [&](char a, char z) {
      ByteSet s;
      for (char c = a; c <= z; ++c) s.set(static_cast<uint8_t>(c));
      return s;
    };
    if (lo.substr(1) == Digits0(rest) && hi.substr(1) == Digits9(rest)) {
      Sequence s = prefix;
      s.push_back(b_.Bytes(span(lo[0], hi[0])));
      for (size_t k = 0; k < rest; ++k) s.push_back(b_.Bytes(digit));
      out.push_back(std::move(s));
      return;
    }
    Sequence low = prefix;
    low.push_back(b_.Byte(static_cast<uint8_t>(lo[0])));
    SameLength(lo.substr(1), Digits9(rest), std::move(low), out);
    if (hi[0] - lo[0] > 1) {
      Sequence mid = prefix;
      mid.push_back(b_.Bytes(span(static_cast<char>(lo[0] + 1), static_cast<char>(hi[0] - 1))));
      for (size_t k = 0; k < rest; ++k) mid.push_back(b_.Bytes(digit));
      out.push_back(std::move(mid));
    }
    Sequence high = prefix;
    high.push_back(b_.Byte(static_cast<uint8_t>(hi[0])));
    SameLength(Digits0(rest), hi.substr(1), std::move(high), out);
  }

  // Canonical decimal writings (no leading zeros) of the integers [lo, hi], 0 <= lo <= hi.
  void NonNegativeRange(int64_t lo, int64_t hi, const Sequence& prefix, std::vector<Sequence>& out) {
    for (size_t len = std::to_string(lo).size(); len <= std::to_string(hi).size(); ++len) {
      const int64_t first = len == 1 ? 0 : static_cast<int64_t>(std::pow(10.0, static_cast<double>(len - 1)));
      const int64_t last = len >= 19 ? INT64_MAX : static_cast<int64_t>(std::pow(10.0, static_cast<double>(len))) - 1;
      const int64_t a = std::max(lo, first), z = std::min(hi, last);
      if (a > z) continue;
      SameLength(std::to_string(a), std::to_string(z), prefix, out);
    }
  }

  static int64_t Limit() {
    int64_t v = 0;
    for (int i = 0; i < kMaxIntegerDigits; ++i) v = v * 10 + 9;
    return v;
  }

  std::vector<Sequence> IntegerAlternatives(int64_t lo, int64_t hi) {
    std::vector<Sequence> alts;
    if (hi >= 0) NonNegativeRange(std::max<int64_t>(lo, 0), hi, {}, alts);
    if (lo < 0) NonNegativeRange(std::max<int64_t>(1, hi < 0 ? -hi : 1), -lo, {b_.Byte('-')}, alts);
    return alts;
  }

  int32_t IntegerRule(std::optional<int64_t> lo, std::optional<int64_t> hi) {
    return b_.Choice("integer", IntegerAlternatives(lo.value_or(-Limit()), hi.value_or(Limit())));
  }

  Sequence Fraction() {
    ByteSet digit;
    for (char c = '0'; c <= '9'; ++c) digit.set(static_cast<uint8_t>(c));
    return {b_.Byte('.'), GrammarBuilder::Ref(b_.Repeat("fraction", {b_.Bytes(digit)}, 1, kMaxFractionDigits).value())};
  }

  int32_t UnboundedNumber() {
    ByteSet digit, sign, e;
    for (char c = '0'; c <= '9'; ++c) digit.set(static_cast<uint8_t>(c));
    sign.set('+');
    sign.set('-');
    e.set('e');
    e.set('E');
    const int32_t frac = b_.Optional("number_fraction", Fraction());
    const int32_t exp = b_.Optional(
        "number_exponent", {b_.Bytes(e), GrammarBuilder::Ref(b_.Optional("exponent_sign", {b_.Bytes(sign)})),
                            GrammarBuilder::Ref(b_.Repeat("exponent_digits", {b_.Bytes(digit)}, 1, 3).value())});
    // "-0.5" is a number although "-0" is not an integer ferry writes.
    const int32_t minus = b_.Optional("number_sign", {b_.Byte('-')});
    const int32_t whole = b_.Choice("number_whole", IntegerAlternatives(0, Limit()));
    return b_.Choice("number", {{GrammarBuilder::Ref(minus), GrammarBuilder::Ref(whole), GrammarBuilder::Ref(frac),
                                 GrammarBuilder::Ref(exp)}});
  }

  // Numbers in [lo, hi] (integers): integers, and decimals whose whole interval lies inside.
  Result<int32_t> BoundedNumber(int64_t lo, int64_t hi, const std::string& path) {
    std::vector<Sequence> alts = IntegerAlternatives(lo, hi);
    std::vector<Sequence> frac_int;
    if (hi - 1 >= std::max<int64_t>(lo, 0)) NonNegativeRange(std::max<int64_t>(lo, 0), hi - 1, {}, frac_int);
    const int64_t neg_lo = std::max<int64_t>(1, -hi), neg_hi = -lo - 1;
    if (neg_lo <= neg_hi) NonNegativeRange(neg_lo, neg_hi, {b_.Byte('-')}, frac_int);
    if (lo <= -1 && hi >= 0) frac_int.push_back({b_.Byte('-'), b_.Byte('0')});
    for (Sequence& s : frac_int) alts.push_back(Concat(std::move(s), Fraction()));
    if (alts.empty()) return Refuse(path, "no number lies between minimum and maximum");
    return b_.Choice("number_range", std::move(alts));
  }

  Result<int32_t> Ref(const std::string& ref, const std::string& path) {
    auto it = refs_.find(ref);
    if (it != refs_.end()) return it->second;
    if (ref.rfind("#", 0) != 0) return Refuse(path, "$ref '" + ref + "' is not inside the schema (remote references are not supported)");
    const json* target = &root_;
    std::string pointer = ref.substr(1);
    try {
      target = &root_.at(json::json_pointer(pointer));
    } catch (const std::exception&) {
      return Refuse(path, "$ref '" + ref + "' does not resolve");
    }
    const int32_t rule = b_.AddRule("ref");
    refs_.emplace(ref, rule);  // before compiling: recursive references find it
    FERRY_ASSIGN_OR_RETURN(int32_t body, Value(*target, ref));
    b_.AddAlternative(rule, {GrammarBuilder::Ref(body)});
    return rule;
  }

  Result<int32_t> Value(const json& s, const std::string& path) {
    if (++depth_ > 200) return Refuse(path, "nesting deeper than 200 schemas");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    if (s.is_boolean()) {
      if (s.get<bool>()) return any_;
      return Refuse(path, "the schema 'false' allows no value");
    }
    if (!s.is_object()) return Refuse(path, "a schema must be an object or a boolean");
    for (const auto& [key, v] : s.items()) {
      if (!Annotations().count(key) && !Supported().count(key)) {
        return Refuse(path, "unsupported keyword '" + key + "'");
      }
    }
    if (s.contains("uniqueItems") && s["uniqueItems"] != false) return Refuse(path, "unsupported keyword 'uniqueItems'");
    auto only = [&](const char* keyword) -> Status {
      for (const auto& [key, v] : s.items()) {
        if (key != keyword && !Annotations().count(key)) {
          return Refuse(path, std::string("'") + keyword + "' together with '" + key + "' is not supported");
        }
      }
      return Status::Ok();
    };
    if (s.contains("$ref")) {
      FERRY_RETURN_IF_ERROR(only("$ref"));
      if (!s["$ref"].is_string()) return Refuse(path, "$ref must be a string");
      return Ref(s["$ref"].get<std::string>(), path);
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!s.contains(k)) continue;
      FERRY_RETURN_IF_ERROR(only(k));
      const json& list = s[k];
      if (!list.is_array() || list.empty()) return Refuse(path, std::string(k) + " must be a non-empty array");
      std::vector<Sequence> alts;
      for (size_t i = 0; i < list.size(); ++i) {
        FERRY_ASSIGN_OR_RETURN(int32_t r, Value(list[i], path + "/" + k + "/" + std::to_string(i)));
        alts.push_back({GrammarBuilder::Ref(r)});
      }
      return b_.Choice(k, std::move(alts));
    }
    if (s.contains("allOf")) {
      FERRY_RETURN_IF_ERROR(only("allOf"));
      if (!s["allOf"].is_array() || s["allOf"].size() != 1) {
        return Refuse(path, "allOf is supported with exactly one schema");
      }
      return Value(s["allOf"][0], path + "/allOf/0");
    }
    if (s.contains("const")) {
      return b_.Choice("const", {b_.Literal(s["const"].dump())});
    }
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) return Refuse(path, "enum must be a non-empty array");
      std::vector<Sequence> alts;
      for (const json& v : s["enum"]) alts.push_back(b_.Literal(v.dump()));
      return b_.Choice("enum", std::move(alts));
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array()) {
        for (const json& x : t) {
          if (!x.is_string()) return Refuse(path, "type must be a string or an array of strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        return Refuse(path, "type must be a string or an array of strings");
      }
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength") || s.contains("format")) {
      types.push_back("string");
    } else if (s.contains("minimum") || s.contains("maximum")) {
      types.push_back("number");
    } else {
      return any_;
    }
    if (types.empty()) return Refuse(path, "type is an empty list");
    std::vector<Sequence> alts;
    for (const std::string& type : types) {
      FERRY_ASSIGN_OR_RETURN(int32_t r, Typed(s, type, path));
      alts.push_back({GrammarBuilder::Ref(r)});
    }
    if (b_.num_elements() > GrammarBuilder::kMaxElements) return Refuse(path, "the schema is too large");
    if (alts.size() == 1) return alts[0][0].value;
    return b_.Choice("types", std::move(alts));
  }

  Result<std::optional<int64_t>> Bound(const json& s, const char* key, const std::string& path, bool integer, bool upper) {
    if (!s.contains(key)) return std::optional<int64_t>();
    const json& v = s[key];
    if (!v.is_number()) return Refuse(path, std::string(key) + " must be a number");
    const double d = v.get<double>();
    if (std::fabs(d) > static_cast<double>(Limit())) return Refuse(path, std::string(key) + " is beyond 16 digits");
    const bool exclusive = std::string(key).rfind("exclusive", 0) == 0;
    if (exclusive && !integer) {
      return Refuse(path, std::string("'") + key + "' is supported for integers only");
    }
    double r = upper ? std::floor(d) : std::ceil(d);
    if (exclusive && r == d) r += upper ? -1 : 1;
    return std::optional<int64_t>(static_cast<int64_t>(r));
  }

  Result<int32_t> Typed(const json& s, const std::string& type, const std::string& path) {
    if (type == "string") return StringValue(s, path);
    if (type == "integer" || type == "number") {
      const bool integer = type == "integer";
      FERRY_ASSIGN_OR_RETURN(std::optional<int64_t> lo, Bound(s, "minimum", path, integer, false));
      FERRY_ASSIGN_OR_RETURN(std::optional<int64_t> hi, Bound(s, "maximum", path, integer, true));
      FERRY_ASSIGN_OR_RETURN(std::optional<int64_t> xlo, Bound(s, "exclusiveMinimum", path, integer, false));
      FERRY_ASSIGN_OR_RETURN(std::optional<int64_t> xhi, Bound(s, "exclusiveMaximum", path, integer, true));
      if (xlo) lo = lo ? std::max(*lo, *xlo) : *xlo;
      if (xhi) hi = hi ? std::min(*hi, *xhi) : *xhi;
      if (!lo && !hi) return integer ? integer_ : number_;
      if (lo && hi && *lo > *hi) return Refuse(path, "minimum is above maximum");
      if (integer) return IntegerRule(lo, hi);
      return BoundedNumber(lo.value_or(-Limit()), hi.value_or(Limit()), path);
    }
    if (type == "boolean") return boolean_;
    if (type == "null") return null_;
    if (type == "object") return ObjectValue(s, path);
    if (type == "array") return ArrayValue(s, path);
    return Refuse(path, "unknown type '" + type + "'");
  }

  Result<int64_t> Count(const json& s, const char* key, const std::string& path, int64_t fallback) {
    if (!s.contains(key)) return fallback;
    const json& v = s[key];
    if (!v.is_number_integer() && !v.is_number_unsigned()) return Refuse(path, std::string(key) + " must be an integer");
    const int64_t n = v.get<int64_t>();
    if (n < 0 || n > GrammarBuilder::kMaxRepeat) {
      return Refuse(path, std::string(key) + " must be between 0 and " + std::to_string(GrammarBuilder::kMaxRepeat));
    }
    return n;
  }

  Result<int32_t> StringValue(const json& s, const std::string& path) {
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("pattern") || s.contains("format")) {
      if (has_len) return Refuse(path, "minLength/maxLength together with pattern or format are not supported");
      if (s.contains("pattern") && s.contains("format")) return Refuse(path, "pattern together with format is not supported");
      std::string pattern;
      if (s.contains("pattern")) {
        if (!s["pattern"].is_string()) return Refuse(path, "pattern must be a string");
        pattern = s["pattern"].get<std::string>();
      } else {
        if (!s["format"].is_string()) return Refuse(path, "format must be a string");
        const std::string f = s["format"].get<std::string>();
        const std::string date = "\\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|(0[469]|11)-(0[1-9]|[12]\\d|30)|02-(0[1-9]|1\\d|2[0-8]))";
        const std::string time = "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,6})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
        const std::string octet = "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
        if (f == "date") {
          pattern = date;
        } else if (f == "time") {
          pattern = time;
        } else if (f == "date-time") {
          pattern = date + "T" + time;
        } else if (f == "uuid") {
          pattern = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
        } else if (f == "email") {
          pattern = "[a-zA-Z0-9_%+-]{1,32}(\\.[a-zA-Z0-9_%+-]{1,32}){0,3}@[a-zA-Z0-9-]{1,32}(\\.[a-zA-Z0-9-]{1,32}){0,3}\\.[a-zA-Z]{2,12}";
        } else if (f == "ipv4") {
          pattern = "(" + octet + "\\.){3}" + octet;
        } else {
          return Refuse(path, "unsupported format '" + f + "'");
        }
      }
      // JSON Schema patterns search anywhere in the string; ferry makes the whole string
      // match, which satisfies the search too.
      auto r = AddRegex(b_, pattern, RegexOptions{.json_string = true}, "pattern");
      if (!r.ok()) return Refuse(path, r.status().message());
      return b_.Choice("pattern_string", {{b_.Byte('"'), GrammarBuilder::Ref(r.value()), b_.Byte('"')}});
    }
    if (!has_len) return string_;
    FERRY_ASSIGN_OR_RETURN(int64_t min, Count(s, "minLength", path, 0));
    FERRY_ASSIGN_OR_RETURN(int64_t max, Count(s, "maxLength", path, -1));
    if (max >= 0 && max < min) return Refuse(path, "minLength is above maxLength");
    FERRY_ASSIGN_OR_RETURN(int32_t chars, b_.Repeat("string_chars", {GrammarBuilder::Ref(char_)}, min, max));
    return b_.Choice("string", {{b_.Byte('"'), GrammarBuilder::Ref(chars), b_.Byte('"')}});
  }

  Result<int32_t> ArrayValue(const json& s, const std::string& path) {
    int32_t item = any_;
    if (s.contains("items")) {
      if (s["items"].is_array()) return Refuse(path, "items as an array (tuple validation) is not supported");
      FERRY_ASSIGN_OR_RETURN(item, Value(s["items"], path + "/items"));
    }
    FERRY_ASSIGN_OR_RETURN(int64_t min, Count(s, "minItems", path, 0));
    FERRY_ASSIGN_OR_RETURN(int64_t max, Count(s, "maxItems", path, -1));
    if (max >= 0 && max < min) return Refuse(path, "minItems is above maxItems");
    auto list = SeparatedList("items", {GrammarBuilder::Ref(item)}, min, max);
    if (!list.ok()) return Refuse(path, list.status().message());
    return b_.Choice("array", {Concat({b_.Byte('['), Ws()}, list.value(), {Ws(), b_.Byte(']')})});
  }

  Result<int32_t> ObjectValue(const json& s, const std::string& path) {
    std::vector<std::pair<std::string, const json*>> props;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) return Refuse(path, "properties must be an object");
      for (const auto& [key, v] : s["properties"].items()) props.emplace_back(key, &v);
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return Refuse(path, "required must be an array");
      for (const json& r : s["required"]) {
        if (!r.is_string()) return Refuse(path, "required must list strings");
        required.insert(r.get<std::string>());
      }
    }
    for (const std::string& r : required) {
      bool found = false;
      for (const auto& p : props) found = found || p.first == r;
      if (!found) return Refuse(path, "required property '" + r + "' is not among the properties");
    }
    // Extra properties are generated only when additionalProperties asks for them (true or a
    // schema); left out, none are written, which every schema allows.
    int32_t extra = -1;
    if (s.contains("additionalProperties")) {
      const json& a = s["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) {
        FERRY_ASSIGN_OR_RETURN(extra, Value(a, path + "/additionalProperties"));
      }
    }
    const size_t n = props.size();
    std::vector<int32_t> values(n);
    for (size_t i = 0; i < n; ++i) {
      FERRY_ASSIGN_OR_RETURN(values[i], Value(*props[i].second, path + "/properties/" + props[i].first));
    }
    // rest[i][before]: properties i.. in order, `before` = something was written already.
    std::vector<std::array<int32_t, 2>> rest(n + 1);
    for (size_t i = 0; i <= n; ++i) rest[i] = {b_.AddRule("props"), b_.AddRule("props")};
    const Sequence comma = {Ws(), b_.Byte(','), Ws()};
    for (int before = 0; before < 2; ++before) {
      if (extra < 0) {
        b_.AddAlternative(rest[n][before], {});
      } else {
        const Sequence pair = {GrammarBuilder::Ref(string_), Ws(), b_.Byte(':'), Ws(), GrammarBuilder::Ref(extra)};
        const int32_t more = b_.Star("extra_props", Concat(comma, pair));
        if (before) {
          b_.AddAlternative(rest[n][before], {GrammarBuilder::Ref(more)});
        } else {
          b_.AddAlternative(rest[n][before], {});
          b_.AddAlternative(rest[n][before], Concat(pair, {GrammarBuilder::Ref(more)}));
        }
      }
      for (size_t i = 0; i < n; ++i) {
        Sequence with = before ? comma : Sequence{};
        const Sequence key = b_.Literal(json(props[i].first).dump());
        with.insert(with.end(), key.begin(), key.end());
        with.insert(with.end(), {Ws(), b_.Byte(':'), Ws(), GrammarBuilder::Ref(values[i]),
                                 GrammarBuilder::Ref(rest[i + 1][1])});
        b_.AddAlternative(rest[i][before], std::move(with));
        if (!required.count(props[i].first)) b_.AddAlternative(rest[i][before], {GrammarBuilder::Ref(rest[i + 1][before])});
      }
    }
    return b_.Choice("object", {{b_.Byte('{'), Ws(), GrammarBuilder::Ref(rest[0][0]), Ws(), b_.Byte('}')}});
  }

  const json& root_;
  JsonGrammarOptions opt_;
  GrammarBuilder b_;
  int32_t ws_ = -1, char_ = -1, string_ = -1, integer_ = -1, number_ = -1, boolean_ = -1, null_ = -1, any_ = -1;
  int32_t any_object_ = -1;
  std::unordered_map<std::string, int32_t> refs_;
  int depth_ = 0;
};

}  // namespace

Result<Grammar> JsonSchemaToGrammar(const nlohmann::ordered_json& schema, const JsonGrammarOptions& options) {
  try {
    return SchemaCompiler(schema, options).Compile();
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("JSON schema: ") + e.what());
  }
}

Result<Grammar> JsonObjectGrammar(const JsonGrammarOptions& options) {
  return SchemaCompiler(json::object(), options).AnyObject();
}

}  // namespace ferry::structured
