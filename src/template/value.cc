#include "template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace ferry::jinja {

void Raise(std::string kind, std::string message) { throw RenderError{std::move(kind), std::move(message)}; }

void RaiseUndefined(const Value& v) { Raise(v.undefined_kind(), v.undefined_hint()); }

// ---- DictData ------------------------------------------------------------------------

const Value* DictData::Find(std::string_view key) const {
  auto it = by_string_.find(std::string(key));
  return it == by_string_.end() ? nullptr : &items_[it->second].second;
}

const Value* DictData::Find(const Value& key) const {
  if (key.is_string()) return Find(std::string_view(key.AsString()));
  for (const auto& [k, v] : items_) {
    if (!k.is_string() && Equals(k, key)) return &v;
  }
  return nullptr;
}

void DictData::Set(Value key, Value value) {
  if (key.is_string()) {
    auto [it, inserted] = by_string_.emplace(key.AsString(), items_.size());
    if (!inserted) {
      items_[it->second].second = std::move(value);
      return;
    }
    items_.emplace_back(std::move(key), std::move(value));
    return;
  }
  for (auto& [k, v] : items_) {
    if (!k.is_string() && Equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items_.emplace_back(std::move(key), std::move(value));
}

// ---- Object --------------------------------------------------------------------------

Value Object::GetAttr(const std::string& name) const {
  return Value::Undefined("'" + TypeName() + " object' has no attribute '" + name + "'");
}

bool Object::SetAttr(const std::string&, Value) { return false; }

std::string Object::Repr() const { return "<" + TypeName() + " object>"; }

Value Object::Call(Interpreter&, CallArgs&) { Raise("TypeError", "'" + TypeName() + "' object is not callable"); }

// ---- Value ---------------------------------------------------------------------------

// An undefined value keeps its error as "Kind\x1fmessage" (the kind only when not UndefinedError).
Value Value::Undefined(std::string hint, std::string_view kind) {
  Value v;
  v.data_ = std::make_shared<const std::string>(kind.empty() ? std::move(hint) : std::string(kind) + '\x1f' + hint);
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::List(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  v.data_ = std::make_shared<const ListData>(ListData{std::move(items)});
  return v;
}

Value Value::Tuple(std::vector<Value> items) {
  Value v = List(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}

void Value::MoveOutSoleItems(std::vector<Value>& pending) {
  if (auto* list = std::get_if<std::shared_ptr<const ListData>>(&data_); list != nullptr && list->use_count() == 1) {
    auto& items = const_cast<ListData&>(**list).items;  // sole owner: nobody else can see it
    for (Value& item : items) pending.push_back(std::move(item));
    items.clear();
  } else if (auto* dict = std::get_if<std::shared_ptr<const DictData>>(&data_);
             dict != nullptr && dict->use_count() == 1) {
    auto& d = const_cast<DictData&>(**dict);
    for (auto& [key, value] : d.items_) {
      pending.push_back(std::move(key));
      pending.push_back(std::move(value));
    }
    d.items_.clear();
    d.by_string_.clear();
  }
}

void Value::ReleaseNested(std::vector<Value>& items) {
  if (items.empty()) return;
  std::vector<Value> pending = std::move(items);
  items.clear();
  while (!pending.empty()) {
    Value v = std::move(pending.back());
    pending.pop_back();
    v.MoveOutSoleItems(pending);
    // v's list or dict, if it dies here, is empty by now: its destructor does not recurse.
  }
}

DictData::~DictData() {
  std::vector<Value> values;
  values.reserve(2 * items_.size());
  for (auto& [key, value] : items_) {
    values.push_back(std::move(key));
    values.push_back(std::move(value));
  }
  Value::ReleaseNested(values);
}

Value Value::Dict(DictData dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.data_ = std::make_shared<const DictData>(std::move(dict));
  return v;
}

Value Value::Object(std::shared_ptr<jinja::Object> object) {
  Value v;
  v.kind_ = Kind::kObject;
  v.data_ = std::move(object);
  return v;
}

Value Value::Function(std::shared_ptr<Callable> fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.data_ = std::move(fn);
  return v;
}

int64_t Value::AsInt() const { return kind_ == Kind::kBool ? (AsBool() ? 1 : 0) : std::get<int64_t>(data_); }

double Value::AsFloat() const {
  if (kind_ == Kind::kFloat) return std::get<double>(data_);
  return static_cast<double>(AsInt());
}

const std::vector<Value>& Value::AsList() const { return std::get<std::shared_ptr<const ListData>>(data_)->items; }

std::string Value::undefined_hint() const {
  const auto* hint = std::get_if<std::shared_ptr<const std::string>>(&data_);
  if (kind_ != Kind::kUndefined || hint == nullptr || *hint == nullptr || (*hint)->empty()) return "value is undefined";
  const size_t sep = (*hint)->find('\x1f');
  return sep == std::string::npos ? **hint : (*hint)->substr(sep + 1);
}

std::string Value::undefined_kind() const {
  const auto* hint = std::get_if<std::shared_ptr<const std::string>>(&data_);
  if (hint == nullptr || *hint == nullptr) return "UndefinedError";
  const size_t sep = (*hint)->find('\x1f');
  return sep == std::string::npos ? "UndefinedError" : (*hint)->substr(0, sep);
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return AsBool();
    case Kind::kInt: return AsInt() != 0;
    case Kind::kFloat: return AsFloat() != 0.0;
    case Kind::kString: return !AsString().empty();
    case Kind::kList:
    case Kind::kTuple: return !AsList().empty();
    case Kind::kDict: return !AsDict().empty();
    case Kind::kObject:
    case Kind::kCallable: return true;
  }
  return false;
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return "dict";
    case Kind::kObject: return AsObject()->TypeName();
    case Kind::kCallable: return "function";
  }
  return "object";
}

// ---- UTF-8 ---------------------------------------------------------------------------

std::vector<uint32_t> DecodeUtf8(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) {  // invalid byte: keep it as U+FFFD
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = true;
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string EncodeUtf8(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end && i < cps.size(); ++i) AppendUtf8(cps[i], out);
  return out;
}

size_t Utf8Length(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool IsPySpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

namespace {

// Python's str.isprintable() for one code point: not in the categories Other (Cc, Cf, Cs,
// Co, Cn) or Separator (Zs, Zl, Zp) except the ASCII space. Unassigned code points are
// approximated by the noncharacters.
bool IsPrintable(uint32_t cp) {
  if (cp == 0x20) return true;
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
  if (IsPySpace(cp)) return false;
  if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F || cp == 0x180E) return false;
  if ((cp >= 0x200B && cp <= 0x200F) || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2060 && cp <= 0x206F)) return false;
  if (cp >= 0xD800 && cp <= 0xF8FF) return false;  // surrogates and private use
  if (cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB) || (cp & 0xFFFE) == 0xFFFE) return false;
  if (cp >= 0xFDD0 && cp <= 0xFDEF) return false;
  if (cp >= 0xE0000) return false;  // tags, variation selectors supplement's neighbours, private use planes
  return true;
}

std::string Hex(uint32_t v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%0*x", digits, v);
  return buf;
}

std::string ReprSequence(const std::vector<Value>& items, char open, char close, bool tuple) {
  std::string out(1, open);
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += Repr(items[i]);
  }
  if (tuple && items.size() == 1) out += ',';
  out += close;
  return out;
}

