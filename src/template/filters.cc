// Jinja's builtin filters, with transformers' `tojson` (json.dumps, no HTML escaping).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "template/interpreter.h"
#include "template/text.h"
#include "template/value_json.h"

namespace ferry::jinja {

namespace {

int64_t IntArg(const Value& v, const char* what) {
  if (v.is_int() || v.is_bool()) return v.AsInt();
  if (v.is_float()) return static_cast<int64_t>(v.AsFloat());
  if (v.is_undefined()) RaiseUndefined(v);
  Raise("TypeError", std::string(what) + " must be an integer, not " + v.TypeName());
}

std::optional<std::string> OptStr(const Value& v) {
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  return Str(v);
}

// Jinja's make_attrgetter: "a.b.0" walks item by item (numbers index sequences).
Value Attr(Interpreter& in, const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return in.GetItem(item, attribute);
  Value v = item;
  for (const std::string& part : text::Split(attribute.AsString(), std::string("."), -1, false)) {
    bool digits = !part.empty();
    for (char c : part) digits = digits && c >= '0' && c <= '9';
    v = digits ? in.GetItem(v, Value(static_cast<int64_t>(std::stoll(part)))) : in.GetItem(v, Value(part));
  }
  return v;
}

// The sort key of an item: lower-cased strings unless case-sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(text::Lower(v.AsString()));
  return v;
}

std::vector<Value> Sorted(std::vector<Value> items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return reverse ? Compare(keys[b], keys[a], "<") < 0 : Compare(keys[a], keys[b], "<") < 0;
  });
  std::vector<Value> out;
  out.reserve(items.size());
  for (size_t i : order) out.push_back(std::move(items[i]));
  return out;
}

Value FAbs(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("abs");
  if (v.is_float()) return Value(std::fabs(v.AsFloat()));
  if (v.is_number()) return Value(v.AsInt() < 0 ? -v.AsInt() : v.AsInt());
  if (v.is_undefined()) RaiseUndefined(v);
  Raise("TypeError", "bad operand type for abs(): '" + v.TypeName() + "'");
}

Value FAttr(Interpreter& in, const Value& v, CallArgs& a) {
  Value name = a.Take("name");
  a.Done("attr");
  // Python's getattr without the item fallback of `.`: a dict's keys are not attributes.
  if (v.is_dict()) {
    if (std::optional<Value> method = FindMethod(v, Str(name))) return *method;
    return Value::Undefined("'dict object' has no attribute '" + Str(name) + "'");
  }
  return in.GetAttr(v, Str(name));
}

