// Internal to io/: checked reads from a JSON object that ferry wrote into a file and reads
// back (the engine manifest and fingerprint). Every error is DataLoss naming the field by
// its path ("build.max_seq_len", "tensors['embed'].shape") and quoting at most a short
// snippet of the offending value; nothing throws.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json_limits.h"
#include "core/status.h"

namespace ferry::io {

// Thread-compatible; refers to the JSON it reads, which must outlive it.
class JsonReader {
 public:
  // `what` prefixes every message ("engine manifest"); `path` names the object itself.
  static Result<JsonReader> Open(const nlohmann::json& value, std::string what, std::string path) {
    JsonReader r(value, std::move(what), std::move(path));
    if (!value.is_object()) return r.Error("must be an object, got " + JsonSnippet(value));
    return r;
  }

  const nlohmann::json& value() const { return value_; }
  // The path of a field of this object, and of an entry of a map-like object (whose keys
  // may hold dots).
  std::string FieldPath(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  std::string EntryPath(std::string_view key) const { return path_ + "['" + std::string(key) + "']"; }

  // Absent or null: nullptr.
  const nlohmann::json* Find(std::string_view key) const {
    const auto it = value_.find(key);
    return it == value_.end() || it->is_null() ? nullptr : &*it;
  }
  Status Require(std::string_view key) const {
    if (Find(key) == nullptr) return DataLoss(what_ + ": " + FieldPath(key) + " is missing");
    return Status::Ok();
  }

  // A sub-object, required.
  Result<JsonReader> Object(std::string_view key) const {
    FERRY_RETURN_IF_ERROR(Require(key));
    return Open(*Find(key), what_, FieldPath(key));
  }
  // The array at `key`, required.
  Result<const nlohmann::json*> Array(std::string_view key) const {
    FERRY_RETURN_IF_ERROR(Require(key));
    const nlohmann::json* v = Find(key);
    if (!v->is_array()) return FieldError(key, "must be an array", *v);
    return v;
  }

  // Scalars: an absent field leaves `out` as it is unless `required`.
  Status String(std::string_view key, std::string& out, bool required = false) const {
    const nlohmann::json* v = Find(key);
    if (v == nullptr) return required ? Require(key) : Status::Ok();
    if (!v->is_string()) return FieldError(key, "must be a string", *v);
    out = v->get<std::string>();
    return Status::Ok();
  }
  Status Bool(std::string_view key, bool& out, bool required = false) const {
    const nlohmann::json* v = Find(key);
    if (v == nullptr) return required ? Require(key) : Status::Ok();
    if (!v->is_boolean()) return FieldError(key, "must be true or false", *v);
    out = v->get<bool>();
    return Status::Ok();
  }
  Status Double(std::string_view key, double& out, bool required = false) const {
    const nlohmann::json* v = Find(key);
    if (v == nullptr) return required ? Require(key) : Status::Ok();
    if (!v->is_number()) return FieldError(key, "must be a number", *v);
    out = v->get<double>();
    return Status::Ok();
  }
  template <typename Int>
  Status Integer(std::string_view key, Int& out, bool required = false) const {
    const nlohmann::json* v = Find(key);
    if (v == nullptr) return required ? Require(key) : Status::Ok();
    return ReadInteger(*v, FieldPath(key), out);
  }

  // An integer of type Int from any JSON value, with `path` naming it in the error.
  template <typename Int>
  Status ReadInteger(const nlohmann::json& v, const std::string& path, Int& out) const {
    constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<Int>::max());
    bool fits = false;
    if (v.is_number_unsigned()) {
      fits = v.get<uint64_t>() <= kMax;
    } else if (v.is_number_integer()) {
      const int64_t i = v.get<int64_t>();
      fits = i >= 0 ? static_cast<uint64_t>(i) <= kMax
                    : std::numeric_limits<Int>::is_signed && i >= static_cast<int64_t>(std::numeric_limits<Int>::min());
    }
    if (!fits) {
      const char* kind = std::numeric_limits<Int>::is_signed ? "an integer" : "a non-negative integer";
      return DataLoss(what_ + ": " + path + " must be " + kind + " of at most " + std::to_string(kMax) + ", got " +
                      JsonSnippet(v));
    }
    out = v.get<Int>();
    return Status::Ok();
  }

  Status Error(const std::string& message) const {
    return DataLoss(what_ + ": " + (path_.empty() ? std::string() : path_ + " ") + message);
  }
  Status FieldError(std::string_view key, const std::string& message, const nlohmann::json& got) const {
    return DataLoss(what_ + ": " + FieldPath(key) + " " + message + ", got " + JsonSnippet(got));
  }
  const std::string& what() const { return what_; }

 private:
  JsonReader(const nlohmann::json& value, std::string what, std::string path)
      : value_(value), what_(std::move(what)), path_(std::move(path)) {}

  const nlohmann::json& value_;
  std::string what_;
  std::string path_;
};

}  // namespace ferry::io
