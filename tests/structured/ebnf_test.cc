#include "structured/ebnf.h"

#include <gtest/gtest.h>

#include "structured/structured_test_util.h"

namespace ferry::structured {
namespace {

TEST(Ebnf, ParsesTheDocumentedExample) {
  auto g = ParseEbnf(R"(
# a flat object of small numbers and booleans
root   ::= "{" ws pair ("," ws pair)* ws "}"
pair   ::= key ws ":" ws value
key    ::= "\"" [a-z_]{1,16} "\""
value  ::= [0-9]+ | "true" | "false"
ws     ::= [ \t\n]{0,8}
)");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(testing::Matches(g.value(), R"({"a": 1, "b_c":true})"));
  EXPECT_FALSE(testing::Matches(g.value(), R"({"a": 1,})"));
  EXPECT_FALSE(testing::Matches(g.value(), R"({"A": 1})"));
}

TEST(Ebnf, RootIsNamedRootElseFirstAndRecursionWorks) {
  auto g = ParseEbnf("list ::= \"(\" item* \")\"\nitem ::= \"x\" | list\n");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(testing::Matches(g.value(), "(x(x())x)"));
  EXPECT_FALSE(testing::Matches(g.value(), "(x(x()x)"));
  auto r = ParseEbnf("a ::= \"a\"\nroot ::= a a 'b'\n");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(testing::Matches(r.value(), "aab"));
}

TEST(Ebnf, ErrorsNameTheLineOrRule) {
  auto undefined = ParseEbnf("root ::= thing\n");
  ASSERT_FALSE(undefined.ok());
  EXPECT_NE(undefined.status().message().find("thing"), std::string::npos);
  auto bad = ParseEbnf("root ::= \"a\"\n\nroot2 = \"b\"\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 3"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(ParseEbnf("root ::= \"a\"\nroot ::= \"b\"\n").ok());
  EXPECT_FALSE(ParseEbnf("root ::= root \"a\" | \"b\"\n").ok());  // left recursion
  EXPECT_FALSE(ParseEbnf("").ok());
}

}  // namespace
}  // namespace ferry::structured
