#include "structured/grammar.h"

#include <gtest/gtest.h>

#include "structured/structured_test_util.h"

namespace ferry::structured {
namespace {

using testing::Matches;

TEST(GrammarBuilder, RepeatBounds) {
  GrammarBuilder b;
  auto r = b.Repeat("ab", b.Literal("ab"), 2, 3);
  ASSERT_TRUE(r.ok());
  auto g = b.Build(r.value());
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_FALSE(Matches(g.value(), "ab"));
  EXPECT_TRUE(Matches(g.value(), "abab"));
  EXPECT_TRUE(Matches(g.value(), "ababab"));
  EXPECT_FALSE(Matches(g.value(), "abababab"));
  EXPECT_FALSE(Matches(g.value(), "aba"));
}

TEST(GrammarBuilder, UnboundedRepeatAndStar) {
  GrammarBuilder b;
  auto r = b.Repeat("x", b.Literal("x"), 1, -1);
  ASSERT_TRUE(r.ok());
  auto g = b.Build(r.value());
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(Matches(g.value(), ""));
  EXPECT_TRUE(Matches(g.value(), "x"));
  EXPECT_TRUE(Matches(g.value(), std::string(5000, 'x')));
}

TEST(GrammarBuilder, RefusesLeftRecursionAndUndefinedRules) {
  GrammarBuilder b;
  const int32_t e = b.AddRule("expr");
  b.AddAlternative(e, {GrammarBuilder::Ref(e), b.Byte('+'), b.Byte('1')});
  b.AddAlternative(e, {b.Byte('1')});
  auto g = b.Build(e);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("left-recursive"), std::string::npos) << g.status().message();

  GrammarBuilder b2;
  const int32_t r = b2.AddRule("root");
  const int32_t missing = b2.AddRule("missing");
  b2.AddAlternative(r, {GrammarBuilder::Ref(missing)});
  auto g2 = b2.Build(r);
  ASSERT_FALSE(g2.ok());
  EXPECT_NE(g2.status().message().find("missing"), std::string::npos);
}

TEST(GrammarBuilder, RefusesHugeRepetition) {
  GrammarBuilder b;
  EXPECT_FALSE(b.Repeat("x", b.Literal("x"), 0, GrammarBuilder::kMaxRepeat + 1).ok());
}

TEST(GrammarBuilder, AnyUtf8CharAcceptsValidUtf8Only) {
  GrammarBuilder b;
  ByteSet excluded;
  excluded.set('"');
  const int32_t c = AnyUtf8Char(b, excluded, "c");
  auto g = b.Build(b.Star("s", {GrammarBuilder::Ref(c)}));
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(Matches(g.value(), "plain é 日本 \xF0\x9F\x98\x80"));
  EXPECT_FALSE(Matches(g.value(), "a\"b"));
  EXPECT_FALSE(Matches(g.value(), "\xC3"));          // truncated
  EXPECT_FALSE(Matches(g.value(), "\xED\xA0\x80"));  // a surrogate
  EXPECT_FALSE(Matches(g.value(), "\xC0\xAF"));      // overlong
}

TEST(Grammar, HashDiffersWithStructure) {
  GrammarBuilder a, b;
  auto ga = a.Build(a.Choice("r", {a.Literal("yes")}));
  auto gb = b.Build(b.Choice("r", {b.Literal("yep")}));
  ASSERT_TRUE(ga.ok() && gb.ok());
  EXPECT_NE(ga.value().Hash(), gb.value().Hash());
}

}  // namespace
}  // namespace ferry::structured
