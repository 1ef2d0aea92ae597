#include "structured/structured_test_util.h"


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

}  // namespace ferry::structured::testing
