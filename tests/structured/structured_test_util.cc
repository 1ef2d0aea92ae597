#include "structured/structured_test_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_util.h"

namespace ferry::structured::testing {

std::shared_ptr<const Vocabulary> ByteVocab() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  return std::make_shared<const Vocabulary>(std::move(tokens), std::vector<char>(256, 1));
}

std::shared_ptr<const Vocabulary> MixedVocab() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  for (const char* t : {"{\"", "\":", "\": ", ", \"", ",\"", "\"}", "}}", "]}", "[{", "[\"", "\"]", "\",", "true", "false",
                        "null", "12", "3.", "-1", "00", " the", " lord", " said", "And", "ing", " and", "\n  ", "  ",
                        "\n", "name", "id", "2024-", "-0", "e+", "\"\"", "\\n", "\\\"", "é", "日本"}) {
    tokens.push_back(t);
  }
  std::vector<char> usable(tokens.size(), 1);
  tokens.push_back("");  // an id with no bytes (a special token): never allowed
  usable.push_back(0);
  return std::make_shared<const Vocabulary>(std::move(tokens), std::move(usable));
}

bool Matches(const Grammar& grammar, const std::string& text) {
  TokenMatcher m(grammar, ByteVocab());
  return m.Accepting(m.AdvanceBytes(m.initial(), text));
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
  const std::string script = ferry::testing::SourcePath("tests/structured/validate_json.py");
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

}  // namespace ferry::structured::testing
