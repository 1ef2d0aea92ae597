// The Python methods templates call on values: str (strip, split, startswith, format, ...),
// dict (items, keys, values, get) and list/tuple (index, count). Mutating methods exist, as
// attributes, but calling them is a SecurityError: transformers renders with Jinja's
// ImmutableSandboxedEnvironment.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "template/interpreter.h"
#include "template/objects.h"
#include "template/text.h"

namespace ferry::jinja {

namespace {

const std::set<std::string>& StrMethods() {
  static const std::set<std::string> k = {
      "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
      "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier",
      "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower",
      "lstrip", "maketrans", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex",
      "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase",
      "title", "translate", "upper", "zfill"};
  return k;
}
const std::set<std::string>& DictMethods() {
  static const std::set<std::string> k = {"clear", "copy", "fromkeys", "get", "items", "keys",
                                          "pop", "popitem", "setdefault", "update", "values"};
  return k;
}
const std::set<std::string>& ListMethods() {
  static const std::set<std::string> k = {"append", "clear", "copy", "count", "extend", "index",
                                          "insert", "pop", "remove", "reverse", "sort"};
  return k;
}
bool Mutating(const std::string& name) {
  static const std::set<std::string> k = {"append", "clear",  "extend",     "insert", "pop",    "popitem",
                                          "remove", "reverse", "setdefault", "sort",   "update"};
  return k.count(name) != 0;
}

int64_t Int(const Value& v, const char* what) {
  if (v.is_int() || v.is_bool()) return v.AsInt();
  if (v.is_undefined()) RaiseUndefined(v);
  Raise("TypeError", std::string(what) + " must be an integer, not " + v.TypeName());
}

std::optional<std::string> OptStr(const Value& v, const char* what) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  if (!v.is_string()) Raise("TypeError", std::string(what) + " must be None or str, not " + v.TypeName());
  return v.AsString();
}

const std::string& NeedStr(const Value& v, const std::string& what) {
  if (v.is_undefined()) RaiseUndefined(v);
  if (!v.is_string()) Raise("TypeError", what + " must be str, not " + v.TypeName());
  return v.AsString();
}

// Python's [start:end] bounds in code points for find/count/startswith.
std::pair<size_t, size_t> Range(const std::vector<uint32_t>& cps, const Value& start, const Value& end) {
  const int64_t n = static_cast<int64_t>(cps.size());
  auto fix = [n](const Value& v, int64_t dflt) {
    if (v.is_undefined() || v.is_none()) return dflt;
    int64_t x = Int(v, "slice index");
    if (x < 0) x += n;
    return std::clamp<int64_t>(x, 0, n);
  };
  return {static_cast<size_t>(fix(start, 0)), static_cast<size_t>(fix(end, n))};
}

int64_t Find(const std::string& s, const std::string& sub, const Value& start, const Value& end, bool right) {
  const std::vector<uint32_t> cps = DecodeUtf8(s), subs = DecodeUtf8(sub);
  auto [b, e] = Range(cps, start, end);
  if (e < b || subs.size() > e - b) return -1;
  const size_t last = e - subs.size();
  for (size_t k = 0; k <= last - b; ++k) {
    const size_t i = right ? last - k : b + k;
    if (std::equal(subs.begin(), subs.end(), cps.begin() + static_cast<std::ptrdiff_t>(i))) return static_cast<int64_t>(i);
  }
  return -1;
}

bool AffixMatch(const std::string& s, const Value& affix, const Value& start, const Value& end, bool prefix) {
  const std::vector<uint32_t> cps = DecodeUtf8(s);
  auto [b, e] = Range(cps, start, end);
  std::vector<Value> options = affix.is_tuple() ? affix.AsList() : std::vector<Value>{affix};
  for (const Value& o : options) {
    const std::vector<uint32_t> a = DecodeUtf8(NeedStr(o, prefix ? "startswith argument" : "endswith argument"));
    if (e < b || a.size() > e - b) continue;
    const size_t at = prefix ? b : e - a.size();
    if (std::equal(a.begin(), a.end(), cps.begin() + static_cast<std::ptrdiff_t>(at))) return true;
  }
  return false;
}

template <typename P>
bool AllChars(const std::string& s, P pred) {
  const std::vector<uint32_t> cps = DecodeUtf8(s);
  if (cps.empty()) return false;
  for (uint32_t cp : cps) {
    if (!pred(cp)) return false;
  }
  return true;
}

// ---- str.format ----------------------------------------------------------------------

std::string GroupThousands(std::string digits) {
  std::string out;
  int n = 0;
  for (size_t i = digits.size(); i > 0; --i) {
    out.insert(out.begin(), digits[i - 1]);
    if (++n % 3 == 0 && i > 1) out.insert(out.begin(), ',');
  }
  return out;
}

std::string FormatSpec(const Value& v, const std::string& spec) {
  // [[fill]align][sign][#][0][width][,][.precision][type]
  size_t i = 0;
  std::string fill = " ";
  char align = 0;
  const std::vector<uint32_t> cps = DecodeUtf8(spec);
  auto at = [&](size_t k) -> uint32_t { return k < cps.size() ? cps[k] : 0; };
  auto is_align = [](uint32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (cps.size() >= 2 && is_align(at(1))) {
    fill.clear();
    AppendUtf8(at(0), fill);
    align = static_cast<char>(at(1));
    i = 2;
  } else if (is_align(at(0))) {
    align = static_cast<char>(at(0));
    i = 1;
  }
  char sign = '-';
  if (at(i) == '+' || at(i) == '-' || at(i) == ' ') sign = static_cast<char>(at(i++));
  if (at(i) == '#') ++i;
  if (at(i) == '0') {
    if (align == 0) {
      fill = "0";
      align = '=';
    }
    ++i;
  }
  int64_t width = 0;
  while (at(i) >= '0' && at(i) <= '9') width = std::min<int64_t>(width * 10 + (at(i++) - '0'), 100000);
  const bool grouping = at(i) == ',' ? (++i, true) : false;
  int precision = -1;
  if (at(i) == '.') {
    ++i;
    precision = 0;
    while (at(i) >= '0' && at(i) <= '9') precision = std::min(precision * 10 + static_cast<int>(at(i++) - '0'), 300);
  }
  const char type = i < cps.size() ? static_cast<char>(at(i++)) : 0;
  if (i != cps.size()) Raise("ValueError", "Invalid format specifier '" + spec + "'");
  std::string body, prefix;
  const bool numeric = v.is_number();
  if (!numeric || type == 's') {
    if (type != 0 && type != 's') {
      Raise("ValueError", std::string("Unknown format code '") + type + "' for object of type '" + v.TypeName() + "'");
    }
    body = Str(v);
    if (precision >= 0) body = EncodeUtf8(DecodeUtf8(body), 0, static_cast<size_t>(precision));
    if (align == 0) align = '<';
  } else {
    if (align == 0) align = '>';
    const bool as_int = (type == 0 && !v.is_float()) || type == 'd' || type == 'x' || type == 'X' || type == 'o' ||
                        type == 'b' || type == 'c';
    char buf[400];
    if (as_int) {
      if (v.is_float()) Raise("ValueError", std::string("Unknown format code '") + type + "' for object of type 'float'");
      const int64_t x = v.AsInt();
      const uint64_t mag = x < 0 ? static_cast<uint64_t>(-(x + 1)) + 1 : static_cast<uint64_t>(x);
      if (type == 'x' || type == 'X' || type == 'o') {
        std::snprintf(buf, sizeof(buf), type == 'x' ? "%llx" : type == 'X' ? "%llX" : "%llo",
                      static_cast<unsigned long long>(mag));
        body = buf;
      } else if (type == 'b') {
        for (uint64_t m = mag; m > 0 || body.empty(); m >>= 1) body.insert(body.begin(), static_cast<char>('0' + (m & 1)));
      } else if (type == 'c') {
        AppendUtf8(static_cast<uint32_t>(x), body);
      } else {
        body = std::to_string(mag);
        if (grouping) body = GroupThousands(body);
      }
      if (x < 0) prefix = "-";
    } else {
      const double x = v.AsFloat();
      const double mag = std::fabs(x);
      const char t = type == 0 ? 'g' : type;
      if (type == 0 && precision < 0) {
        body = FormatFloat(mag);
      } else if (t == '%') {
        std::snprintf(buf, sizeof(buf), "%.*f%%", precision < 0 ? 6 : precision, mag * 100);
        body = buf;
      } else if (std::string_view("fFeEgG").find(t) != std::string_view::npos) {
        const std::string f = std::string("%.*") + t;
        std::snprintf(buf, sizeof(buf), f.c_str(), precision < 0 ? 6 : precision, mag);
        body = buf;
      } else {
        Raise("ValueError", std::string("Unknown format code '") + t + "' for object of type 'float'");
      }
      if (grouping) {
        const size_t dot = body.find_first_not_of("0123456789");
        body = GroupThousands(body.substr(0, dot)) + (dot == std::string::npos ? "" : body.substr(dot));
      }
      if (std::signbit(x) && !(x == 0 && !std::signbit(x))) prefix = "-";
    }
    if (prefix.empty() && sign == '+') prefix = "+";
    if (prefix.empty() && sign == ' ') prefix = " ";
  }
  const int64_t len = static_cast<int64_t>(Utf8Length(prefix) + Utf8Length(body));
  if (width <= len) return prefix + body;
  std::string pad;
  for (int64_t k = 0; k < width - len; ++k) pad += fill;
  if (align == '=') return prefix + pad + body;
  return text::Pad(prefix + body, width, fill, align);
}

std::string StrFormat(Interpreter& in, const std::string& fmt, CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      Raise("ValueError", "Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) Raise("ValueError", "Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    std::string spec, conv;
    if (const size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      conv = field.substr(bang + 1);
      field.resize(bang);
    }
    size_t name_end = field.find_first_of(".[");
    const std::string head = field.substr(0, name_end);
    Value v;
    if (head.empty()) {
      if (auto_index >= a.args.size()) Raise("IndexError", "Replacement index " + std::to_string(auto_index) + " out of range for positional args tuple");
      v = a.args[auto_index++];
    } else if (head.find_first_not_of("0123456789") == std::string::npos) {
      const size_t k = std::stoul(head);
      if (k >= a.args.size()) Raise("IndexError", "Replacement index " + head + " out of range for positional args tuple");
      v = a.args[k];
    } else {
      bool found = false;
      for (const auto& [name, val] : a.kwargs) {
        if (name == head) {
          v = val;
          found = true;
        }
      }
      if (!found) Raise("KeyError", ReprString(head));
    }
    while (name_end != std::string::npos && name_end < field.size()) {
      if (field[name_end] == '.') {
        const size_t next = field.find_first_of(".[", name_end + 1);
        v = in.GetAttr(v, field.substr(name_end + 1, next == std::string::npos ? std::string::npos : next - name_end - 1));
        name_end = next;
      } else {
        const size_t rb = field.find(']', name_end);
        if (rb == std::string::npos) Raise("ValueError", "Missing ']' in format string");
        const std::string key = field.substr(name_end + 1, rb - name_end - 1);
        const bool digits = !key.empty() && key.find_first_not_of("0123456789") == std::string::npos;
        v = in.GetItem(v, digits ? Value(static_cast<int64_t>(std::stoll(key))) : Value(key));
        name_end = rb + 1 < field.size() ? rb + 1 : std::string::npos;
      }
    }
    if (v.is_undefined()) RaiseUndefined(v);
    if (conv == "r" || conv == "a") {
      v = Value(Repr(v));
    } else if (conv == "s") {
      v = Value(Str(v));
    } else if (!conv.empty()) {
      Raise("ValueError", "Unknown conversion specifier " + conv);
    }
    out += FormatSpec(v, spec);
    in.CheckSize(out.size());
  }
  a.next = a.args.size();
  a.kwargs.clear();
  return out;
}

Value StrMethod(Interpreter& in, const std::string& s, const std::string& name, CallArgs& a) {
  auto done = [&] { a.Done("str." + name); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    std::optional<std::string> chars = OptStr(a.Take("chars", Value::None()), "chars");
    done();
    return Value(text::Strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    std::optional<std::string> sep = OptStr(a.Take("sep", Value::None()), "sep");
    const int64_t maxsplit = Int(a.Take("maxsplit", Value(int64_t{-1})), "maxsplit");
    done();
    std::vector<Value> parts;
    for (std::string& p : text::Split(s, sep, maxsplit, name == "rsplit")) parts.emplace_back(std::move(p));
    return Value::List(std::move(parts));
  }
  if (name == "splitlines") {
    const bool keepends = a.Take("keepends", Value(false)).Truthy();
    done();
    std::vector<Value> parts;
    for (std::string& p : text::SplitLines(s, keepends)) parts.emplace_back(std::move(p));
    return Value::List(std::move(parts));
  }
  if (name == "startswith" || name == "endswith") {
    Value affix = a.Take("prefix");
    Value start = a.Take("start", Value::None()), end = a.Take("end", Value::None());
    done();
    return Value(AffixMatch(s, affix, start, end, name == "startswith"));
  }
  if (name == "lower" || name == "casefold") return done(), Value(text::Lower(s));
  if (name == "upper") return done(), Value(text::Upper(s));
  if (name == "title") return done(), Value(text::Title(s));
  if (name == "capitalize") return done(), Value(text::Capitalize(s));
  if (name == "swapcase") return done(), Value(text::SwapCase(s));
  if (name == "replace") {
    const std::string from = NeedStr(a.Take("old"), "replace() argument 1");
    const std::string to = NeedStr(a.Take("new"), "replace() argument 2");
    const int64_t count = Int(a.Take("count", Value(int64_t{-1})), "count");
    done();
    std::string out = text::Replace(s, from, to, count);
    in.CheckSize(out.size());
    return Value(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    const std::string sub = NeedStr(a.Take("sub"), name + "() argument");
    Value start = a.Take("start", Value::None()), end = a.Take("end", Value::None());
    done();
    const int64_t at = Find(s, sub, start, end, name[0] == 'r');
    if (at < 0 && (name == "index" || name == "rindex")) Raise("ValueError", "substring not found");
    return Value(at);
  }
  if (name == "count") {
    const std::string sub = NeedStr(a.Take("sub"), "count() argument");
    done();
    if (sub.empty()) return Value(static_cast<int64_t>(Utf8Length(s)) + 1);
    int64_t n = 0;
    for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    Value items = a.Take("iterable");
    done();
    std::string out;
    size_t i = 0;
    for (const Value& item : in.Iterate(items)) {
      if (!item.is_string()) {
        Raise("TypeError", "sequence item " + std::to_string(i) + ": expected str instance, " + item.TypeName() + " found");
      }
      if (i++ > 0) out += s;
      out += item.AsString();
      in.CheckSize(out.size());
    }
    return Value(std::move(out));
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    const int64_t width = Int(a.Take("width"), "width");
    const std::string fill = NeedStr(a.Take("fillchar", Value(" ")), "fillchar");
    done();
    if (Utf8Length(fill) != 1) Raise("TypeError", "The fill character must be exactly one character long");
    in.CheckSize(static_cast<size_t>(std::max<int64_t>(width, 0)));
    return Value(text::Pad(s, width, fill, name == "center" ? '^' : name == "ljust" ? '<' : '>'));
  }
  if (name == "zfill") {
    const int64_t width = Int(a.Take("width"), "width");
    done();
    in.CheckSize(static_cast<size_t>(std::max<int64_t>(width, 0)));
    const int64_t len = static_cast<int64_t>(Utf8Length(s));
    if (width <= len) return Value(s);
    const bool signed_ = !s.empty() && (s[0] == '-' || s[0] == '+');
    return Value((signed_ ? s.substr(0, 1) : "") + std::string(static_cast<size_t>(width - len), '0') +
                 (signed_ ? s.substr(1) : s));
  }
  if (name == "partition" || name == "rpartition") {
    const std::string sep = NeedStr(a.Take("sep"), "sep");
    done();
    if (sep.empty()) Raise("ValueError", "empty separator");
    const size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (at == std::string::npos) {
      return name == "partition" ? Value::Tuple({Value(s), Value(""), Value("")})
                                 : Value::Tuple({Value(""), Value(""), Value(s)});
    }
    return Value::Tuple({Value(s.substr(0, at)), Value(sep), Value(s.substr(at + sep.size()))});
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string affix = NeedStr(a.Take("prefix"), name + "() argument");
    done();
    if (name == "removeprefix") return Value(s.rfind(affix, 0) == 0 ? s.substr(affix.size()) : s);
    const bool ends = s.size() >= affix.size() && s.compare(s.size() - affix.size(), affix.size(), affix) == 0;
    return Value(ends && !affix.empty() ? s.substr(0, s.size() - affix.size()) : s);
  }
  if (name == "expandtabs") {
    const int64_t tab = Int(a.Take("tabsize", Value(int64_t{8})), "tabsize");
    done();
    std::string out;
    int64_t col = 0;
    for (uint32_t cp : DecodeUtf8(s)) {
      if (cp == '\t') {
        const int64_t n = tab > 0 ? tab - col % tab : 0;
        out.append(static_cast<size_t>(n), ' ');
        col += n;
      } else {
        AppendUtf8(cp, out);
        col = cp == '\n' || cp == '\r' ? 0 : col + 1;
      }
    }
    return Value(std::move(out));
  }
  if (name == "format") return Value(StrFormat(in, s, a));
  done();
  if (name == "isalpha") return Value(AllChars(s, text::IsAlpha));
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") return Value(AllChars(s, text::IsDigit));
  if (name == "isalnum") return Value(AllChars(s, [](uint32_t c) { return text::IsAlpha(c) || text::IsDigit(c); }));
  if (name == "isspace") return Value(AllChars(s, IsPySpace));
  if (name == "isascii") return Value(AllChars(s, [](uint32_t c) { return c < 0x80; }) || s.empty());
  if (name == "islower") return Value(text::Lower(s) == s && text::Upper(s) != s);
  if (name == "isupper") return Value(text::Upper(s) == s && text::Lower(s) != s);
  if (name == "istitle") return Value(text::Title(s) == s && text::Lower(s) != text::Upper(s));
  if (name == "isidentifier") {
    return Value(AllChars(s, text::IsWordChar) && !(s[0] >= '0' && s[0] <= '9'));
  }
  if (name == "isprintable") return Value(Repr(Value(s)).find('\\') == std::string::npos);
  Raise("TypeError", "str." + name + "() is not supported in templates");
}

Value DictMethod(const Value& self, const std::string& name, CallArgs& a) {
  const DictData& d = self.AsDict();
  if (name == "get") {
    Value key = a.Take("key");
    Value fallback = a.Take("default", Value::None());
    a.Done("dict.get");
    const Value* v = d.Find(key);
    return v != nullptr ? *v : fallback;
  }
  a.Done("dict." + name);
  if (name == "items") {
    std::vector<Value> out;
    for (const auto& [k, v] : d.items()) out.push_back(Value::Tuple({k, v}));
    return Value::List(std::move(out));
  }
  if (name == "keys" || name == "values") {
    std::vector<Value> out;
    for (const auto& [k, v] : d.items()) out.push_back(name == "keys" ? k : v);
    return Value::List(std::move(out));
  }
  if (name == "copy") return self;
  Raise("TypeError", "dict." + name + "() is not supported in templates");
}

Value ListMethod(const Value& self, const std::string& name, CallArgs& a) {
  const std::vector<Value>& items = self.AsList();
  if (name == "index" || name == "count") {
    Value x = a.Take("value");
    a.Done(self.TypeName() + "." + name);
    int64_t n = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!Equals(items[i], x)) continue;
      if (name == "index") return Value(static_cast<int64_t>(i));
      ++n;
    }
    if (name == "index") Raise("ValueError", Repr(x) + " is not in " + self.TypeName());
    return Value(n);
  }
  a.Done(self.TypeName() + "." + name);
  if (name == "copy") return self;
  Raise("TypeError", self.TypeName() + "." + name + "() is not supported in templates");
}

}  // namespace

std::optional<Value> FindMethod(const Value& self, const std::string& name) {
  bool found = false;
  if (self.is_string()) found = StrMethods().count(name) != 0;
  if (self.is_dict()) found = DictMethods().count(name) != 0;
  if (self.is_list()) found = ListMethods().count(name) != 0;
  if (self.is_tuple()) found = name == "index" || name == "count";
  if (!found) return std::nullopt;
  return Value::Function(std::make_shared<MethodFn>(self, name));
}

Value CallMethod(Interpreter& in, const Value& self, const std::string& name, CallArgs& args) {
  if (Mutating(name) && (self.is_dict() || self.is_list())) {
    Raise("SecurityError", "access to attribute '" + name + "' of '" + self.TypeName() + "' object is unsafe.");
  }
  if (self.is_string()) return StrMethod(in, self.AsString(), name, args);
  if (self.is_dict()) return DictMethod(self, name, args);
  return ListMethod(self, name, args);
}

}  // namespace ferry::jinja
