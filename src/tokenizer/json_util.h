// Lenient, non-throwing accessors for the tokenizer JSON files. nlohmann's throwing
// accessors stay out of this module: every lookup goes through find() and a type check.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/json_limits.h"

namespace ferry::tokenizer {

using Json = nlohmann::json;

inline const Json* JsonField(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

inline std::optional<std::string> JsonOptString(const Json& object, std::string_view key) {
  const Json* v = JsonField(object, key);
  if (v == nullptr || !v->is_string()) return std::nullopt;
  return v->get<std::string>();
}

inline std::string JsonString(const Json& object, std::string_view key, std::string fallback) {
  return JsonOptString(object, key).value_or(std::move(fallback));
}

inline std::optional<bool> JsonOptBool(const Json& object, std::string_view key) {
  const Json* v = JsonField(object, key);
  if (v == nullptr || !v->is_boolean()) return std::nullopt;
  return v->get<bool>();
}

inline bool JsonBool(const Json& object, std::string_view key, bool fallback) {
  return JsonOptBool(object, key).value_or(fallback);
}

inline std::optional<int64_t> JsonOptInt(const Json& object, std::string_view key) {
  const Json* v = JsonField(object, key);
  if (v == nullptr || !v->is_number_integer()) return std::nullopt;
  return v->get<int64_t>();
}

inline int64_t JsonInt(const Json& object, std::string_view key, int64_t fallback) {
  return JsonOptInt(object, key).value_or(fallback);
}

// Parses without exceptions, nesting bounded (core/json_limits.h); std::nullopt on
// malformed or too deeply nested input.
inline std::optional<Json> ParseJson(std::string_view text) {
  Result<Json> parsed = ParseUntrustedJson(text);
  if (!parsed.ok()) return std::nullopt;
  return std::move(parsed).value();
}

}  // namespace ferry::tokenizer
