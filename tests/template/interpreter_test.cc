#include <gtest/gtest.h>

#include "template/render_util.h"

namespace ferry::jinja {
namespace {

TEST(InterpreterTest, ForLoopsScopeTheirAssignmentsPerIteration) {
  EXPECT_EQ(Render("{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}"), "1212121");
  EXPECT_EQ(Render("{% for i in [1] %}{% set inner = 5 %}{% endfor %}{{ inner is defined }}"), "False");
  EXPECT_EQ(Render("{% if true %}{% set top = 1 %}{% endif %}{{ top }}"), "1");
  EXPECT_EQ(Render("{% set ns = namespace(n=0, seen=[]) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.seen = ns.seen + [i] %}{% endfor %}{{ ns.n }} {{ ns.seen }}"), "6 [0, 1, 2, 3]");
  EXPECT_EQ(Render("{% set messages = ms[1:] %}{{ messages|length }} {{ ms|length }}"), "2 3");
}

TEST(InterpreterTest, LoopVariable) {
  EXPECT_EQ(Render("{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }},{% endfor %}"), "1032TrueFalse3,2121FalseFalse3,3210FalseTrue3,");
  EXPECT_EQ(Render("{% for x in [1, 2, 3] %}{{ loop.cycle('a', 'b') }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}"), "a2;b13;a2;");
  EXPECT_EQ(Render("{% for x in [1, 1, 2] %}{{ loop.changed(x) }}{% endfor %}"), "TrueFalseTrue");
  EXPECT_EQ(Render("{% for m in ms %}{% if loop.previtem and loop.previtem.role != 'user' %}!{% endif %}{{ m.role[0] }}{% endfor %}"), "ua!u");
  EXPECT_EQ(Render("{% for x in [1, 2, 3] if x != 2 %}{{ x }}{{ loop.index }}{% else %}empty{% endfor %}|{% for x in [] %}{{ x }}{% else %}empty{% endfor %}"), "1132|empty");
  EXPECT_EQ(Render("{% for a, b in d|items %}{{ a }}={{ b }};{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for c in 'hé' %}[{{ c }}]{% endfor %}"), "a=1;b=2;|ab|[h][é]");
  EXPECT_EQ(Render("{% for i in range(10) %}{% if i == 3 %}{% continue %}{% endif %}{% if i == 6 %}{% break %}{% endif %}{{ i }}{% endfor %}"), "01245");
  EXPECT_EQ(Render("{% for item in [{'n': 'a', 'c': [{'n': 'b', 'c': [{'n': 'c', 'c': []}]}]}] recursive %}{{ item.n }}{{ loop.depth }}{% if item.c %}<{{ loop(item.c) }}>{% endif %}{% endfor %}"), "a1<b2<c3>>");
  EXPECT_EQ(Render("{% for x in [1] %}{% for y in [2] %}{{ loop.index }}{% endfor %}{{ loop.length }}{% endfor %}"), "11");
  EXPECT_EQ(ErrorKind(Render("{% for x in 5 %}{% endfor %}")), "TypeError");
  EXPECT_EQ(ErrorKind(Render("{% for x in none %}{% endfor %}")), "TypeError");
  EXPECT_EQ(Render("{% for x in undefined_name %}{{ x }}{% else %}nothing{% endfor %}"), "nothing");
  EXPECT_EQ(ErrorKind(Render("{% for a, b in [[1, 2], [3]] %}{{ a }}{% endfor %}")), "ValueError");
  EXPECT_EQ(ErrorKind(Render("{% for x in [1] %}{{ loop(x) }}{% endfor %}")), "TypeError");
}

TEST(InterpreterTest, Macros) {
  EXPECT_EQ(Render("{% macro f(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ f(1) }}|{{ f(1, 3) }}|{{ f(b=5, a=0) }}|{{ f() }}"), "1-2|1-3|0-5|-2");
  EXPECT_EQ(Render("{% macro f(a) %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, 3, x=4) }}"), "(2, 3){'x': 4}");
  EXPECT_EQ(ErrorKind(Render("{% macro f(a) %}{{ a }}{% endmacro %}{{ f(1, 2) }}")), "TypeError");
  EXPECT_EQ(ErrorKind(Render("{% macro f(a) %}{{ a }}{% endmacro %}{{ f(z=1) }}")), "TypeError");
  EXPECT_EQ(Render("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}"), "120");
  EXPECT_EQ(Render("{% macro t(x) %}{{ x }}{% endmacro %}{{ t(1) + 'a' }}{{ t(2)|length }}"), "1a1");
  EXPECT_EQ(Render("{% set g = 'global' %}{% macro m() %}{{ g }}{% endmacro %}{% set g = 'changed' %}{{ m() }}"), "changed");
  EXPECT_EQ(Render("{% macro m() %}[{{ caller() }}]{% endmacro %}{% call m() %}inside{% endcall %}"), "[inside]");
  EXPECT_EQ(Render("{% macro m() %}[{{ caller(5) }}]{% endmacro %}{% call(x) m() %}v={{ x }}{% endcall %}"), "[v=5]");
  EXPECT_EQ(Render("{% macro m(a, b=a * 2) %}{{ b }}{% endmacro %}{{ m(3) }}"), "6");
}

TEST(InterpreterTest, AssignmentForms) {
  EXPECT_EQ(Render("{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = (1, 2) %}{{ t[0] }}{{ t }}"), "12|1(1, 2)");
  EXPECT_EQ(Render("{% set x %}inner {{ 1 + 1 }}{% endset %}[{{ x }}]{% set y | upper %}abc{% endset %}{{ y }}"), "[inner 2]ABC");
  EXPECT_EQ(Render("{% filter upper %}hello {{ 'world' }}{% endfilter %}"), "HELLO WORLD");
  EXPECT_EQ(Render("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a is defined }}"), "3False");
  EXPECT_EQ(Render("{% set x = 1 %}{% with x = x + 1 %}{{ x }}{% endwith %}{{ x }}"), "21");
  EXPECT_EQ(ErrorKind(Render("{% set s = 'x' %}{% set s.attr = 1 %}")), "TemplateRuntimeError");
  EXPECT_EQ(Render("{% block content %}in a block{% endblock %}"), "in a block");
}

TEST(InterpreterTest, ExpressionsAndPrecedence) {
  EXPECT_EQ(Render("{% if a %}A{% elif b %}B{% else %}C{% endif %}|{{ 'y' if true else 'n' }}|{{ 'y' if false }}|{{ 1 and 2 }}|{{ 0 or 3 }}|{{ none or 'x' }}|{{ not 1 }}"), "C|y||2|3|x|False");
  EXPECT_EQ(ErrorKind(Render("{{ 1 if 0 else 2 if 0 else 3 }}|{{ (1 + 2) * 3 }}|{{ 2 * 3 ** 2 }}|{{ -2 ** 2 }}|{{ 10 - 2 - 3 }}|{{ 2 ~ 3 + 4 }}|{{ -1|abs }}")), "TypeError");
  EXPECT_EQ(Render("{{ 1 < 2 < 3 }}|{{ 1 < 3 < 2 }}|{{ 1 in [1, 2] }}|{{ 'a' in 'abc' }}|{{ 'a' in d }}|{{ 3 not in [1] }}|{{ not 1 == 2 }}"), "True|False|True|True|True|True|True");
  EXPECT_EQ(Render("{{ x is defined }}|{{ none is not none }}|{{ (x is defined) or true }}|{{ ms[0]['role'] }}|{{ ms[-1].role }}|{{ d.a + d['b'] }}"), "False|False|True|user|user|3");
  EXPECT_EQ(Render("{{ 'hello'[1] }}|{{ 'hello'[1:3] }}|{{ 'hello'[::-1] }}|{{ [1, 2, 3, 4][1:] }}|{{ [1, 2, 3, 4][:-1] }}|{{ [1, 2, 3, 4][::2] }}|{{ 'héllo'[1] }}|{{ [1, 2][5:] }}"), "e|el|olleh|[2, 3, 4]|[1, 2, 3]|[1, 3]|é|[]");
  EXPECT_EQ(Render("{{ 'abc'[5] }}|{{ [1][5] }}|{{ d['zz'] }}|{{ d[0] is defined }}|{{ d.zz is defined }}|{{ ms.0.role }}"), "|||False|False|user");
  EXPECT_EQ(Render("{{ ''.__class__ }}|{{ ms.__len__ is defined }}"), "|False");
}

TEST(InterpreterTest, UndefinedValues) {
  EXPECT_EQ(Render("[{{ missing }}]|{{ missing|length }}|{{ missing is defined }}|{{ missing|default('d') }}|{{ missing ~ 'x' }}|{{ 'a' in missing }}"), "[]|0|False|d|x|False");
  EXPECT_EQ(ErrorKind(Render("{{ missing.attr }}")), "UndefinedError");
  EXPECT_EQ(ErrorKind(Render("{{ missing + 1 }}")), "UndefinedError");
  EXPECT_EQ(ErrorKind(Render("{{ 'text' + missing }}")), "UndefinedError");
  EXPECT_EQ(ErrorKind(Render("{{ missing() }}")), "UndefinedError");
  EXPECT_EQ(ErrorKind(Render("{{ d.nope + 'x' }}")), "UndefinedError");
  EXPECT_EQ(Render("{{ none.x }}"), "");
  EXPECT_EQ(ErrorKind(Render("{{ missing < 1 }}")), "UndefinedError");
}
}  // namespace
}  // namespace ferry::jinja
