// The Unigram model against hand-worked lattices, and a SentencePiece-style tokenizer.json
// (XLM-RoBERTa's layout) end to end. The fixture tokenizer made by transformers
// (tests/fixtures/architectures/xlmr-tiny) is checked case by case when present.
#include "tokenizer/unigram_model.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ferry::tokenizer {
namespace {

using json = nlohmann::json;

// [[piece, score], ...] (an initializer list of pairs would read as a JSON object).
json V(const std::vector<std::pair<std::string, double>>& pieces) {
  json v = json::array();
  for (const auto& [p, s] : pieces) v.push_back(json::array({p, s}));
  return v;
}

std::unique_ptr<UnigramModel> Make(const json& vocab, int unk_id, bool byte_fallback = false) {
  const json config = {{"type", "Unigram"}, {"unk_id", unk_id}, {"vocab", vocab}, {"byte_fallback", byte_fallback}};
  auto m = UnigramModel::Create(config);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::vector<int32_t> Ids(const UnigramModel& m, std::string_view word, std::vector<ByteRange>* spans = nullptr) {
  std::vector<int32_t> ids;
  const Status s = m.Tokenize(word, &ids, spans);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return ids;
}

TEST(UnigramModelTest, PicksTheMostProbableSplit) {
  // "abc": a+b+c = -6, ab+c = -3.5, a+bc = -2.5 (best), abc absent.
  const json vocab = V({{"<unk>", 0.0}, {"a", -2.0}, {"b", -2.0}, {"c", -2.0}, {"ab", -1.5}, {"bc", -0.5}});
  auto m = Make(vocab, 0);
  ASSERT_NE(m, nullptr);
  std::vector<ByteRange> spans;
  EXPECT_EQ(Ids(*m, "abc", &spans), (std::vector<int32_t>{1, 5}));
  EXPECT_EQ(spans, (std::vector<ByteRange>{{0, 1}, {1, 3}}));
  EXPECT_EQ(Ids(*m, "ab"), (std::vector<int32_t>{4}));
  EXPECT_EQ(m->vocab_size(), 6);
  EXPECT_EQ(*m->TokenToId("bc"), 5);
  EXPECT_EQ(*m->IdToToken(4), "ab");
}

TEST(UnigramModelTest, TiesGoToTheEarlierStartingLastPiece) {
  // "ab" = -2 and "a" + "b" = -2: the lattice keeps the first candidate it saw for the end,
  // the one whose last piece starts earliest ("ab").
  const json vocab = V({{"<unk>", 0.0}, {"a", -1.0}, {"b", -1.0}, {"ab", -2.0}});
  auto m = Make(vocab, 0);
  EXPECT_EQ(Ids(*m, "ab"), (std::vector<int32_t>{3}));
}

TEST(UnigramModelTest, UnknownCharactersFuseIntoOneUnk) {
  // Multi-byte characters are never split; runs of unknown ones become one <unk>.
  const json vocab = V({{"<unk>", 0.0}, {"x", -1.0}, {"\u00e9t\u00e9", -1.0}, {"t", -3.0}});
  auto m = Make(vocab, 0);
  std::vector<ByteRange> spans;
  // "x" "日本" (unknown, fused) "x"
  EXPECT_EQ(Ids(*m, "x\u65e5\u672cx", &spans), (std::vector<int32_t>{1, 0, 1}));
  EXPECT_EQ(spans, (std::vector<ByteRange>{{0, 1}, {1, 7}, {7, 8}}));
  EXPECT_EQ(Ids(*m, "\u00e9t\u00e9"), (std::vector<int32_t>{2}));
  // "é" alone has no piece: unk, then "t" (a known piece), then unk.
  EXPECT_EQ(Ids(*m, "\u00e9t\u00e8"), (std::vector<int32_t>{0, 3, 0}));
}

TEST(UnigramModelTest, ByteFallbackSpellsUnknownBytes) {
  json vocab = V({{"<unk>", 0.0}, {"a", -1.0}});
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab.push_back(json::array({name, -5.0}));
  }
  auto m = Make(vocab, 0, true);
  // "é" = C3 A9 -> <0xC3> <0xA9>
  EXPECT_EQ(Ids(*m, "a\u00e9"), (std::vector<int32_t>{1, 2 + 0xC3, 2 + 0xA9}));
}

TEST(UnigramModelTest, RejectsBadConfigs) {
  EXPECT_FALSE(UnigramModel::Create(json{{"type", "Unigram"}, {"vocab", json::array()}}).ok());
  EXPECT_FALSE(UnigramModel::Create(json{{"type", "Unigram"}, {"vocab", json::array({json::array({"a"})})}}).ok());
  EXPECT_FALSE(UnigramModel::Create(json{{"type", "Unigram"}, {"unk_id", 5}, {"vocab", V({{"a", -1.0}})}}).ok());
  // No unk and an uncovered character: an error, not a silent drop.
  auto m = Make(V({{"a", -1.0}}), -1);
  std::vector<int32_t> ids;
  EXPECT_FALSE(m->Tokenize("ab", &ids).ok());
}

// An XLM-RoBERTa-style tokenizer.json: Metaspace pre-tokenizer, Unigram model, the
// <s> A </s></s> B </s> template.
std::string XlmrStyleTokenizerJson() {
  const json vocab = V({{"<s>", 0.0},         {"<pad>", 0.0},       {"</s>", 0.0},        {"<unk>", 0.0},
                        {"\u2581", -3.0},     {"\u2581Hello", -2.0}, {"\u2581wor", -4.0}, {"ld", -4.0},
                        {"\u2581world", -5.0}, {"!", -2.5},          {"\u2581He", -1.0},   {"llo", -1.5},
                        {"<mask>", 0.0}});
  json added = json::array();
  const std::vector<std::pair<int, std::string>> specials = {{0, "<s>"}, {1, "<pad>"}, {2, "</s>"}, {3, "<unk>"},
                                                             {12, "<mask>"}};
  for (const auto& [id, content] : specials) {
    added.push_back({{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  json t = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", {{"type", "Sequence"},
                      {"normalizers", {{{"type", "NFKC"}}, {{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}},
                                                          {"content", " "}}}}}},
      {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"},
                         {"split", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                    {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
        {"pair", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                  {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}, {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "B"}, {"type_id", 0}}}}, {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {0}}, {"tokens", {"<s>"}}}},
                            {"</s>", {{"id", "</s>"}, {"ids", {2}}, {"tokens", {"</s>"}}}}}}}},
      {"decoder", {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}, {"split", true}}},
      {"model", {{"type", "Unigram"}, {"unk_id", 3}, {"vocab", vocab}, {"byte_fallback", false}}}};
  return t.dump();
}

