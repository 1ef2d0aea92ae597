#include "test_util.h"

#include <algorithm>
#include <cmath>

namespace ferry::testing {

std::string FixturePath(const std::string& relative) { return std::string(FERRY_FIXTURES_DIR) + "/" + relative; }
std::string SourcePath(const std::string& relative) { return std::string(FERRY_SOURCE_DIR) + "/" + relative; }
std::string FerryBinary() { return FERRY_BINARY; }

std::vector<float> ToFloats(const Tensor& t) {
  Tensor f = t.ToF32();
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

std::vector<int32_t> ToIds(const Tensor& t) {
  return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel());
}

double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

double MaxDiff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

}  // namespace ferry::testing
