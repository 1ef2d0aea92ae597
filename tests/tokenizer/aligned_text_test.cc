// Offsets: AlignedText through the normalizers and pre-tokenizers, and EncodeWithOffsets on
// the three reference tokenizers (every case of their cases.json), plus ApplyTemplate.
#include "tokenizer/aligned_text.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "fixture_util.h"
#include "test_util.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/tokenizer.h"

namespace ferry::tokenizer {
namespace {

using ::testing::ElementsAre;
using testing::LoadCases;
using testing::LoadFiles;

std::unique_ptr<Tokenizer> MustLoadFiles(const std::map<std::string, std::string>& files) {
  auto tokenizer = LoadTokenizerFromFiles(files);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

std::vector<std::pair<uint32_t, uint32_t>> Offsets(const Tokenizer& tok, const std::string& text) {
  std::vector<TokenOffset> offsets;
  auto ids = tok.EncodeWithOffsets(text, &offsets);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (const TokenOffset& o : offsets) out.emplace_back(o.begin, o.end);
  return out;
}

using P = std::pair<uint32_t, uint32_t>;

TEST(AlignedTextTest, IdentitySliceAndOriginal) {
  const AlignedText t = AlignedText::Identity("a\xC3\xA9z", 10);  // "aéz" at byte 10 of a larger input
  ASSERT_EQ(t.align.size(), 4u);
  EXPECT_EQ(t.align[1], (ByteRange{11, 13}));  // both bytes of é map to all of it
  EXPECT_EQ(t.align[2], (ByteRange{11, 13}));
  EXPECT_EQ(t.Original(0, 4), (ByteRange{10, 14}));
  EXPECT_EQ(t.Original(2, 2), (ByteRange{11, 11}));
  EXPECT_EQ(t.Slice(1, 3).text, "\xC3\xA9");
}

Result<std::unique_ptr<Normalizer>> Make(const std::string& json) { return MakeNormalizer(Json::parse(json)); }

TEST(AlignedTextTest, NormalizersKeepEveryByteAlignedAndAgreeWithNormalize) {
  struct Case {
    std::string config;
    std::string input;
    std::string want;
    std::vector<ByteRange> align;
  };
  const std::vector<Case> cases = {
      // Lowercase and accent stripping: "É" (2 bytes) becomes "e", aligned to both bytes.
      {R"({"type":"BertNormalizer","lowercase":true})", "\xC3\x89t\xC3\xA9", "ete", {{0, 2}, {2, 3}, {3, 5}}},
      // A Chinese character is padded with spaces that align with it.
      {R"({"type":"BertNormalizer","lowercase":false})", "a\xE4\xB8\xAD", "a \xE4\xB8\xAD ",
       {{0, 1}, {1, 4}, {1, 4}, {1, 4}, {1, 4}, {1, 4}}},
      // Strip drops the ends; Prepend aligns its prefix with the first character.
      {R"({"type":"Strip","strip_left":true,"strip_right":true})", "  ab ", "ab", {{2, 3}, {3, 4}}},
      {R"({"type":"Prepend","prepend":"_"})", "ab", "_ab", {{0, 1}, {0, 1}, {1, 2}}},
      // Replace aligns the replacement with the last byte of the match.
      {R"({"type":"Replace","pattern":{"String":" "},"content":"\u2581"})", "a b", "a\xE2\x96\x81" "b",
       {{0, 1}, {1, 2}, {1, 2}, {1, 2}, {2, 3}}},
      // NFC composes across characters: the word is aligned as a whole.
      {R"({"type":"NFC"})", "e\xCC\x81 x", "\xC3\xA9 x", {{0, 4}, {0, 4}, {0, 4}, {4, 5}}},
  };
  for (const Case& c : cases) {
    auto n = Make(c.config);
    ASSERT_TRUE(n.ok()) << c.config << ": " << n.status().ToString();
    std::string plain = c.input;
    ASSERT_TRUE((*n)->Normalize(&plain).ok());
    AlignedText t = AlignedText::Identity(c.input);
    ASSERT_TRUE((*n)->NormalizeAligned(&t).ok());
    EXPECT_EQ(t.text, plain) << c.config;
    EXPECT_EQ(t.text, c.want) << c.config;
    EXPECT_EQ(t.align, c.align) << c.config;
  }
}

TEST(EncodeWithOffsetsTest, BertWordPieceOffsets) {
  auto tok = MustLoadFiles(LoadFiles("tokenizers/bert"));
  ASSERT_NE(tok, nullptr);
  // Values transformers' BertTokenizerFast gives (converted to bytes).
  EXPECT_THAT(Offsets(*tok, "Hello world"), ElementsAre(P{0, 5}, P{6, 11}));
  EXPECT_THAT(Offsets(*tok, "Hello, y'all!"), ElementsAre(P{0, 5}, P{5, 6}, P{7, 8}, P{8, 9}, P{9, 12}, P{12, 13}));
  EXPECT_THAT(Offsets(*tok, "F\xC3\xBChrer"), ElementsAre(P{0, 3}, P{3, 7}));  // "fu" covers "Fü"
  // An added special token written in the text covers its match.
  std::vector<TokenOffset> o;
  auto ids = tok->EncodeWithOffsets("a [SEP] b", &o);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(o.size(), 3u);
  EXPECT_EQ(o[1].begin, 2u);
  EXPECT_EQ(o[1].end, 7u);
}

TEST(EncodeWithOffsetsTest, Gpt2ByteLevelOffsetsIncludeTheSpaceWithoutTrimming) {
  auto tok = MustLoadFiles(LoadFiles("tokenizers/gpt2"));
  ASSERT_NE(tok, nullptr);
  EXPECT_THAT(Offsets(*tok, "Hello world"), ElementsAre(P{0, 5}, P{5, 11}));
  // The same tokenizer with trim_offsets on (RoBERTa's setting) leaves the space out. (The
  // fixture's tokenizer_config.json sets add_bos_token, which replaces the post-processor by
  // a template, as transformers does; without it the file's ByteLevel processor stays.)
  auto files = LoadFiles("tokenizers/gpt2", {"tokenizer_config.json"});
  Json j = Json::parse(files["tokenizer.json"]);
  j["post_processor"]["trim_offsets"] = true;
  files["tokenizer.json"] = j.dump();
  auto trimmed = MustLoadFiles(files);
  ASSERT_NE(trimmed, nullptr);
  EXPECT_THAT(Offsets(*trimmed, "Hello world"), ElementsAre(P{0, 5}, P{6, 11}));
}

// Every case of every reference tokenizer: the same ids as Encode, one offset per token,
// inside the text and in order, and each token's text is what its offsets cover.
class OffsetCasesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OffsetCasesTest, OffsetsCoverWhatEachTokenSpells) {
  const std::string name = GetParam();
  const bool sentencepiece = name == "llama-sentencepiece";
  const std::string dir = sentencepiece || name == "llama" ? "llama" : name;
  auto files = LoadFiles("tokenizers/" + dir, sentencepiece ? std::vector<std::string>{}
                                                            : std::vector<std::string>{"tokenizer.model"});
  auto tok = MustLoadFiles(files);
  ASSERT_NE(tok, nullptr);
  const auto cases = LoadCases(dir);
  ASSERT_GE(cases.size(), 40u);
  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::Get();
  int checked = 0;
  for (const auto& c : cases) {
    std::vector<TokenOffset> offsets;
    auto ids = tok->EncodeWithOffsets(c.text, &offsets);
    ASSERT_TRUE(ids.ok()) << c.text;
    auto plain = tok->Encode(c.text);
    ASSERT_TRUE(plain.ok());
    ASSERT_EQ(*ids, *plain) << c.text;
    ASSERT_EQ(offsets.size(), ids->size()) << c.text;
    uint32_t last_begin = 0;
    for (size_t i = 0; i < ids->size(); ++i) {
      const TokenOffset& o = offsets[i];
      ASSERT_LE(o.begin, o.end) << c.text;
      ASSERT_LE(o.end, c.text.size()) << c.text;
      ASSERT_GE(o.begin, last_begin) << c.text;
      last_begin = o.begin;
      const std::string covered = c.text.substr(o.begin, o.end - o.begin);
      std::string token = tok->IdToToken((*ids)[i]);
      if (dir == "bert") {
        if (token == "[UNK]") continue;
        if (token.rfind("##", 0) == 0) token = token.substr(2);
        bool ascii = true;
        for (char ch : covered) ascii = ascii && static_cast<unsigned char>(ch) < 0x80;
        if (!ascii) continue;  // accents and case folding beyond ASCII change the spelling
        std::string lower;
        for (char ch : covered) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        EXPECT_EQ(lower, token) << c.text;
      } else if (dir == "gpt2") {
        std::string bytes;
        ASSERT_TRUE(alphabet.Decode(token, &bytes));
        // A token holding part of a character reports the whole character, as HF does.
        if (bytes.size() == covered.size()) {
          EXPECT_EQ(bytes, covered) << c.text;
        }
        EXPECT_NE(covered.find(bytes.substr(0, 1)), std::string::npos) << c.text;
      } else {
        if (token.rfind("<0x", 0) == 0) continue;  // byte fallback
        // A lone prepended "▁" is aligned with the first character, as HF's prepend does.
        if (token == "\xE2\x96\x81" && o.begin == 0) continue;
        std::string spelled;
        for (char ch : covered) spelled += ch == ' ' ? std::string("\xE2\x96\x81") : std::string(1, ch);
        // The dummy prefix ("▁" before the first word) is not in the text.
        EXPECT_TRUE(token == spelled || token == "\xE2\x96\x81" + spelled) << c.text << ": " << token;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OffsetCasesTest,
                         ::testing::Values("bert", "gpt2", "llama", "llama-sentencepiece"));

// Offsets that transformers itself computed for these cases, when the fixture script's
// output is present (tests/fixtures/token_classification/tokenizer_offsets.json, written by
// tools/fixtures/token_classification.py on a machine with transformers).
TEST(EncodeWithOffsetsTest, MatchesTransformersOffsetMappings) {
  const std::string path = ferry::testing::SourcePath("tests/fixtures/token_classification/tokenizer_offsets.json");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no transformers offsets at " << path;
  const Json root = Json::parse(testing::ReadFileOrEmpty(path));
  int compared = 0;
  for (const auto& [name, entries] : root.items()) {
    auto tok = MustLoadFiles(LoadFiles("tokenizers/" + name, {"tokenizer.model"}));
    ASSERT_NE(tok, nullptr);
    for (const Json& e : entries) {
      const std::string text = e.at("text").get<std::string>();
      std::vector<TokenOffset> offsets;
      auto ids = tok->EncodeWithOffsets(text, &offsets);
      ASSERT_TRUE(ids.ok());
      ASSERT_EQ(*ids, e.at("ids").get<std::vector<int32_t>>()) << name << ": " << text;
      // transformers reports code points; convert ours.
      std::vector<uint32_t> char_of_byte(text.size() + 1, 0);
      uint32_t chars = 0;
      for (size_t b = 0; b < text.size(); ++b) {
        if ((static_cast<unsigned char>(text[b]) & 0xC0) != 0x80 && b > 0) ++chars;
        char_of_byte[b] = chars;
      }
      const auto& want = e.at("offsets");
      ASSERT_EQ(want.size(), offsets.size()) << name << ": " << text;
      for (size_t i = 0; i < offsets.size(); ++i) {
        const uint32_t begin = offsets[i].begin < text.size() ? char_of_byte[offsets[i].begin] : chars + 1;
        const uint32_t end = offsets[i].end > offsets[i].begin ? char_of_byte[offsets[i].end - 1] + 1 : begin;
        EXPECT_EQ(begin, want[i][0].get<uint32_t>()) << name << ": " << text << " token " << i;
        EXPECT_EQ(end, want[i][1].get<uint32_t>()) << name << ": " << text << " token " << i;
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 0);
}

TEST(ApplyTemplateTest, SameAsEncodeWithSpecialAndSaysWhereTokensCameFrom) {
  auto tok = MustLoadFiles(LoadFiles("tokenizers/bert"));
  ASSERT_NE(tok, nullptr);
  auto a = tok->Encode("The LORD is my shepherd");
  auto b = tok->Encode("I shall not want");
  ASSERT_TRUE(a.ok() && b.ok());
  auto single = tok->ApplyTemplate(*a);
  auto pair = tok->ApplyTemplate(*a, std::span<const int32_t>(*b));
  ASSERT_TRUE(single.ok() && pair.ok());
  auto want_single = tok->EncodeWithSpecial("The LORD is my shepherd");
  auto want_pair = tok->EncodeWithSpecial("The LORD is my shepherd", "I shall not want");
  EXPECT_EQ(single->ids, want_single->ids);
  EXPECT_EQ(pair->ids, want_pair->ids);
  EXPECT_EQ(pair->type_ids, want_pair->type_ids);
  EXPECT_EQ(pair->sequence.front(), -1);
  EXPECT_EQ(pair->sequence[1], 0);
  EXPECT_EQ(pair->position[1], 0);
  EXPECT_EQ(pair->sequence[a->size() + 2], 1);
  EXPECT_EQ(pair->position[a->size() + 3], 1);
  // LLaMA's template adds only BOS.
  auto llama = MustLoadFiles(LoadFiles("tokenizers/llama"));
  auto one = llama->ApplyTemplate(std::vector<int32_t>{100, 200});
  ASSERT_TRUE(one.ok());
  EXPECT_THAT(one->ids, ElementsAre(1, 100, 200));
  EXPECT_EQ(tok->TokensToString({"she", "##pher", "##d", "is"}), "shepherd is");
  EXPECT_EQ(tok->continuing_subword_prefix(), "##");
  EXPECT_EQ(llama->continuing_subword_prefix(), "");
  EXPECT_EQ(tok->unk_id(), tok->TokenToId("[UNK]"));
}

}  // namespace
}  // namespace ferry::tokenizer
