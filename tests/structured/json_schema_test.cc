#include "structured/json_schema.h"

#include <gtest/gtest.h>

#include "structured/structured_test_util.h"

namespace ferry::structured {
namespace {

using json = nlohmann::ordered_json;

Grammar Schema(const std::string& text, bool ws = true) {
  auto g = JsonSchemaToGrammar(json::parse(text), JsonGrammarOptions{ws});
  EXPECT_TRUE(g.ok()) << text << ": " << g.status().message();
  return std::move(g).value();
}

std::string Refusal(const std::string& text) {
  auto g = JsonSchemaToGrammar(json::parse(text), JsonGrammarOptions{});
  return g.ok() ? "" : g.status().message();
}

TEST(JsonSchema, ObjectPropertiesRequiredAndOptional) {
  const Grammar g = Schema(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},
      "c":{"type":"boolean"}},"required":["a","c"],"additionalProperties":false})");
  EXPECT_TRUE(testing::Matches(g, R"({"a":1,"c":true})"));
  EXPECT_TRUE(testing::Matches(g, R"({ "a": -12, "b": "x y", "c": false })"));
  EXPECT_FALSE(testing::Matches(g, R"({"a":1})"));
  EXPECT_FALSE(testing::Matches(g, R"({"c":true})"));
  EXPECT_FALSE(testing::Matches(g, R"({"a":1,"c":true,})"));
  EXPECT_FALSE(testing::Matches(g, R"({"a":1.5,"c":true})"));
  EXPECT_FALSE(testing::Matches(g, R"({"a":1,"c":true} )"));  // nothing after the value
}

TEST(JsonSchema, AdditionalPropertiesSchema) {
  const Grammar g = Schema(R"({"type":"object","additionalProperties":{"type":"integer"}})");
  EXPECT_TRUE(testing::Matches(g, R"({})"));
  EXPECT_TRUE(testing::Matches(g, R"({"x":1,"y":2})"));
  EXPECT_FALSE(testing::Matches(g, R"({"x":"1"})"));
}

TEST(JsonSchema, ArraysWithBounds) {
  const Grammar g = Schema(R"({"type":"array","items":{"type":"null"},"minItems":1,"maxItems":3})");
  EXPECT_FALSE(testing::Matches(g, "[]"));
  EXPECT_TRUE(testing::Matches(g, "[null]"));
  EXPECT_TRUE(testing::Matches(g, "[null, null ,null]"));
  EXPECT_FALSE(testing::Matches(g, "[null,null,null,null]"));
  const Grammar any = Schema(R"({"type":"array"})");
  EXPECT_TRUE(testing::Matches(any, R"([1,"a",{"b":[true]},[]])"));
}

TEST(JsonSchema, StringsLengthsPatternsFormats) {
  const Grammar len = Schema(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_FALSE(testing::Matches(len, R"("a")"));
  EXPECT_TRUE(testing::Matches(len, R"("ab")"));
  EXPECT_TRUE(testing::Matches(len, R"("a\nb")"));  // an escape is one character
  EXPECT_TRUE(testing::Matches(len, R"("日本")"));
  EXPECT_FALSE(testing::Matches(len, R"("abcd")"));
  const Grammar pat = Schema(R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"})");
  EXPECT_TRUE(testing::Matches(pat, R"("AB-123")"));
  EXPECT_FALSE(testing::Matches(pat, R"("AB-12")"));
  const Grammar date = Schema(R"({"type":"string","format":"date"})");
  EXPECT_TRUE(testing::Matches(date, R"("2024-02-28")"));
  EXPECT_FALSE(testing::Matches(date, R"("2024-02-30")"));
  EXPECT_FALSE(testing::Matches(date, R"("2024-13-01")"));
  const Grammar uuid = Schema(R"({"format":"uuid"})");
  EXPECT_TRUE(testing::Matches(uuid, R"("123e4567-e89b-12d3-a456-426614174000")"));
  const Grammar dt = Schema(R"({"type":"string","format":"date-time"})");
  EXPECT_TRUE(testing::Matches(dt, R"("2024-01-31T23:59:59.5+01:00")"));
  const Grammar email = Schema(R"({"type":"string","format":"email"})");
  EXPECT_TRUE(testing::Matches(email, R"("a.b@example.org")"));
  EXPECT_FALSE(testing::Matches(email, R"("a.b")"));
}

TEST(JsonSchema, NumbersAndRanges) {
  const Grammar i = Schema(R"({"type":"integer","minimum":-15,"maximum":120})");
  for (int v = -20; v <= 130; ++v) {
    EXPECT_EQ(testing::Matches(i, std::to_string(v)), v >= -15 && v <= 120) << v;
  }
  EXPECT_FALSE(testing::Matches(i, "007"));
  EXPECT_FALSE(testing::Matches(i, "-0"));
  const Grammar x = Schema(R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10})");
  EXPECT_FALSE(testing::Matches(x, "0"));
  EXPECT_TRUE(testing::Matches(x, "9"));
  EXPECT_FALSE(testing::Matches(x, "10"));
  const Grammar n = Schema(R"({"type":"number","minimum":-2,"maximum":3})");
  for (const char* ok : {"-2", "-1.5", "-0.25", "0", "2.999", "3"}) EXPECT_TRUE(testing::Matches(n, ok)) << ok;
  for (const char* bad : {"-2.5", "3.5", "4", "-3", "1e3"}) EXPECT_FALSE(testing::Matches(n, bad)) << bad;
  const Grammar any = Schema(R"({"type":"number"})");
  for (const char* ok : {"0", "-0.5", "12e3", "1.25E-7"}) EXPECT_TRUE(testing::Matches(any, ok)) << ok;
  for (const char* bad : {"01", ".5", "1.", "+1", "1e"}) EXPECT_FALSE(testing::Matches(any, bad)) << bad;
}

