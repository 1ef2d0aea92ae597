#include <gtest/gtest.h>

#include "template/lexer.h"
#include "template/render_util.h"

namespace ferry::jinja {
namespace {

TEST(LexerTest, TrimBlocksDropsTheNewlineAfterABlockTag) {
  EXPECT_EQ(Render("{% if true %}\nyes\n{% endif %}\nafter"), "yes\nafter");
  EXPECT_EQ(Render("{% for i in [1, 2] %}\n{{ i }}\n{% endfor %}\n"), "1\n2\n");
  EXPECT_EQ(Render("x {# comment #}\ny"), "x y");
  EXPECT_EQ(Render("{% if true +%}\nkept{% endif %}"), "\nkept");
  EXPECT_EQ(Render("{{ 'variables' }}\nkeep their newline"), "variables\nkeep their newline");
}

TEST(LexerTest, LstripBlocksDropsIndentationBeforeBlockTags) {
  EXPECT_EQ(Render("a\n  {% if true %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");
  EXPECT_EQ(Render("  {% set x = 1 %}  z"), "  z");
  EXPECT_EQ(Render("  {{ 'x' }}\n"), "  x");
  EXPECT_EQ(Render("x  {%+ if true %}y{% endif %}"), "x  y");
  EXPECT_EQ(Render("x\n  {# c #}\n  y"), "x\n  y");
  EXPECT_EQ(Render("text {% if false %}no{% else %}\n   yes\n{% endif %} end"), "text    yes\n end");
  EXPECT_EQ(Render("a  {% if true %}b{% endif %}\n　{% if true %}c{% endif %}"), "a  bc");
}

TEST(LexerTest, MinusStripsAllWhitespaceOnItsSide) {
  EXPECT_EQ(Render("a\n  {%- if true %}\n  b\n  {%- endif %}\nc\n"), "a  bc");
  EXPECT_EQ(Render("{%- if true -%}  x  {%- endif -%}  |"), "x|");
  EXPECT_EQ(Render("{{- '  a  ' -}}  b"), "  a  b");
  EXPECT_EQ(Render("x\n\t {#- c #}\n  y"), "x  y");
  EXPECT_EQ(Render("x {# c -#}\n\n  y"), "x y");
  EXPECT_EQ(Render("{% for i in [1, 2] -%}\n  {{ i }}\n{%- endfor %}"), "12");
  EXPECT_EQ(Render("{%- for m in ms %}\n    {%- if m.role == 'user' %}\n        {{- 'U:' + m.content }}\n    {%- else %}\n        {{- 'A:' + m.content }}\n    {%- endif %}\n{%- endfor %}"), "U: hi A:yoU:bye");
}

TEST(LexerTest, RawBlocksAreNotParsed) {
  EXPECT_EQ(Render("{% raw %}{{ not rendered }} {% if %}{% endraw %}"), "{{ not rendered }} {% if %}");
  EXPECT_EQ(Render("{% raw %}\n  {% if %}\n{% endraw %}\nafter"), "\n  {% if %}\nafter");
  EXPECT_EQ(Render("{%- raw %}  x {% endraw -%}  y"), "  x y");
}

TEST(LexerTest, NewlinesAreNormalizedAndOneTrailingNewlineDropped) {
  EXPECT_EQ(Render("line\r\nwin\r\n{% if true %}\r\nz\r\n{% endif %}\r\n"), "line\nwin\nz\n");
  EXPECT_EQ(Render("a\n\n"), "a\n");
  EXPECT_EQ(Render("\n\n{% if true %}\n\n{% endif %}\n\n"), "\n\n\n");
}

TEST(LexerTest, LiteralsAndOperators) {
  EXPECT_EQ(Render("{{ 'a\\x41\\u00e9\\101\\n' }}|{{ \"d\\\"q\" }}|{{ 'a' 'b' }}"), "aAéA\n|d\"q|ab");
  EXPECT_EQ(Render("{{ 1_000 }}|{{ 0x1f }}|{{ 0b101 }}|{{ 0o17 }}|{{ 1.5e3 }}|{{ 2E-2 }}|{{ 1_0.5 }}"), "1000|31|5|15|1500.0|0.02|10.5");
  EXPECT_EQ(Render("{{ '{' }}{{ '}}' }}{{ {'a': {'b': 1}} }}{{ '%}' }}"), "{}}{'a': {'b': 1}}%}");
  EXPECT_EQ(Render("{{ [1,\n 2] }}{% set a = [1, 2,\n 3] %}{{ a }}"), "[1, 2][1, 2, 3]");
  EXPECT_EQ(Render("{{ 7//2 }}{{ 2**3 }}{{ 1!=2 }}{{ 1<=2 }}{{ 2>=1 }}{{ 'a'~'b' }}"), "38TrueTrueTrueab");
}
TEST(LexerTest, TokensCarryLineAndColumn) {
  auto tokens = Tokenize("ab\n  {{ x.y }}\n{% if é %}");
  ASSERT_TRUE(tokens.ok()) << tokens.status().message();
  const std::vector<Token>& t = *tokens;
  ASSERT_GE(t.size(), 6u);
  EXPECT_EQ(t[0].type, TokenType::kData);
  EXPECT_EQ(t[1].type, TokenType::kVariableBegin);
  EXPECT_EQ(t[1].line, 2);
  EXPECT_EQ(t[1].column, 3);
  EXPECT_EQ(t[2].value, "x");
  EXPECT_EQ(t[2].column, 6);
  EXPECT_EQ(t[3].value, ".");
  const Token& name = t[9];
  EXPECT_EQ(name.value, "\xc3\xa9");  // non-ASCII names are accepted, as Python identifiers are
  EXPECT_EQ(name.line, 3);
  EXPECT_EQ(name.column, 7);
}

TEST(LexerTest, SyntaxErrorsNameTheirPlace) {
  EXPECT_EQ(Tokenize("ok\n{{ 'unterminated }}").status().message(),
            "TemplateSyntaxError: unterminated string literal (line 2, column 4)");
  EXPECT_EQ(Tokenize("{{ a ]] }}").status().message(), "TemplateSyntaxError: unexpected ']' (line 1, column 6)");
  EXPECT_EQ(Tokenize("{{ (a] }}").status().message(),
            "TemplateSyntaxError: unexpected ']', expected ')' (line 1, column 6)");
  EXPECT_EQ(Tokenize("x {% if true").status().message(),
            "TemplateSyntaxError: unexpected end of template; the block tag was never closed ('%}') (line 1, column 3)");
  EXPECT_EQ(Tokenize("{# open").status().message(), "TemplateSyntaxError: missing end of comment tag (line 1, column 1)");
  EXPECT_EQ(Tokenize("{% raw %}x").status().message(), "TemplateSyntaxError: missing end of raw directive (line 1, column 10)");
  EXPECT_EQ(Tokenize("{{ a $ b }}").status().message(), "TemplateSyntaxError: unexpected char '$' (line 1, column 6)");
  EXPECT_EQ(Tokenize("{{ 99999999999999999999 }}").status().message(),
            "TemplateSyntaxError: integer literal too large: 99999999999999999999 (line 1, column 4)");
}

}  // namespace
}  // namespace ferry::jinja
