// The Precompiled normalizer on a darts-clone trie built here unit by unit, and grapheme
// clusters. A real SentencePiece map is checked through the XLM-R fixture tokenizer when it
// has one.
#include "tokenizer/precompiled_charsmap.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ferry::tokenizer {
namespace {

// A map with two keys: "A" -> "a" and "AB" -> "X" (so "AB" has two prefix matches), laid out
// as darts-clone does: root offset 256; "A" at 256 ^ 'A' with a leaf child at its offset 1;
// "B" below "A" at (320 ^ 1... see below).
std::string TwoKeyMap() {
  std::vector<uint32_t> units(1024, 0);
  const uint32_t kLeaf = 1u << 8, kIsValue = 1u << 31;
  units[0] = 256u << 10;                                  // root: children at 256 ^ label
  const uint32_t a = 256 ^ 'A';                           // 321
  units[a] = (1u << 10) | kLeaf | 'A';                    // children at 321 ^ 1 = 320 ^ label
  units[a ^ 1] = kIsValue | 0;                            // its leaf: replacement at index 0 ("a")
  const uint32_t b = (a ^ 1) ^ 'B';                       // 320 ^ 66 = 386
  units[b] = (2u << 10) | kLeaf | 'B';                    // leaf at 386 ^ 2 = 384
  units[b ^ 2] = kIsValue | 2;                            // replacement at index 2 ("X")
  std::string blob;
  const uint32_t bytes = static_cast<uint32_t>(units.size() * 4);
  for (int i = 0; i < 4; ++i) blob.push_back(static_cast<char>((bytes >> (8 * i)) & 0xFF));
  for (uint32_t u : units) {
    for (int i = 0; i < 4; ++i) blob.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
  }
  blob += std::string("a\0X\0", 4);
  return blob;
}

std::string Base64(const std::string& raw) {
  static const char* kChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < raw.size(); i += 3) {
    const uint32_t v = (static_cast<unsigned char>(raw[i]) << 16) | (static_cast<unsigned char>(raw[i + 1]) << 8) |
                       static_cast<unsigned char>(raw[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out.push_back(kChars[(v >> k) & 63]);
  }
  if (i < raw.size()) {
    uint32_t v = static_cast<unsigned char>(raw[i]) << 16;
    if (i + 1 < raw.size()) v |= static_cast<unsigned char>(raw[i + 1]) << 8;
    out.push_back(kChars[(v >> 18) & 63]);
    out.push_back(kChars[(v >> 12) & 63]);
    out.push_back(i + 1 < raw.size() ? kChars[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

TEST(PrecompiledCharsmapTest, LooksUpTheShortestPrefix) {
  auto map = PrecompiledCharsmap::FromBase64(Base64(TwoKeyMap()));
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  std::string_view rep;
  ASSERT_TRUE(map->Transform("A", &rep));
  EXPECT_EQ(rep, "a");
  ASSERT_TRUE(map->Transform("AB", &rep));
  EXPECT_EQ(rep, "a");  // the first result of the prefix search, as the reference takes it
  EXPECT_FALSE(map->Transform("B", &rep));
  EXPECT_FALSE(map->Transform("x", &rep));
  EXPECT_EQ(map->Normalize("xAyA"), "xaya");
  EXPECT_EQ(map->Normalize("BAB"), "BaB");  // per character: "A" -> "a", "B" kept
}

TEST(PrecompiledCharsmapTest, RejectsMalformedMaps) {
  EXPECT_FALSE(PrecompiledCharsmap::Create("ab").ok());
  EXPECT_FALSE(PrecompiledCharsmap::Create(std::string("\x10\0\0\0abcd", 8)).ok());  // trie past the end
  EXPECT_FALSE(PrecompiledCharsmap::FromBase64("***").ok());
}

TEST(PrecompiledCharsmapTest, GraphemeClusters) {
  auto clusters = [](const std::string& s) {
    std::vector<std::string> out;
    const std::vector<size_t> b = GraphemeBoundaries(s);
    for (size_t i = 0; i + 1 < b.size(); ++i) out.push_back(s.substr(b[i], b[i + 1] - b[i]));
    return out;
  };
  EXPECT_EQ(clusters("ab"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(clusters("e\u0301x"), (std::vector<std::string>{"e\u0301", "x"}));  // combining acute
  EXPECT_EQ(clusters("\r\n\n"), (std::vector<std::string>{"\r\n", "\n"}));
  // Family emoji: ZWJ sequence; then a skin-tone modifier; then two flags.
  EXPECT_EQ(clusters("\U0001F468\u200D\U0001F469x"), (std::vector<std::string>{"\U0001F468\u200D\U0001F469", "x"}));
  EXPECT_EQ(clusters("\U0001F44D\U0001F3FD"), (std::vector<std::string>{"\U0001F44D\U0001F3FD"}));
  EXPECT_EQ(clusters("\U0001F1EB\U0001F1F7\U0001F1E9\U0001F1EA"),
            (std::vector<std::string>{"\U0001F1EB\U0001F1F7", "\U0001F1E9\U0001F1EA"}));
  // Hangul jamo L V T form one syllable.
  EXPECT_EQ(clusters("\u1100\u1161\u11A8a"), (std::vector<std::string>{"\u1100\u1161\u11A8", "a"}));
  EXPECT_TRUE(clusters("").empty());
}


// A real SentencePiece charsmap (nmt_nfkc), as converted XLM-R tokenizer.json files carry
// one, against Hugging Face tokenizers' ids for every case.
TEST(PrecompiledCharsmapTest, FixtureTokenizerMatchesTransformers) {
  const std::string dir = testing::SourcePath("tests/fixtures/architectures/xlmr-precompiled");
  if (!std::filesystem::exists(dir + "/tokenizer_cases.json")) {
    GTEST_SKIP() << dir << " is not there yet (tools/fixtures/architectures.py, with sentencepiece installed)";
  }
  auto tok = LoadTokenizer(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  std::ifstream in(dir + "/tokenizer_cases.json");
  const nlohmann::json cases = nlohmann::json::parse(in);
  for (const nlohmann::json& c : cases) {
    const std::string text = c["text"].get<std::string>();
    auto ids = (*tok)->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<int32_t>>()) << "text: '" << text << "'";
  }
}

}  // namespace
}  // namespace ferry::tokenizer
