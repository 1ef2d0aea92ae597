// Shared helpers for tests: fixture paths and comparisons.
#pragma once

#include <string>

namespace ferry::testing {

// Absolute path of a file or folder under ../shared/fixtures.
std::string FixturePath(const std::string& relative);
// Absolute path under the project source tree.
std::string SourcePath(const std::string& relative);
// Path of the built `ferry` binary.
std::string FerryBinary();

}  // namespace ferry::testing