Value FBatch(Interpreter& in, const Value& v, CallArgs& a) {
  const int64_t n = IntArg(a.Take("linecount"), "linecount");
  Value fill = a.Take("fill_with", Value::None());
  a.Done("batch");
  if (n <= 0) Raise("ValueError", "batch size must be positive");
  std::vector<Value> out, cur;
  for (Value& item : in.Iterate(v)) {
    cur.push_back(std::move(item));
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::List(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (!fill.is_none()) {
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(fill);
    }
    out.push_back(Value::List(std::move(cur)));
  }
  return Value::List(std::move(out));
}

Value FCapitalize(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("capitalize");
  return Value(text::Capitalize(Str(v)));
}

Value FCenter(Interpreter&, const Value& v, CallArgs& a) {
  const int64_t width = IntArg(a.Take("width", Value(int64_t{80})), "width");
  a.Done("center");
  return Value(text::Pad(Str(v), width, " ", '^'));
}

Value FLength(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("length");
  switch (v.kind()) {
    case Value::Kind::kUndefined: return Value(int64_t{0});
    case Value::Kind::kString: return Value(static_cast<int64_t>(Utf8Length(v.AsString())));
    case Value::Kind::kList:
    case Value::Kind::kTuple: return Value(static_cast<int64_t>(v.AsList().size()));
    case Value::Kind::kDict: return Value(static_cast<int64_t>(v.AsDict().size()));
    default: Raise("TypeError", "object of type '" + v.TypeName() + "' has no len()");
  }
}

Value FDefault(Interpreter&, const Value& v, CallArgs& a) {
  Value fallback = a.Take("default_value", Value(""));
  const bool boolean = a.Take("boolean", Value(false)).Truthy();
  a.Done("default");
  if (v.is_undefined() || (boolean && !v.Truthy())) return fallback;
  return v;
}

Value FDictsort(Interpreter&, const Value& v, CallArgs& a) {
  const bool case_sensitive = a.Take("case_sensitive", Value(false)).Truthy();
  const std::string by = Str(a.Take("by", Value("key")));
  const bool reverse = a.Take("reverse", Value(false)).Truthy();
  a.Done("dictsort");
  if (!v.is_dict()) Raise("FilterArgumentError", "dictsort expects a mapping");
  if (by != "key" && by != "value") Raise("FilterArgumentError", "You can only sort by either \"key\" or \"value\"");
  std::vector<Value> items, keys;
  for (const auto& [k, val] : v.AsDict().items()) {
    items.push_back(Value::Tuple({k, val}));
    keys.push_back(SortKey(by == "key" ? k : val, case_sensitive));
  }
  return Value::List(Sorted(std::move(items), keys, reverse));
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value FEscape(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("escape");
  return Value(HtmlEscape(Str(v)));
}

Value FFirst(Interpreter& in, const Value& v, CallArgs& a) {
  a.Done("first");
  std::vector<Value> items = in.Iterate(v);
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

Value FLast(Interpreter& in, const Value& v, CallArgs& a) {
  a.Done("last");
  std::vector<Value> items = in.Iterate(v);
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

std::optional<double> ParseFloat(const std::string& s) {
  const std::string t = text::Strip(s, std::nullopt, true, true);
  if (t.empty()) return std::nullopt;
  std::string cleaned;
  for (char c : t) {
    if (c != '_') cleaned += c;
  }
  char* end = nullptr;
  const double d = std::strtod(cleaned.c_str(), &end);
  if (end == cleaned.c_str() || *end != '\0') return std::nullopt;
  return d;
}

Value FFloat(Interpreter&, const Value& v, CallArgs& a) {
  Value fallback = a.Take("default", Value(0.0));
  a.Done("float");
  if (v.is_number()) return Value(v.AsFloat());
  if (v.is_string()) {
    if (auto d = ParseFloat(v.AsString())) return Value(*d);
  }
  return fallback;
}

Value FInt(Interpreter&, const Value& v, CallArgs& a) {
  Value fallback = a.Take("default", Value(int64_t{0}));
  const int64_t base = IntArg(a.Take("base", Value(int64_t{10})), "base");
  a.Done("int");
  if (v.is_int() || v.is_bool()) return Value(v.AsInt());
  if (v.is_float()) {
    if (!std::isfinite(v.AsFloat())) return fallback;
    return Value(static_cast<int64_t>(std::trunc(v.AsFloat())));
  }
  if (v.is_string()) {
    std::string t = text::Strip(v.AsString(), std::nullopt, true, true);
    std::string digits;
    for (char c : t) {
      if (c != '_') digits += c;
    }
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(digits.c_str(), &end, static_cast<int>(base));
    if (!digits.empty() && end != digits.c_str() && *end == '\0' && errno == 0) return Value(static_cast<int64_t>(x));
    if (auto d = ParseFloat(v.AsString()); d && std::isfinite(*d)) return Value(static_cast<int64_t>(std::trunc(*d)));
  }
  return fallback;
}

Value FFormat(Interpreter&, const Value& v, CallArgs& a) {
  std::vector<Value> args = a.args;
  a.next = a.args.size();
  if (!a.kwargs.empty() && !args.empty()) Raise("FilterArgumentError", "can't handle positional and keyword arguments at the same time");
  if (!a.kwargs.empty()) {
    DictData d;
    for (auto& [k, val] : a.kwargs) d.Set(Value(k), val);
    a.kwargs.clear();
    return Value(PercentFormat(Str(v), Value::Dict(std::move(d))));
  }
  return Value(PercentFormat(Str(v), args.size() == 1 && !args[0].is_tuple() ? args[0] : Value::Tuple(args)));
}

Value FGroupby(Interpreter& in, const Value& v, CallArgs& a) {
  Value attribute = a.Take("attribute");
  Value fallback = a.Take("default", Value::None());
  const bool case_sensitive = a.Take("case_sensitive", Value(false)).Truthy();
  a.Done("groupby");
  std::vector<Value> items = in.Iterate(v), keys;
  for (const Value& item : items) {
    Value k = Attr(in, item, attribute);
    if (k.is_undefined() && !fallback.is_none()) k = fallback;
    keys.push_back(SortKey(k, case_sensitive));
  }
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return Compare(keys[x], keys[y], "<") < 0; });
  std::vector<Value> groups;
  std::vector<Value> cur;
  Value cur_key;
  for (size_t n = 0; n < order.size(); ++n) {
    const size_t i = order[n];
    if (n > 0 && !Equals(keys[i], cur_key)) {
      groups.push_back(Value::Tuple({cur_key, Value::List(std::move(cur))}));
      cur.clear();
    }
    cur_key = keys[i];
    cur.push_back(items[i]);
  }
  if (!cur.empty()) groups.push_back(Value::Tuple({cur_key, Value::List(std::move(cur))}));
  return Value::List(std::move(groups));
}

Value FIndent(Interpreter&, const Value& v, CallArgs& a) {
  Value width = a.Take("width", Value(int64_t{4}));
  const bool first = a.Take("first", Value(false)).Truthy();
  const bool blank = a.Take("blank", Value(false)).Truthy();
  a.Done("indent");
  const std::string indention = width.is_string() ? width.AsString() : std::string(static_cast<size_t>(std::max<int64_t>(0, IntArg(width, "width"))), ' ');
  const std::string s = Str(v) + "\n";
  const std::vector<std::string> lines = text::SplitLines(s, false);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i > 0 ? "\n" + indention : "") + lines[i];
  } else if (!lines.empty()) {
    rv = lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? lines[i] : indention + lines[i]);
  }
  if (first) rv = indention + rv;
  return Value(std::move(rv));
}

