#include "test_util.h"

namespace ferry::testing {

std::string FixturePath(const std::string& relative) { return std::string(FERRY_FIXTURES_DIR) + "/" + relative; }
std::string SourcePath(const std::string& relative) { return std::string(FERRY_SOURCE_DIR) + "/" + relative; }
std::string FerryBinary() { return FERRY_BINARY; }

}  // namespace ferry::testing