TEST(JsonSchema, EnumConstAnyOfRefs) {
  const Grammar e = Schema(R"({"enum":["red","green",3,null]})");
  EXPECT_TRUE(testing::Matches(e, R"("green")"));
  EXPECT_TRUE(testing::Matches(e, "3"));
  EXPECT_FALSE(testing::Matches(e, R"("blue")"));
  const Grammar c = Schema(R"({"const":{"k":[1,2]}})");
  EXPECT_TRUE(testing::Matches(c, R"({"k":[1,2]})"));
  const Grammar tree = Schema(R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{
      "v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}}})");
  EXPECT_TRUE(testing::Matches(tree, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4}]}]})"));
  EXPECT_FALSE(testing::Matches(tree, R"({"v":1,"kids":[{"w":2}]})"));
  const Grammar any = Schema(R"({"anyOf":[{"type":"string","maxLength":1},{"type":"integer"}]})");
  EXPECT_TRUE(testing::Matches(any, R"("a")"));
  EXPECT_TRUE(testing::Matches(any, "12"));
  EXPECT_FALSE(testing::Matches(any, "true"));
  const Grammar types = Schema(R"({"type":["string","null"]})");
  EXPECT_TRUE(testing::Matches(types, "null"));
}

TEST(JsonSchema, WhitespaceRules) {
  const Grammar compact = Schema(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})", false);
  EXPECT_TRUE(testing::Matches(compact, R"({"a":1})"));
  EXPECT_FALSE(testing::Matches(compact, R"({ "a":1})"));
  const Grammar loose = Schema(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})");
  EXPECT_TRUE(testing::Matches(loose, "{\n  \"a\": 1\n}"));
  EXPECT_TRUE(testing::Matches(loose, "{ \"a\" : 1 }"));
  EXPECT_FALSE(testing::Matches(loose, "{  \"a\":1}"));  // no padding with blanks
  EXPECT_TRUE(testing::Matches(loose, "{\n" + std::string(JsonGrammarOptions::kMaxIndent, ' ') + "\"a\":1}"));
  EXPECT_FALSE(testing::Matches(loose, "{\n" + std::string(JsonGrammarOptions::kMaxIndent + 1, ' ') + "\"a\":1}"));
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  EXPECT_NE(Refusal(R"({"type":"string","contentSchema":{}})").find("'contentSchema'"), std::string::npos);
  EXPECT_NE(Refusal(R"({"type":"object","patternProperties":{"a":{}}})").find("'patternProperties'"), std::string::npos);
  EXPECT_NE(Refusal(R"({"type":"number","multipleOf":3})").find("'multipleOf'"), std::string::npos);
  EXPECT_NE(Refusal(R"({"type":"array","items":{"type":"integer","not":{}}})").find("#/items"), std::string::npos);
  EXPECT_NE(Refusal(R"({"type":"string","format":"hostname"})").find("hostname"), std::string::npos);
  EXPECT_NE(Refusal(R"({"$ref":"#/$defs/missing"})").find("does not resolve"), std::string::npos);
  EXPECT_NE(Refusal(R"({"type":"array","uniqueItems":true})").find("uniqueItems"), std::string::npos);
  EXPECT_NE(Refusal(R"({"type":"object","properties":{},"required":["x"]})").find("'x'"), std::string::npos);
  EXPECT_FALSE(Refusal(R"({"type":"string","pattern":"(a)\\1"})").empty());
  EXPECT_EQ(Refusal(R"({"title":"t","description":"d","type":"boolean"})"), "");
}

TEST(JsonSchema, JsonObjectAcceptsAnyObject) {
  auto g = JsonObjectGrammar(JsonGrammarOptions{});
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(testing::Matches(g.value(), R"({"a":[1,{"b":null}],"c":"d"})"));
  EXPECT_FALSE(testing::Matches(g.value(), R"([1])"));
  EXPECT_FALSE(testing::Matches(g.value(), R"({"a":})"));
}

}  // namespace
}  // namespace ferry::structured
