// Pre-tokenizers and normalizers built from their tokenizer.json objects.
#include "tokenizer/pre_tokenizers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tokenizer/normalizers.h"
#include "tokenizer/regex.h"

namespace ferry::tokenizer {
namespace {

using ::testing::ElementsAre;

constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::vector<std::string> Split(const Json& config, const std::string& text, bool at_start = true) {
  auto pre_tokenizer = MakePreTokenizer(config);
  EXPECT_TRUE(pre_tokenizer.ok()) << pre_tokenizer.status().ToString();
  if (!pre_tokenizer.ok()) return {};
  std::vector<PreToken> pieces = {{text, at_start}};
  const Status status = (*pre_tokenizer)->PreTokenize(&pieces);
  EXPECT_TRUE(status.ok()) << status.ToString();
  std::vector<std::string> out;
  for (const PreToken& p : pieces) out.push_back(p.text);
  return out;
}

Json SplitConfig(const std::string& pattern, const std::string& behavior, bool invert = false) {
  return {{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", behavior}, {"invert", invert}};
}

TEST(PreTokenizerTest, ByteLevelGpt2Split) {
  const Json config = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  EXPECT_THAT(Split(config, "Hello my friend, how's it?"),
              ElementsAre("Hello", "Ġmy", "Ġfriend", ",", "Ġhow", "'s", "Ġit", "?"));
  EXPECT_THAT(Split(config, "a  \n b"), ElementsAre("a", "ĠĠĊ", "Ġb"));
  const Json prefixed = {{"type", "ByteLevel"}, {"add_prefix_space", true}};
  EXPECT_THAT(Split(prefixed, "Hey"), ElementsAre("ĠHey"));
}

TEST(PreTokenizerTest, Llama3SplitRegex) {
  const Json config = SplitConfig(kLlama3Pattern, "Isolated");
  EXPECT_THAT(Split(config, "Hello WORLD'S 12345 ok!!\n\n  x"),
              ElementsAre("Hello", " WORLD", "'S", " ", "123", "45", " ok", "!!\n\n", " ", " x"));
  EXPECT_THAT(Split(config, "a\r\n\r\nb  "), ElementsAre("a", "\r\n\r\n", "b", "  "));
  // \s covers U+0085 and U+3000 as in Oniguruma.
  EXPECT_THAT(Split(config, "x\u3000\u3000y"), ElementsAre("x", "\u3000", "\u3000y"));
}

TEST(PreTokenizerTest, SplitBehaviors) {
  const std::string text = "a-b--c";
  EXPECT_THAT(Split(SplitConfig("-", "Removed"), text), ElementsAre("a", "b", "c"));
  EXPECT_THAT(Split(SplitConfig("-", "Isolated"), text), ElementsAre("a", "-", "b", "-", "-", "c"));
  EXPECT_THAT(Split(SplitConfig("-", "MergedWithPrevious"), text), ElementsAre("a-", "b-", "-", "c"));
  EXPECT_THAT(Split(SplitConfig("-", "MergedWithNext"), text), ElementsAre("a", "-b", "-", "-c"));
  EXPECT_THAT(Split(SplitConfig("-", "Contiguous"), text), ElementsAre("a", "-", "b", "--", "c"));
  EXPECT_THAT(Split(SplitConfig("-", "Removed", /*invert=*/true), text), ElementsAre("-", "-", "-"));
  const Json literal = {{"type", "Split"}, {"pattern", {{"String", "."}}}, {"behavior", "Removed"}};
  EXPECT_THAT(Split(literal, "a.b+c"), ElementsAre("a", "b+c"));
}

TEST(PreTokenizerTest, Metaspace) {
  const Json always = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}};
  EXPECT_THAT(Split(always, "Hey  friend!"), ElementsAre("▁Hey", "▁", "▁friend!"));
  EXPECT_THAT(Split(always, " Hey"), ElementsAre("▁Hey"));
  const Json no_split = {{"type", "Metaspace"}, {"prepend_scheme", "always"}, {"split", false}};
  EXPECT_THAT(Split(no_split, "Hey friend"), ElementsAre("▁Hey▁friend"));
  const Json first = {{"type", "Metaspace"}, {"prepend_scheme", "first"}, {"split", true}};
  EXPECT_THAT(Split(first, "a b", /*at_start=*/true), ElementsAre("▁a", "▁b"));
  EXPECT_THAT(Split(first, "a b", /*at_start=*/false), ElementsAre("a", "▁b"));
  const Json never = {{"type", "Metaspace"}, {"prepend_scheme", "never"}, {"split", true}};
  EXPECT_THAT(Split(never, "a b"), ElementsAre("a", "▁b"));
  const Json legacy = {{"type", "Metaspace"}, {"replacement", "▁"}, {"add_prefix_space", false}};
  EXPECT_THAT(Split(legacy, "a b"), ElementsAre("a", "▁b"));
}

TEST(PreTokenizerTest, BertWhitespaceDigitsPunctuation) {
  EXPECT_THAT(Split({{"type", "BertPreTokenizer"}}, " Hello,  y'all!\tok "),
              ElementsAre("Hello", ",", "y", "'", "all", "!", "ok"));
  EXPECT_THAT(Split({{"type", "Whitespace"}}, "Hey friend!! naïve"),
              ElementsAre("Hey", "friend", "!!", "naïve"));
  EXPECT_THAT(Split({{"type", "WhitespaceSplit"}}, " a\u00A0b\nc "), ElementsAre("a", "b", "c"));
  EXPECT_THAT(Split({{"type", "Digits"}, {"individual_digits", true}}, "a123b"),
              ElementsAre("a", "1", "2", "3", "b"));
  EXPECT_THAT(Split({{"type", "Digits"}, {"individual_digits", false}}, "a123b"),
              ElementsAre("a", "123", "b"));
  EXPECT_THAT(Split({{"type", "Punctuation"}, {"behavior", "MergedWithPrevious"}}, "hi!? yo"),
              ElementsAre("hi!", "?", " yo"));
  const Json sequence = {{"type", "Sequence"},
                         {"pretokenizers", Json::array({{{"type", "WhitespaceSplit"}},
                                                        {{"type", "Digits"}, {"individual_digits", true}}})}};
  EXPECT_THAT(Split(sequence, "ab12 c3"), ElementsAre("ab", "1", "2", "c", "3"));
}

TEST(PreTokenizerTest, UnknownTypeAndBadRegexAreErrors) {
  EXPECT_EQ(MakePreTokenizer({{"type", "UnicodeScripts2"}}).status().code(), StatusCode::kUnimplemented);
  auto bad = MakePreTokenizer(SplitConfig("(unclosed", "Isolated"));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("(unclosed"));
}

std::string Normalized(const Json& config, std::string text) {
  auto normalizer = MakeNormalizer(config);
  EXPECT_TRUE(normalizer.ok()) << normalizer.status().ToString();
  if (!normalizer.ok()) return {};
  EXPECT_TRUE((*normalizer)->Normalize(&text).ok());
  return text;
}

TEST(NormalizerTest, Variants) {
  const Json bert = {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true},
                     {"strip_accents", nullptr}, {"lowercase", true}};
  EXPECT_EQ(Normalized(bert, "Héllo\tWörld\x01我们"), "hello world 我  们 ");
  const Json bert_cased = {{"type", "BertNormalizer"}, {"lowercase", false}};
  EXPECT_EQ(Normalized(bert_cased, "Héllo"), "Héllo");
  EXPECT_EQ(Normalized({{"type", "Lowercase"}}, "ÀB"), "àb");
  EXPECT_EQ(Normalized({{"type", "NFD"}}, "é"), "e\xCC\x81");
  EXPECT_EQ(Normalized({{"type", "NFKC"}}, "ﬁ"), "fi");
  EXPECT_EQ(Normalized({{"type", "Sequence"}, {"normalizers", Json::array({{{"type", "NFD"}}, {{"type", "StripAccents"}}})}},
                       "café"),
            "cafe");
  EXPECT_EQ(Normalized({{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}, " \u3000a "), "a ");
  EXPECT_EQ(Normalized({{"type", "Prepend"}, {"prepend", "▁"}}, "a"), "▁a");
  EXPECT_EQ(Normalized({{"type", "Prepend"}, {"prepend", "▁"}}, ""), "");
  EXPECT_EQ(Normalized({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}, "a b c"), "a▁b▁c");
  EXPECT_EQ(Normalized({{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", " "}}, "a   b"), "a b");
}

TEST(RegexTest, TranslatesOnigurumaClasses) {
  EXPECT_EQ(TranslateOnigurumaPattern(R"(\s+)"), R"([\s\x{85}]+)");
  EXPECT_EQ(TranslateOnigurumaPattern(R"([^\s\p{L}])"), R"([^\s\x{85}\p{L}])");
  EXPECT_EQ(TranslateOnigurumaPattern(R"(\\s)"), R"(\\s)");
  auto regex = Regex::Compile(R"(\w+)");
  ASSERT_TRUE(regex.ok());
  std::vector<Regex::Match> matches;
  ASSERT_TRUE(regex->FindAll("nai\xCC\x88ve x", &matches).ok());
  ASSERT_EQ(matches.size(), 2u);  // the combining diaeresis stays inside the word
  EXPECT_EQ(matches[0].end, 7u);
}

}  // namespace
}  // namespace ferry::tokenizer
