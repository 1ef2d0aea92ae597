#include "test_util.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

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

bool HaveJsonSchemaValidator() { return std::system("python3 -c 'import jsonschema' >/dev/null 2>&1") == 0; }

std::vector<std::string> ValidateJson(const std::vector<std::pair<std::string, std::string>>& cases) {
  char in_path[] = "/tmp/ferry_jsonschema_in_XXXXXX";
  const int fd = mkstemp(in_path);
  if (fd < 0) return std::vector<std::string>(cases.size(), "cannot create a temporary file");
  close(fd);
  {
    std::ofstream out(in_path);
    for (const auto& [schema, instance] : cases) {
      out << nlohmann::json{{"schema", schema}, {"instance", instance}}.dump() << "\n";
    }
  }
  const std::string script = SourcePath("tests/structured/validate_json.py");
  const std::string out_path = std::string(in_path) + ".out";
  const std::string cmd = "python3 " + script + " " + in_path + " > " + out_path;
  const int rc = std::system(cmd.c_str());
  std::vector<std::string> results;
  std::ifstream in(out_path);
  std::string line;
  while (std::getline(in, line)) results.push_back(line == "ok" ? "" : line);
  std::remove(in_path);
  std::remove(out_path.c_str());
  if (rc != 0 || results.size() != cases.size()) return std::vector<std::string>(cases.size(), "validator failed");
  return results;
}

}  // namespace ferry::testing
