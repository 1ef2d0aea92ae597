// Typed reads of an OpenAI request body's fields, each failing with a 400 that names the
// field. Absent and null fields leave the output unchanged (the default).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>

#include "serve/api_error.h"

namespace ferry::serve {

using MaybeError = std::optional<ApiError>;

// The body as a JSON object (400 for invalid JSON, invalid UTF-8 or a non-object).
MaybeError ParseJsonObject(const std::string& body, nlohmann::json& out);
// 400 for any field not in `known` (typos must not be silently ignored).
MaybeError RejectUnknownFields(const nlohmann::json& obj, std::initializer_list<const char*> known);

MaybeError ReadInt(const nlohmann::json& obj, const char* name, int64_t lo, int64_t hi, int64_t& out);
MaybeError ReadNumber(const nlohmann::json& obj, const char* name, double lo, double hi, double& out);
MaybeError ReadBool(const nlohmann::json& obj, const char* name, bool& out);
MaybeError ReadString(const nlohmann::json& obj, const char* name, std::string& out);
// Required string field (400 when absent, null or not a string).
MaybeError RequireString(const nlohmann::json& obj, const char* name, std::string& out);

// OpenAI's "string | string[] | int[] | int[][]" field (`prompt`, `input`): calls add_text
// for each text and add_ids for each token-id array, in order; 400 for any other shape or
// for more than max_items items.
MaybeError ForEachTextOrIds(const nlohmann::json& field, const char* name, size_t max_items,
                            const std::function<MaybeError(const std::string&)>& add_text,
                            const std::function<MaybeError(const nlohmann::json&)>& add_ids);

}  // namespace ferry::serve