int CompareNumbers(const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float()) {
    const int64_t x = a.AsInt(), y = b.AsInt();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  const double x = a.AsFloat(), y = b.AsFloat();
  if (x < y) return -1;
  if (x > y) return 1;
  return 0;  // NaN compares as unordered; Python's < and > are false for it too
}

}  // namespace

NestingGuard::NestingGuard() {
  if (++depth_ > kMaxNesting) {
    --depth_;
    Raise("RecursionError", "maximum recursion depth exceeded while handling a nested value");
  }
}

std::string ReprString(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (uint32_t cp : DecodeUtf8(s)) {
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!IsPrintable(cp)) {
      if (cp < 0x100) {
        out += "\\x" + Hex(cp, 2);
      } else if (cp < 0x10000) {
        out += "\\u" + Hex(cp, 4);
      } else {
        out += "\\U" + Hex(cp, 8);
      }
    } else {
      AppendUtf8(cp, out);
    }
  }
  out += quote;
  return out;
}

std::string FormatFloat(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci: [-]d[.ddd]e[+-]XX
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp10 = std::stoi(sci.substr(e + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decpt = exp10 + 1;  // digits d1 d2 ... with the point after decpt of them
  const int n = static_cast<int>(digits.size());
  std::string out;
  if (decpt <= -4 || decpt > 16) {
    out = digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    out += eb;
  } else if (decpt <= 0) {
    out = "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  } else if (decpt >= n) {
    out = digits + std::string(static_cast<size_t>(decpt - n), '0') + ".0";
  } else {
    out = digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
  }
  return sign + out;
}

std::string Str(const Value& v) {
  NestingGuard guard;
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.AsBool() ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.AsInt());
    case Value::Kind::kFloat: return FormatFloat(v.AsFloat());
    case Value::Kind::kString: return v.AsString();
    case Value::Kind::kList: return ReprSequence(v.AsList(), '[', ']', false);
    case Value::Kind::kTuple: return ReprSequence(v.AsList(), '(', ')', true);
    case Value::Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, val] : v.AsDict().items()) {
        if (!first) out += ", ";
        first = false;
        out += Repr(k) + ": " + Repr(val);
      }
      return out + "}";
    }
    case Value::Kind::kObject: return v.AsObject()->Repr();
    case Value::Kind::kCallable: return "<function " + v.AsCallable()->Name() + ">";
  }
  return "";
}

std::string Repr(const Value& v) {
  if (v.is_string()) return ReprString(v.AsString());
  if (v.is_undefined()) return "Undefined";
  return Str(v);
}

bool Equals(const Value& a, const Value& b) {
  NestingGuard guard;
  if (a.is_number() && b.is_number()) return CompareNumbers(a, b) == 0 && !(a.is_float() && std::isnan(a.AsFloat()));
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.AsString() == b.AsString();
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      const auto& x = a.AsList();
      const auto& y = b.AsList();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!Equals(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const DictData& x = a.AsDict();
      const DictData& y = b.AsDict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, val] : x.items()) {
        const Value* other = y.Find(k);
        if (other == nullptr || !Equals(val, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kObject: return a.AsObject() == b.AsObject();
    case Value::Kind::kCallable: return a.AsCallable() == b.AsCallable();
    default: return false;
  }
}

int Compare(const Value& a, const Value& b, std::string_view op) {
  NestingGuard guard;
  if (a.is_undefined()) RaiseUndefined(a);
  if (b.is_undefined()) RaiseUndefined(b);
  if (a.is_number() && b.is_number()) return CompareNumbers(a, b);
  if (a.is_string() && b.is_string()) {
    const int c = a.AsString().compare(b.AsString());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.kind() == b.kind() && a.is_sequence()) {
    const auto& x = a.AsList();
    const auto& y = b.AsList();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equals(x[i], y[i])) continue;
      return Compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  Raise("TypeError", "'" + std::string(op) + "' not supported between instances of '" + a.TypeName() + "' and '" +
                         b.TypeName() + "'");
}

}  // namespace ferry::jinja