TEST(UnigramModelTest, XlmRobertaStyleTokenizerJsonEndToEnd) {
  const std::map<std::string, std::string> files = {
      {"tokenizer.json", XlmrStyleTokenizerJson()},
      {"tokenizer_config.json",
       json{{"tokenizer_class", "XLMRobertaTokenizer"}, {"bos_token", "<s>"}, {"eos_token", "</s>"},
            {"cls_token", "<s>"}, {"sep_token", "</s>"}, {"pad_token", "<pad>"}, {"unk_token", "<unk>"},
            {"mask_token", "<mask>"}}
           .dump()}};
  auto tok = LoadTokenizerFromFiles(files);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  // "▁Hello" (-2) beats "▁He" + "llo" (-2.5); "▁wor" + "ld" (-8) loses to "▁world" (-5).
  auto ids = (*tok)->Encode("Hello world!");
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(*ids, (std::vector<int32_t>{5, 8, 9}));
  auto pair = (*tok)->EncodeWithSpecial("Hello", std::string_view("world"));
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  EXPECT_EQ(pair->ids, (std::vector<int32_t>{0, 5, 2, 2, 8, 2}));
  EXPECT_EQ(pair->type_ids, (std::vector<int32_t>(6, 0)));
  auto text = (*tok)->Decode(*ids);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "Hello world!");
  // An unknown character: one <unk>.
  ids = (*tok)->Encode("Hello \u65e5\u672c");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{5, 4, 3}));
}

// The fixture's tokenizer (trained by `tokenizers`) against its own ids for every case.
TEST(UnigramModelTest, FixtureTokenizerMatchesTransformers) {
  const std::string dir = testing::SourcePath("tests/fixtures/architectures/xlmr-tiny");
  if (!std::filesystem::exists(dir + "/tokenizer_cases.json")) {
    GTEST_SKIP() << "tests/fixtures/architectures/xlmr-tiny is not there yet (made by tools/fixtures/architectures.py)";
  }
  auto tok = LoadTokenizer(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  std::ifstream in(dir + "/tokenizer_cases.json");
  const json cases = json::parse(in);
  int checked = 0;
  for (const json& c : cases) {
    const std::string text = c["text"].get<std::string>();
    auto ids = (*tok)->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<int32_t>>()) << "text: '" << text << "'";
    ++checked;
  }
  EXPECT_GT(checked, 40);
}

}  // namespace
}  // namespace ferry::tokenizer
