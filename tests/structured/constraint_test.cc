#include "structured/constraint.h"

#include <gtest/gtest.h>

#include "structured/structured_test_util.h"

namespace ferry::structured {
namespace {

TEST(Constraint, EveryKindCompiles) {
  Constraint c;
  c.kind = ConstraintKind::kChoice;
  c.choices = {"positive", "negative"};
  auto g = CompileConstraint(c);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(testing::Matches(g.value(), "negative"));
  EXPECT_FALSE(testing::Matches(g.value(), "neutral"));
  c.kind = ConstraintKind::kRegex;
  c.text = "[0-9]{3}";
  ASSERT_TRUE(CompileConstraint(c).ok());
  c.kind = ConstraintKind::kGrammar;
  c.text = "root ::= \"a\"+";
  ASSERT_TRUE(CompileConstraint(c).ok());
  c.kind = ConstraintKind::kJsonSchema;
  c.text = "{\"type\":\"integer\"}";
  ASSERT_TRUE(CompileConstraint(c).ok());
  c.text = "{not json";
  EXPECT_FALSE(CompileConstraint(c).ok());
  c.kind = ConstraintKind::kChoice;
  c.choices.clear();
  EXPECT_FALSE(CompileConstraint(c).ok());
}

TEST(GrammarCache, CachesByKeyAndEvictsLeastRecent) {
  GrammarCache cache(testing::ByteVocab(), 2);
  Constraint a{ConstraintKind::kRegex, "a+"};
  Constraint b{ConstraintKind::kRegex, "b+"};
  Constraint c{ConstraintKind::kRegex, "c+"};
  auto first = cache.Get(a);
  ASSERT_TRUE(first.ok());
  auto again = cache.Get(a);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(first.value().get(), again.value().get());
  EXPECT_EQ(cache.hits(), 1u);
  ASSERT_TRUE(cache.Get(b).ok());
  ASSERT_TRUE(cache.Get(c).ok());  // evicts a
  auto third = cache.Get(a);
  ASSERT_TRUE(third.ok());
  EXPECT_NE(first.value().get(), third.value().get());
  EXPECT_EQ(cache.misses(), 4u);
  Constraint nows = a;
  nows.any_whitespace = false;
  EXPECT_NE(a.Key(), nows.Key());
}

}  // namespace
}  // namespace ferry::structured
