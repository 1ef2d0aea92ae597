#include "structured/regex.h"

#include <gtest/gtest.h>

#include "structured/structured_test_util.h"

namespace ferry::structured {
namespace {

Grammar Compile(const std::string& pattern, bool json_string = false) {
  GrammarBuilder b;
  auto r = AddRegex(b, pattern, RegexOptions{.json_string = json_string});
  EXPECT_TRUE(r.ok()) << pattern << ": " << r.status().message();
  auto g = b.Build(r.value());
  EXPECT_TRUE(g.ok());
  return std::move(g).value();
}

bool M(const std::string& pattern, const std::string& text) { return testing::Matches(Compile(pattern), text); }

TEST(Regex, LiteralsClassesAndQuantifiers) {
  EXPECT_TRUE(M("abc", "abc"));
  EXPECT_FALSE(M("abc", "abcd"));
  EXPECT_TRUE(M("^a[0-9]{2,3}$", "a123"));
  EXPECT_FALSE(M("a[0-9]{2,3}", "a1"));
  EXPECT_FALSE(M("a[0-9]{2,3}", "a1234"));
  EXPECT_TRUE(M("\\d+-\\w*", "42-ab_9"));
  EXPECT_TRUE(M("(cat|dog)s?", "dogs"));
  EXPECT_FALSE(M("(cat|dog)s?", "cow"));
  EXPECT_TRUE(M("[^x]y", "zy"));
  EXPECT_FALSE(M("[^x]y", "xy"));
  EXPECT_TRUE(M("[^x]y", "éy"));
  EXPECT_TRUE(M("a.c", "a日c"));
  EXPECT_FALSE(M("a.c", "a\nc"));
  EXPECT_TRUE(M("(?:ab)+?", "abab"));
  EXPECT_TRUE(M("(?P<year>\\d{4})", "2024"));
  EXPECT_TRUE(M("x{3}", "xxx"));
  EXPECT_TRUE(M("x{2,}", "xxxxx"));
  EXPECT_TRUE(M("[\\]a-]+", "]-a"));
  EXPECT_TRUE(M("\\u00e9\\x41", "éA"));
  EXPECT_TRUE(M("a|", ""));
  EXPECT_TRUE(M("[é日]", "日"));
}

TEST(Regex, RefusesWhatItCannotMatchExactly) {
  for (const char* p : {"(a)\\1", "(?=a)a", "\\bword", "a++", "[é-ü]", "[^é]", "a^b", "(a", "a)", "*a", "a$b"}) {
    GrammarBuilder b;
    EXPECT_FALSE(AddRegex(b, p, RegexOptions{}).ok()) << p;
  }
}

TEST(Regex, HostileInputIsRefusedNotExpanded) {
  GrammarBuilder deep;
  EXPECT_FALSE(AddRegex(deep, std::string(5000, '(') + "a" + std::string(5000, ')'), RegexOptions{}).ok());
  GrammarBuilder huge;
  auto r = AddRegex(huge, "(" + std::string(300, 'x') + "){10000}", RegexOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("too large"), std::string::npos) << r.status().message();
  // A long chain of rules (a bounded repetition) builds without deep recursion.
  GrammarBuilder chain;
  auto c = AddRegex(chain, "a{0,10000}", RegexOptions{});
  ASSERT_TRUE(c.ok());
  auto g = chain.Build(c.value());
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(testing::Matches(g.value(), std::string(9999, 'a')));
}

TEST(Regex, JsonStringModeEscapes) {
  const Grammar g = Compile("a[\"\\\\]\\n.", /*json_string=*/true);
  EXPECT_TRUE(testing::Matches(g, "a\\\"\\nx"));
  EXPECT_TRUE(testing::Matches(g, "a\\\\\\n\\\""));
  EXPECT_FALSE(testing::Matches(g, "a\"\\nx"));  // a raw quote would end the JSON string
  EXPECT_FALSE(testing::Matches(g, "a\\\"\nx"));  // a raw newline is not allowed in JSON
}

}  // namespace
}  // namespace ferry::structured
