#include "serve/request_fields.h"

#include <cmath>
#include <string_view>

#include "core/json_limits.h"

namespace ferry::serve {

namespace {

std::string Num(double v) {
  std::string s = std::to_string(v);
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

const nlohmann::json* Field(const nlohmann::json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace

MaybeError ParseJsonObject(const std::string& body, nlohmann::json& out) {
  if (body.empty()) return BadRequest("the request body is empty; expected a JSON object");
  Result<nlohmann::json> parsed = ParseStrictJson(body);
  if (!parsed.ok()) return BadRequest("the request body is not valid JSON: " + parsed.status().message());
  out = std::move(parsed).value();
  if (!out.is_object()) return BadRequest("the request body must be a JSON object");
  return std::nullopt;
}

MaybeError RejectUnknownFields(const nlohmann::json& obj, std::initializer_list<const char*> known) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) return BadRequest("unrecognized request argument supplied: " + it.key(), it.key());
  }
  return std::nullopt;
}

MaybeError ReadInt(const nlohmann::json& obj, const char* name, int64_t lo, int64_t hi, int64_t& out) {
  const nlohmann::json* v = Field(obj, name);
  if (v == nullptr) return std::nullopt;
  int64_t x;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return BadRequest(std::string(name) + " is too large", name);
    }
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) && v->get<double>() == std::floor(v->get<double>()) &&
             std::fabs(v->get<double>()) < 9e15) {
    x = static_cast<int64_t>(v->get<double>());
  } else {
    return BadRequest(std::string(name) + " must be an integer", name);
  }
  if (x < lo || x > hi) {
    return BadRequest(std::string(name) + " must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                          ", got " + std::to_string(x), name);
  }
  out = x;
  return std::nullopt;
}

MaybeError ReadNumber(const nlohmann::json& obj, const char* name, double lo, double hi, double& out) {
  const nlohmann::json* v = Field(obj, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return BadRequest(std::string(name) + " must be a number", name);
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    return BadRequest(std::string(name) + " must be between " + Num(lo) + " and " + Num(hi), name);
  }
  out = x;
  return std::nullopt;
}

MaybeError ReadBool(const nlohmann::json& obj, const char* name, bool& out) {
  const nlohmann::json* v = Field(obj, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return BadRequest(std::string(name) + " must be a boolean", name);
  out = v->get<bool>();
  return std::nullopt;
}

MaybeError ReadString(const nlohmann::json& obj, const char* name, std::string& out) {
  const nlohmann::json* v = Field(obj, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return BadRequest(std::string(name) + " must be a string", name);
  out = v->get<std::string>();
  return std::nullopt;
}

MaybeError RequireString(const nlohmann::json& obj, const char* name, std::string& out) {
  const nlohmann::json* v = Field(obj, name);
  if (v == nullptr) return BadRequest(std::string("missing required field: ") + name, name);
  return ReadString(obj, name, out);
}

MaybeError ForEachTextOrIds(const nlohmann::json& field, const char* name, size_t max_items,
                            const std::function<MaybeError(const std::string&)>& add_text,
                            const std::function<MaybeError(const nlohmann::json&)>& add_ids) {
  if (field.is_string()) return add_text(field.get<std::string>());
  if (!field.is_array() || field.empty()) {
    return BadRequest(std::string(name) +
                          " must be a string, an array of strings, an array of token ids or an array of token-id arrays",
                      name);
  }
  if (field[0].is_number_integer()) return add_ids(field);
  if (field.size() > max_items) {
    return BadRequest("at most " + std::to_string(max_items) + " items in " + name, name);
  }
  for (const nlohmann::json& item : field) {
    MaybeError err;
    if (item.is_string()) {
      err = add_text(item.get<std::string>());
    } else if (item.is_array()) {
      err = add_ids(item);
    } else {
      err = BadRequest(std::string("each item of ") + name + " must be a string or an array of token ids", name);
    }
    if (err) return err;
  }
  return std::nullopt;
}

}  // namespace ferry::serve
