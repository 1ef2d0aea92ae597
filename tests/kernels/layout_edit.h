// Corrupting a serialized linear's layout JSON, one key at a time, for the refusal tests.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "backend/backend.h"

namespace ferry::testing {

// `layout` with `key` set to `value` (removed where `value` is null), over `blobs`.
inline backend::SerializedLinear EditedLayout(const nlohmann::json& layout, const std::string& key,
                                              const nlohmann::json& value, const std::vector<Tensor>& blobs) {
  nlohmann::json j = layout;
  if (value.is_null()) {
    j.erase(key);
  } else {
    j[key] = value;
  }
  return backend::SerializedLinear{j.dump(), blobs};
}

}  // namespace ferry::testing
