// Untrusted JSON: the nesting bound holds before nlohmann sees the text, brackets inside
// strings do not count, and error snippets stay short whatever the value.
#include <gtest/gtest.h>

#include <string>

#include "core/json_limits.h"

namespace ferry {
namespace {

std::string Nested(int depth, const std::string& inner = "1") {
  return std::string(static_cast<size_t>(depth), '[') + inner + std::string(static_cast<size_t>(depth), ']');
}

TEST(JsonNestingDepthTest, CountsArraysAndObjects) {
  EXPECT_EQ(JsonNestingDepth("1", 10), 0);
  EXPECT_EQ(JsonNestingDepth("[]", 10), 1);
  EXPECT_EQ(JsonNestingDepth(R"({"a": [1, {"b": [2]}], "c": {}})", 10), 4);
  EXPECT_EQ(JsonNestingDepth(Nested(7), 10), 7);
}

TEST(JsonNestingDepthTest, BracketsInsideStringsDoNotCount) {
  EXPECT_EQ(JsonNestingDepth(R"(["[[[[{{{{", "\"[[[", "\\"])", 10), 1);
  // An escaped backslash ends the escape: the quote after it closes the string.
  EXPECT_EQ(JsonNestingDepth(R"(["\\", [[1]]])", 10), 3);
}

TEST(JsonNestingDepthTest, StopsPastTheLimit) {
  EXPECT_EQ(JsonNestingDepth(Nested(100000), 128), 129);
  EXPECT_EQ(JsonNestingDepth(Nested(128), 128), 128);
}

TEST(ParseUntrustedJsonTest, ParsesWhatIsWithinTheLimit) {
  auto j = ParseUntrustedJson(R"({"shape": [[1, 2], [3]]})");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ((*j)["shape"][0][1], 2);
  EXPECT_TRUE(ParseUntrustedJson(Nested(kMaxJsonDepth)).ok());
}

TEST(ParseUntrustedJsonTest, RefusesDeepNestingWithAClearError) {
  for (const std::string& text : {Nested(kMaxJsonDepth + 1), Nested(100000), "{\"shape\": " + Nested(100000) + "}"}) {
    auto j = ParseUntrustedJson(text);
    ASSERT_FALSE(j.ok());
    EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(j.status().message().find("nested deeper than 128 levels"), std::string::npos) << j.status().message();
  }
  EXPECT_FALSE(ParseUntrustedJson(Nested(5), 4).ok());
  EXPECT_TRUE(ParseUntrustedJson(Nested(4), 4).ok());
}

TEST(ParseUntrustedJsonTest, SyntaxErrorsAreShortAndNeverThrow) {
  auto j = ParseUntrustedJson("{\"a\": " + std::string(100000, 'x') + "}");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument);
  EXPECT_LT(j.status().message().size(), 300u);
  EXPECT_FALSE(ParseUntrustedJson("").ok());
  EXPECT_FALSE(ParseUntrustedJson("[1, 2").ok());
  // Unbalanced closing brackets are the parser's to report, not the depth scan's.
  EXPECT_FALSE(ParseUntrustedJson("]]]]").ok());
}

TEST(ParseStrictJsonTest, BuildsTheSameValueAsTheParser) {
  const std::string text =
      R"({"a": [1, -2, 3.5, true, null, "x\u00e9"], "b": {"c": {"d": []}, "e": {}}, "f": 18446744073709551615})";
  auto got = ParseStrictJson(text);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, nlohmann::json::parse(text));
  EXPECT_EQ(*ParseStrictJson("[]"), nlohmann::json::array());
  EXPECT_EQ(*ParseStrictJson("\"s\""), nlohmann::json("s"));
}

// Parsers disagree on repeated keys (nlohmann keeps the last, others the first): a request
// that means two things is refused, at any depth.
TEST(ParseStrictJsonTest, RepeatedKeysAreRefused) {
  for (const char* text : {R"({"model": "a", "model": "b"})", R"({"x": {"k": 1, "k": 2}})",
                           R"([{"a": 1}, {"b": 2, "b": 3}])"}) {
    auto got = ParseStrictJson(text);
    ASSERT_FALSE(got.ok()) << text;
    EXPECT_NE(got.status().message().find("appears twice"), std::string::npos) << got.status().message();
  }
  EXPECT_TRUE(ParseStrictJson(R"({"k": 1, "o": {"k": 2}})").ok()) << "the same key in two objects is fine";
}

TEST(ParseStrictJsonTest, NumbersThatDoNotFitAreRefusedNotThrown) {
  for (const std::string& text : {std::string(R"({"n": 1e400})"), std::string(R"({"t": -1e309})"),
                                  R"({"n": )" + std::string(10000, '9') + "}"}) {
    auto got = ParseStrictJson(text);
    ASSERT_FALSE(got.ok()) << text.substr(0, 40);
    EXPECT_NE(got.status().message().find("out of range"), std::string::npos) << got.status().message();
    EXPECT_LT(got.status().message().size(), 200u);
  }
  EXPECT_TRUE(ParseStrictJson(R"({"n": 1e300})").ok());
}

TEST(ParseStrictJsonTest, DeepNestingAndSyntaxErrors) {
  EXPECT_FALSE(ParseStrictJson(std::string(100000, '[')).ok());
  EXPECT_FALSE(ParseStrictJson("{\"a\": }").ok());
  EXPECT_FALSE(ParseStrictJson("").ok());
  EXPECT_FALSE(ParseStrictJson("{} {}").ok());
}

TEST(JsonSnippetTest, SmallValuesReadAsCompactJson) {
  EXPECT_EQ(JsonSnippet(nlohmann::json::parse(R"({"a": [1, 2], "b": "x"})")), R"({"a":[1,2],"b":"x"})");
  EXPECT_EQ(JsonSnippet(nlohmann::json(-3)), "-3");
  EXPECT_EQ(JsonSnippet(nlohmann::json::array()), "[]");
  EXPECT_EQ(JsonSnippet(nlohmann::json(nullptr)), "null");
}

TEST(JsonSnippetTest, LargeAndDeepValuesAreCut) {
  const std::string cut = JsonSnippet(nlohmann::json(std::string(10000, 'a')), 20);
  EXPECT_EQ(cut, "\"" + std::string(19, 'a') + "...");
  nlohmann::json wide = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) wide.push_back(i);
  EXPECT_LE(JsonSnippet(wide).size(), 64u + 3u);
  // Built level by level (nlohmann parses iteratively; dump() of this would overflow the
  // stack). The snippet descends only as far as its budget.
  nlohmann::json deep = 1;
  for (int i = 0; i < 100000; ++i) {
    nlohmann::json outer = nlohmann::json::array();
    outer.push_back(std::move(deep));
    deep = std::move(outer);
  }
  EXPECT_EQ(JsonSnippet(deep, 10), std::string(10, '[') + "...");
}

}  // namespace
}  // namespace ferry
