// Shared helpers for tests: fixture paths and comparisons.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ferry::testing {

// Whether this build runs under AddressSanitizer, whose shadow memory and quarantine of
// freed blocks (256 MiB by default) count in a process's RSS.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

// Absolute path of a file or folder under ../shared/fixtures.
std::string FixturePath(const std::string& relative);
// Absolute path under the project source tree.
std::string SourcePath(const std::string& relative);
// Path of the built `ferry` binary.
std::string FerryBinary();

// A tensor's values as f32 (any float dtype) or as int32 ids.
std::vector<float> ToFloats(const Tensor& t);
std::vector<int32_t> ToIds(const Tensor& t);
// max |v| and max |a - b| (the scale and the error of a logits comparison).
double MaxAbs(const std::vector<float>& v);
double MaxDiff(const float* a, const float* b, size_t n);

// Whether python3 with the jsonschema module can be run.
bool HaveJsonSchemaValidator();
// Validates each instance (JSON text) against its schema with Draft 2020-12 and its format
// checker; returns "" for a valid one, else the validator's message (or "parse error").
std::vector<std::string> ValidateJson(const std::vector<std::pair<std::string, std::string>>& schema_and_instance);

// Sets (or, with nullopt, unsets) an environment variable for the test's lifetime.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace ferry::testing
