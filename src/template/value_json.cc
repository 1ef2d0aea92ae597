#include "template/value_json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ferry::jinja {

Value FromJson(const nlohmann::ordered_json& j) {
  NestingGuard guard;
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::None();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(FromJson(item));
      return Value::List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      DictData d;
      for (auto it = j.begin(); it != j.end(); ++it) d.Set(Value(it.key()), FromJson(it.value()));
      return Value::Dict(std::move(d));
    }
    default: return Value::None();
  }
}

std::string JsonQuote(std::string_view s, bool ensure_ascii) {
  std::string out = "\"";
  auto escape_cp = [&out](uint32_t cp) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "\\u%04x", cp & 0xFFFFu);
    out += buf;
  };
  for (uint32_t cp : DecodeUtf8(s)) {
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (cp < 0x20) {
      escape_cp(cp);
    } else if (ensure_ascii && cp >= 0x7F) {
      if (cp >= 0x10000) {
        const uint32_t v = cp - 0x10000;
        escape_cp(0xD800 + (v >> 10));
        escape_cp(0xDC00 + (v & 0x3FF));
      } else {
        escape_cp(cp);
      }
    } else {
      AppendUtf8(cp, out);
    }
  }
  out += '"';
  return out;
}

namespace {

std::string JsonFloat(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v < 0 ? "-Infinity" : "Infinity";
  return FormatFloat(v);
}

std::string KeyText(const Value& k, bool ensure_ascii) {
  switch (k.kind()) {
    case Value::Kind::kString: return JsonQuote(k.AsString(), ensure_ascii);
    case Value::Kind::kBool: return k.AsBool() ? "\"true\"" : "\"false\"";
    case Value::Kind::kNone: return "\"null\"";
    case Value::Kind::kInt: return "\"" + std::to_string(k.AsInt()) + "\"";
    case Value::Kind::kFloat: return "\"" + JsonFloat(k.AsFloat()) + "\"";
    default: Raise("TypeError", "keys must be str, int, float, bool or None, not " + k.TypeName());
  }
}

void Dump(const Value& v, const JsonDumpOptions& o, int level, std::string& out) {
  NestingGuard guard;
  auto newline = [&](int lvl) {
    out += '\n';
    for (int i = 0; i < lvl; ++i) out += o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.AsBool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.AsInt()); return;
    case Value::Kind::kFloat: out += JsonFloat(v.AsFloat()); return;
    case Value::Kind::kString: out += JsonQuote(v.AsString(), o.ensure_ascii); return;
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      const auto& items = v.AsList();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += o.item_sep;
        if (o.has_indent) newline(level + 1);
        Dump(items[i], o, level + 1, out);
      }
      if (o.has_indent) newline(level);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      const auto& items = v.AsDict().items();
      if (items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> order;
      for (const auto& kv : items) order.push_back(&kv);
      if (o.sort_keys) {
        std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
          return Compare(a->first, b->first, "<") < 0;
        });
      }
      out += '{';
      for (size_t i = 0; i < order.size(); ++i) {
        if (i > 0) out += o.item_sep;
        if (o.has_indent) newline(level + 1);
        out += KeyText(order[i]->first, o.ensure_ascii);
        out += o.key_sep;
        Dump(order[i]->second, o, level + 1, out);
      }
      if (o.has_indent) newline(level);
      out += '}';
      return;
    }
    default:
      Raise("TypeError", "Object of type " + v.TypeName() + " is not JSON serializable");
  }
}

}  // namespace

std::string DumpJson(const Value& v, const JsonDumpOptions& options) {
  JsonDumpOptions o = options;
  if (!o.custom_separators) {
    o.item_sep = o.has_indent ? "," : ", ";
    o.key_sep = ": ";
  }
  std::string out;
  Dump(v, o, 0, out);
  return out;
}

}  // namespace ferry::jinja