Value FItems(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("items");
  if (v.is_undefined()) return Value::List({});
  if (!v.is_dict()) Raise("TypeError", "Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.AsDict().items()) out.push_back(Value::Tuple({k, val}));
  return Value::List(std::move(out));
}

Value FJoin(Interpreter& in, const Value& v, CallArgs& a) {
  const std::string sep = Str(a.Take("d", Value("")));
  Value attribute = a.Take("attribute", Value::None());
  a.Done("join");
  std::string out;
  bool first = true;
  for (const Value& item : in.Iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += Str(attribute.is_none() ? item : Attr(in, item, attribute));
    in.CheckSize(out.size());
  }
  return Value(std::move(out));
}

Value FList(Interpreter& in, const Value& v, CallArgs& a) {
  a.Done("list");
  return Value::List(in.Iterate(v));
}

Value FLower(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("lower");
  return Value(text::Lower(Str(v)));
}

Value FUpper(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("upper");
  return Value(text::Upper(Str(v)));
}

Value FTitle(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("title");
  // Jinja capitalizes each piece split at runs of "-", whitespace and opening brackets.
  const std::vector<uint32_t> cps = DecodeUtf8(Str(v));
  std::string out;
  bool word_start = true;
  for (uint32_t cp : cps) {
    const bool boundary = cp == '-' || IsPySpace(cp) || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    if (boundary) {
      AppendUtf8(cp, out);
      word_start = true;
    } else {
      AppendUtf8(word_start ? text::ToUpper(cp) : text::ToLower(cp), out);
      word_start = false;
    }
  }
  return Value(std::move(out));
}

Value MinMax(Interpreter& in, const Value& v, CallArgs& a, bool max, const char* name) {
  const bool case_sensitive = a.Take("case_sensitive", Value(false)).Truthy();
  Value attribute = a.Take("attribute", Value::None());
  a.Done(name);
  std::vector<Value> items = in.Iterate(v);
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    Value k = SortKey(attribute.is_none() ? items[i] : Attr(in, items[i], attribute), case_sensitive);
    if (i == 0 || (max ? Compare(k, best_key, ">") > 0 : Compare(k, best_key, "<") < 0)) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

Value FMax(Interpreter& in, const Value& v, CallArgs& a) { return MinMax(in, v, a, true, "max"); }
Value FMin(Interpreter& in, const Value& v, CallArgs& a) { return MinMax(in, v, a, false, "min"); }

Value FMap(Interpreter& in, const Value& v, CallArgs& a) {
  std::vector<Value> out;
  if (auto attribute = a.TakeKw("attribute")) {
    std::optional<Value> fallback = a.TakeKw("default");
    a.Done("map");
    for (const Value& item : in.Iterate(v)) {
      Value x = Attr(in, item, *attribute);
      out.push_back(x.is_undefined() && fallback ? *fallback : x);
    }
    return Value::List(std::move(out));
  }
  if (a.args.empty()) Raise("FilterArgumentError", "map requires a filter argument");
  const std::string filter = Str(a.args[0]);
  std::vector<Value> rest(a.args.begin() + 1, a.args.end());
  auto kwargs = a.kwargs;
  a.next = a.args.size();
  a.kwargs.clear();
  for (const Value& item : in.Iterate(v)) {
    in.CountIterations(1);
    CallArgs sub{rest, kwargs, 0};
    out.push_back(in.ApplyFilter(filter, item, sub));
  }
  return Value::List(std::move(out));
}

Value Select(Interpreter& in, const Value& v, CallArgs& a, bool by_attr, bool keep, const char* name) {
  Value attribute;
  if (by_attr) {
    if (a.args.empty()) Raise("FilterArgumentError", std::string(name) + " requires an attribute");
    attribute = a.args[0];
  }
  const size_t test_at = by_attr ? 1 : 0;
  std::optional<std::string> test;
  if (a.args.size() > test_at) test = Str(a.args[test_at]);
  std::vector<Value> rest;
  if (a.args.size() > test_at + 1) rest.assign(a.args.begin() + static_cast<std::ptrdiff_t>(test_at) + 1, a.args.end());
  auto kwargs = a.kwargs;
  a.next = a.args.size();
  a.kwargs.clear();
  std::vector<Value> out;
  for (const Value& item : in.Iterate(v)) {
    in.CountIterations(1);
    Value probe = by_attr ? Attr(in, item, attribute) : item;
    bool ok;
    if (test) {
      CallArgs sub{rest, kwargs, 0};
      ok = in.ApplyTest(*test, probe, sub);
    } else {
      ok = probe.Truthy();
    }
    if (ok == keep) out.push_back(item);
  }
  return Value::List(std::move(out));
}

Value FSelect(Interpreter& in, const Value& v, CallArgs& a) { return Select(in, v, a, false, true, "select"); }
Value FReject(Interpreter& in, const Value& v, CallArgs& a) { return Select(in, v, a, false, false, "reject"); }
Value FSelectattr(Interpreter& in, const Value& v, CallArgs& a) { return Select(in, v, a, true, true, "selectattr"); }
Value FRejectattr(Interpreter& in, const Value& v, CallArgs& a) { return Select(in, v, a, true, false, "rejectattr"); }

Value FReplace(Interpreter& in, const Value& v, CallArgs& a) {
  const std::string from = Str(a.Take("old"));
  const std::string to = Str(a.Take("new"));
  Value count = a.Take("count", Value::None());
  a.Done("replace");
  std::string out = text::Replace(Str(v), from, to, count.is_none() ? -1 : IntArg(count, "count"));
  in.CheckSize(out.size());
  return Value(std::move(out));
}

Value FReverse(Interpreter& in, const Value& v, CallArgs& a) {
  a.Done("reverse");
  if (v.is_string()) {
    std::vector<uint32_t> cps = DecodeUtf8(v.AsString());
    std::reverse(cps.begin(), cps.end());
    return Value(EncodeUtf8(cps, 0, cps.size()));
  }
  std::vector<Value> items = in.Iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::List(std::move(items));
}

Value FRound(Interpreter&, const Value& v, CallArgs& a) {
  const int64_t precision = IntArg(a.Take("precision", Value(int64_t{0})), "precision");
  const std::string method = Str(a.Take("method", Value("common")));
  a.Done("round");
  if (method != "common" && method != "ceil" && method != "floor") {
    Raise("FilterArgumentError", "method must be common, ceil or floor");
  }
  if (!v.is_number()) Raise("TypeError", "type " + v.TypeName() + " doesn't define __round__ method");
  if (method == "common") {
    if (!v.is_float()) return Value(v.AsInt());
    // Python's round(x, n): the correctly rounded decimal, ties to even (as printf rounds).
    char buf[400];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::clamp<int64_t>(precision, 0, 300)), v.AsFloat());
    return Value(std::strtod(buf, nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.AsFloat() * scale;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value FSafe(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("safe");
  return Value(Str(v));
}

Value FSlice(Interpreter& in, const Value& v, CallArgs& a) {
  const int64_t slices = IntArg(a.Take("slices"), "slices");
  Value fill = a.Take("fill_with", Value::None());
  a.Done("slice");
  if (slices <= 0) Raise("ValueError", "slices must be positive");
  std::vector<Value> items = in.Iterate(v);
  const int64_t n = static_cast<int64_t>(items.size());
  const int64_t per = n / slices, extra = n % slices;
  std::vector<Value> out;
  int64_t offset = 0;
  for (int64_t i = 0; i < slices; ++i) {
    const int64_t start = offset + i * per;
    if (i < extra) ++offset;
    const int64_t end = offset + (i + 1) * per;
    std::vector<Value> part(items.begin() + start, items.begin() + end);
    if (!fill.is_none() && i >= extra) part.push_back(fill);
    out.push_back(Value::List(std::move(part)));
  }
  return Value::List(std::move(out));
}

Value FSort(Interpreter& in, const Value& v, CallArgs& a) {
  const bool reverse = a.Take("reverse", Value(false)).Truthy();
  const bool case_sensitive = a.Take("case_sensitive", Value(false)).Truthy();
  Value attribute = a.Take("attribute", Value::None());
  a.Done("sort");
  std::vector<Value> items = in.Iterate(v), keys;
  in.CountIterations(static_cast<int64_t>(items.size()));
  std::vector<std::string> attrs;
  if (attribute.is_string()) attrs = text::Split(attribute.AsString(), std::string(","), -1, false);
  for (const Value& item : items) {
    if (attribute.is_none()) {
      keys.push_back(SortKey(item, case_sensitive));
    } else if (attrs.size() > 1) {
      std::vector<Value> parts;
      for (const std::string& at : attrs) parts.push_back(SortKey(Attr(in, item, Value(text::Strip(at, std::nullopt, true, true))), case_sensitive));
      keys.push_back(Value::Tuple(std::move(parts)));
    } else {
      keys.push_back(SortKey(Attr(in, item, attribute), case_sensitive));
    }
  }
  return Value::List(Sorted(std::move(items), keys, reverse));
}

Value FString(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("string");
  return Value(Str(v));
}

Value FStriptags(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("striptags");
  const std::string s = Str(v);
  std::string stripped;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 4, "<!--") == 0) {
      const size_t end = s.find("-->", i + 4);
      i = end == std::string::npos ? s.size() : end + 3;
    } else if (s[i] == '<') {
      const size_t end = s.find('>', i);
      if (end == std::string::npos) {
        stripped += s.substr(i);
        break;
      }
      i = end + 1;
    } else {
      stripped += s[i++];
    }
  }
  std::string out;
  for (const std::string& w : text::Split(stripped, std::nullopt, -1, false)) out += (out.empty() ? "" : " ") + w;
  for (auto [entity, ch] : {std::pair{"&lt;", "<"}, {"&gt;", ">"}, {"&#34;", "\""}, {"&quot;", "\""}, {"&#39;", "'"}, {"&amp;", "&"}}) {
    out = text::Replace(out, entity, ch, -1);
  }
  return Value(std::move(out));
}

Value FSum(Interpreter& in, const Value& v, CallArgs& a) {
  Value attribute = a.Take("attribute", Value::None());
  Value total = a.Take("start", Value(int64_t{0}));
  a.Done("sum");
  for (const Value& item : in.Iterate(v)) {
    total = in.BinaryOp("+", total, attribute.is_none() ? item : Attr(in, item, attribute));
  }
  return total;
}

Value FToJson(Interpreter& in, const Value& v, CallArgs& a) {
  JsonDumpOptions o;
  o.ensure_ascii = a.Take("ensure_ascii", Value(false)).Truthy();
  Value indent = a.Take("indent", Value::None());
  Value separators = a.Take("separators", Value::None());
  o.sort_keys = a.Take("sort_keys", Value(false)).Truthy();
  a.Done("tojson");
  if (!indent.is_none()) {
    o.has_indent = true;
    o.indent = indent.is_string() ? indent.AsString() : std::string(static_cast<size_t>(std::max<int64_t>(0, IntArg(indent, "indent"))), ' ');
  }
  if (!separators.is_none()) {
    if (!separators.is_sequence() || separators.AsList().size() != 2) {
      Raise("ValueError", "separators must be an (item_separator, key_separator) pair");
    }
    o.custom_separators = true;
    o.item_sep = Str(separators.AsList()[0]);
    o.key_sep = Str(separators.AsList()[1]);
  }
  std::string out = DumpJson(v, o);
  in.CheckSize(out.size());
  return Value(std::move(out));
}

Value FTrim(Interpreter&, const Value& v, CallArgs& a) {
  std::optional<std::string> chars = OptStr(a.Take("chars", Value::None()));
  a.Done("trim");
  return Value(text::Strip(Str(v), chars, true, true));
}

Value FTruncate(Interpreter&, const Value& v, CallArgs& a) {
  const int64_t length = IntArg(a.Take("length", Value(int64_t{255})), "length");
  const bool killwords = a.Take("killwords", Value(false)).Truthy();
  const std::string end = Str(a.Take("end", Value("...")));
  Value leeway_v = a.Take("leeway", Value::None());
  a.Done("truncate");
  const int64_t leeway = leeway_v.is_none() ? 5 : IntArg(leeway_v, "leeway");
  const std::vector<uint32_t> cps = DecodeUtf8(Str(v));
  const int64_t end_len = static_cast<int64_t>(Utf8Length(end));
  if (length < end_len) Raise("AssertionError", "expected length >= " + std::to_string(end_len));
  if (static_cast<int64_t>(cps.size()) <= length + leeway) return Value(Str(v));
  std::string head = EncodeUtf8(cps, 0, static_cast<size_t>(length - end_len));
  if (killwords) return Value(head + end);
  const size_t space = head.rfind(' ');
  if (space != std::string::npos) head.resize(space);
  return Value(head + end);
}

Value FUnique(Interpreter& in, const Value& v, CallArgs& a) {
  const bool case_sensitive = a.Take("case_sensitive", Value(false)).Truthy();
  Value attribute = a.Take("attribute", Value::None());
  a.Done("unique");
  std::vector<Value> out, seen;
  for (const Value& item : in.Iterate(v)) {
    Value k = SortKey(attribute.is_none() ? item : Attr(in, item, attribute), case_sensitive);
    bool dup = false;
    for (const Value& s : seen) dup = dup || Equals(s, k);
    in.CountIterations(static_cast<int64_t>(seen.size()));
    if (dup) continue;
    seen.push_back(k);
    out.push_back(item);
  }
  return Value::List(std::move(out));
}

std::string UrlQuote(const std::string& s, bool plus_safe_slash) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~' || (plus_safe_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

Value FUrlencode(Interpreter& in, const Value& v, CallArgs& a) {
  a.Done("urlencode");
  if (v.is_string()) return Value(UrlQuote(v.AsString(), true));
  std::string out;
  auto add = [&](const Value& k, const Value& val) {
    // Query strings write spaces as '+', as Jinja's url_quote(for_qs=True) does.
    out += (out.empty() ? "" : "&") + text::Replace(UrlQuote(Str(k), false), "%20", "+", -1) + "=" +
           text::Replace(UrlQuote(Str(val), false), "%20", "+", -1);
  };
  if (v.is_dict()) {
    for (const auto& [k, val] : v.AsDict().items()) add(k, val);
  } else {
    for (const Value& pair : in.Iterate(v)) {
      std::vector<Value> kv = in.Iterate(pair);
      if (kv.size() != 2) Raise("ValueError", "urlencode expects pairs");
      add(kv[0], kv[1]);
    }
  }
  return Value(std::move(out));
}

Value FWordcount(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("wordcount");
  int64_t n = 0;
  bool in_word = false;
  for (uint32_t cp : DecodeUtf8(Str(v))) {
    const bool w = text::IsWordChar(cp);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value FXmlattr(Interpreter&, const Value& v, CallArgs& a) {
  const bool autospace = a.Take("autospace", Value(true)).Truthy();
  a.Done("xmlattr");
  if (!v.is_dict()) Raise("TypeError", "xmlattr expects a mapping");
  std::string out;
  for (const auto& [k, val] : v.AsDict().items()) {
    if (val.is_none() || val.is_undefined()) continue;
    out += (out.empty() ? "" : " ") + HtmlEscape(Str(k)) + "=\"" + HtmlEscape(Str(val)) + "\"";
  }
  if (autospace && !out.empty()) out = " " + out;
  return Value(std::move(out));
}

Value FFilesizeformat(Interpreter&, const Value& v, CallArgs& a) {
  const bool binary = a.Take("binary", Value(false)).Truthy();
  a.Done("filesizeformat");
  const double bytes = v.is_number() ? v.AsFloat() : 0.0;
  const double base = binary ? 1024 : 1000;
  static const char* const kDecimal[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
  static const char* const kBinary[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  if (bytes == 1) return Value("1 Byte");
  if (bytes < base) return Value(std::to_string(static_cast<int64_t>(bytes)) + " Bytes");
  char buf[64];
  for (int i = 0; i < 8; ++i) {
    const double unit = std::pow(base, i + 2);
    if (bytes < unit || i == 7) {
      std::snprintf(buf, sizeof(buf), "%.1f %s", base * bytes / unit, binary ? kBinary[i] : kDecimal[i]);
      break;
    }
  }
  return Value(std::string(buf));
}

Value FPprint(Interpreter&, const Value& v, CallArgs& a) {
  a.Done("pprint");
  return Value(Repr(v));
}

const std::map<std::string, FilterFn>& Filters() {
  static const std::map<std::string, FilterFn> kFilters = {
      {"abs", FAbs},         {"attr", FAttr},           {"batch", FBatch},
      {"capitalize", FCapitalize}, {"center", FCenter}, {"count", FLength},
      {"d", FDefault},       {"default", FDefault},     {"dictsort", FDictsort},
      {"e", FEscape},        {"escape", FEscape},       {"filesizeformat", FFilesizeformat},
      {"first", FFirst},     {"float", FFloat},         {"forceescape", FEscape},
      {"format", FFormat},   {"groupby", FGroupby},     {"indent", FIndent},
      {"int", FInt},         {"items", FItems},         {"join", FJoin},
      {"last", FLast},       {"length", FLength},       {"list", FList},
      {"lower", FLower},     {"map", FMap},             {"max", FMax},
      {"min", FMin},         {"pprint", FPprint},       {"reject", FReject},
      {"rejectattr", FRejectattr}, {"replace", FReplace}, {"reverse", FReverse},
      {"round", FRound},     {"safe", FSafe},           {"select", FSelect},
      {"selectattr", FSelectattr}, {"slice", FSlice},   {"sort", FSort},
      {"string", FString},   {"striptags", FStriptags}, {"sum", FSum},
      {"title", FTitle},     {"tojson", FToJson},       {"trim", FTrim},
      {"truncate", FTruncate}, {"unique", FUnique},     {"upper", FUpper},
      {"urlencode", FUrlencode}, {"wordcount", FWordcount}, {"xmlattr", FXmlattr},
  };
  return kFilters;
}

}  // namespace

FilterFn FindFilter(const std::string& name) {
  auto it = Filters().find(name);
  return it == Filters().end() ? nullptr : it->second;
}

}  // namespace ferry::jinja
