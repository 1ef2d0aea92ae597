// Shared helpers for tests: fixture paths and comparisons.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ferry::testing {

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

}  // namespace ferry::testing
