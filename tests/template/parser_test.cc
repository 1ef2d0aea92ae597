#include "template/parser.h"

#include <gtest/gtest.h>

#include "template/render_util.h"

namespace ferry::jinja {
namespace {

std::string SyntaxError(const std::string& source) {
  auto tokens = Tokenize(source);
  if (!tokens.ok()) return tokens.status().message();
  auto body = Parse(*tokens);
  return body.ok() ? "" : body.status().message();
}

TEST(ParserTest, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(SyntaxError("{% if true %}x"),
            "TemplateSyntaxError: unexpected end of template; Jinja was looking for 'elif' or 'else' or 'endif' "
            "(line 1, column 15)");
  EXPECT_EQ(SyntaxError("a\n{% endfor %}"), "TemplateSyntaxError: Encountered unknown tag 'endfor'. (line 2, column 4)");
  EXPECT_EQ(SyntaxError("{% do x %}"), "TemplateSyntaxError: Encountered unknown tag 'do'. (line 1, column 4)");
  EXPECT_EQ(SyntaxError("{{ 1 + }}"), "TemplateSyntaxError: unexpected 'end of print statement' (line 1, column 8)");
  EXPECT_EQ(SyntaxError("{% for x of y %}{% endfor %}"),
            "TemplateSyntaxError: expected 'in' in a for loop (line 1, column 10)");
  EXPECT_EQ(SyntaxError("{% break %}"), "TemplateSyntaxError: 'break' outside of a for loop (line 1, column 4)");
  EXPECT_EQ(SyntaxError("{% macro m(a=1, b) %}{% endmacro %}"),
            "TemplateSyntaxError: non-default argument follows default argument (line 1, column 17)");
  EXPECT_EQ(SyntaxError("{% include 'x.jinja' %}"),
            "TemplateSyntaxError: 'include' is not available: a chat template cannot load other templates "
            "(line 1, column 4)");
  EXPECT_EQ(SyntaxError("{% set 1 = 2 %}"), "TemplateSyntaxError: cannot assign to this expression (line 1, column 10)");
  EXPECT_EQ(SyntaxError("{{ x is defined is string }}"),
            "TemplateSyntaxError: You cannot chain multiple tests with is (line 1, column 17)");
  EXPECT_EQ(SyntaxError("{% block a %}{% endblock b %}"),
            "TemplateSyntaxError: mismatching name with endblock tag: 'b' (line 1, column 26)");
}

TEST(ParserTest, NestingIsBounded) {
  std::string deep;
  for (int i = 0; i < 1000; ++i) deep += "(";
  deep = "{{ " + deep + "1";
  for (int i = 0; i < 1000; ++i) deep += ")";
  deep += " }}";
  EXPECT_NE(SyntaxError(deep).find("nests too deeply"), std::string::npos);
  std::string blocks;
  for (int i = 0; i < 1000; ++i) blocks += "{% if true %}";
  for (int i = 0; i < 1000; ++i) blocks += "{% endif %}";
  EXPECT_NE(SyntaxError(blocks).find("nests too deeply"), std::string::npos);
  std::string ok;
  for (int i = 0; i < 50; ++i) ok += "{% if true %}";
  ok += "x";
  for (int i = 0; i < 50; ++i) ok += "{% endif %}";
  EXPECT_EQ(Render(ok), "x");
}

TEST(ParserTest, PrecedenceFollowsJinja) {
  // Filters bind tighter than unary minus' operand (-x|abs is abs(-x)); `not` binds looser
  // than comparisons; `~` sits between + and *.
  EXPECT_EQ(Render("{{ -3|abs }}|{{ not 1 == 2 }}|{{ 2 * 3 ~ 4 }}|{{ 2 ** 3 ** 2 }}|{{ 1 if true else 2 ~ 'x' }}"),
            "3|True|64|64|1");
  EXPECT_EQ(ErrorKind(Render("{{ 1 + 2 ~ 3 }}")), "TypeError");  // 1 + (2 ~ 3): + binds looser than ~
  EXPECT_EQ(Render("{{ [1, 2,] }}{{ {'a': 1,} }}{{ f if false }}"), "[1, 2]{'a': 1}");
  EXPECT_EQ(Render("{% for x in [1, 2] if x > 1 %}{{ x }}{% endfor %}"), "2");
  EXPECT_EQ(Render("{{ 'a' if 'b' in 'abc' and not false else 'c' }}"), "a");
  EXPECT_EQ(Render("{{ d . a }}{{ ms [0] . role }}"), "1user");
}

}  // namespace
}  // namespace ferry::jinja
