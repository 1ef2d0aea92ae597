#include <gtest/gtest.h>

#include "template/render_util.h"

namespace ferry::jinja {
namespace {

TEST(FiltersTest, Strings) {
  EXPECT_EQ(Render("{{ '  hi  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'Hello World'|lower }}|{{ 'hello world'|upper }}|{{ 'hello wORLD-x(y'|title }}|{{ 'hello'|capitalize }}|{{ 'hi'|center(9) }}|"), "hi|hi|hello world|HELLO WORLD|Hello World-X(Y|Hello|    hi   |");
  EXPECT_EQ(Render("{{ 'a-b-c'|replace('-', '+') }}|{{ 'hello'|replace('l', 'L', 1) }}|{{ 'abc'|reverse }}|{{ 'a b  c'|wordcount }}|{{ 'héllo'|length }}|{{ 3|string|length }}"), "a+b+c|heLlo|cba|3|5|1");
  EXPECT_EQ(Render("{{ '<b>x</b> &amp; y'|striptags }}|{{ '<a href=\"x\">'|e }}|{{ 'a b/c'|urlencode }}|{{ {'a': 1, 'b': 'x y'}|urlencode }}"), "x & y|&lt;a href=&#34;x&#34;&gt;|a%20b/c|a=1&b=x+y");
  EXPECT_EQ(Render("{{ 'hello world foo'|truncate(9) }}|{{ 'hello world foo bar baz qux'|truncate(12, true) }}|{{ 'short'|truncate(3, leeway=5) }}"), "hello...|hello wor...|short");
  EXPECT_EQ(Render("{{ 'line1\\nline2\\n\\nline4'|indent(2) }}|{{ 'a\\nb'|indent(2, first=true) }}|{{ 'a\\n\\nb'|indent('> ', blank=true) }}"), "line1\n  line2\n\n  line4|  a\n  b|a\n> \n> b");
  EXPECT_EQ(Render("{{ '%s and %d'|format('a', 3) }}|{{ '%(x)s'|format(x=1) }}|{{ '%5.2f|%-4s|%04d'|format(3.14159, 'ab', 7) }}|{{ '%d%%'|format(50) }}"), "a and 3|1| 3.14|ab  |0007|50%");
}

TEST(FiltersTest, Numbers) {
  EXPECT_EQ(Render("{{ 3.7|int }}|{{ '42'|int }}|{{ '4.5'|int }}|{{ 'x'|int(5) }}|{{ '0x1A'|int(0, 16) }}|{{ '1_000'|int }}|{{ '4.5'|float }}|{{ 'x'|float }}|{{ true|int }}"), "3|42|4|5|26|1000|4.5|0.0|1");
  EXPECT_EQ(Render("{{ 2.5|round }}|{{ 3.5|round }}|{{ 3.14159|round(2) }}|{{ 3.1|round(0, 'ceil') }}|{{ 3.9|round(0, 'floor') }}|{{ 2.675|round(2) }}|{{ 7|round }}"), "2.0|4.0|3.14|4.0|3.0|2.67|7");
  EXPECT_EQ(Render("{{ -3|abs }}|{{ -3.5|abs }}|{{ [1, 2, 3]|sum }}|{{ [[1, 2], [3]]|sum(start=[]) }}|{{ ms|sum(attribute='x') if false else 0 }}|{{ [1, 5, 3]|max }}|{{ [4, 2, 8]|min }}|{{ ['b', 'A']|max }}"), "3|3.5|6|[1, 2, 3]|0|5|2|b");
  EXPECT_EQ(Render("{{ 10000|filesizeformat }}|{{ 1|filesizeformat }}|{{ 2048|filesizeformat(true) }}"), "10.0 kB|1 Byte|2.0 KiB");
}

TEST(FiltersTest, Sequences) {
  EXPECT_EQ(Render("{{ [3, 1, 2]|sort }}|{{ ['b', 'A', 'c']|sort }}|{{ ['b', 'A', 'c']|sort(case_sensitive=true) }}|{{ [3, 1, 2]|sort(reverse=true) }}|{{ ms|sort(attribute='content')|map(attribute='role')|list }}"), "[1, 2, 3]|['A', 'b', 'c']|['A', 'b', 'c']|[3, 2, 1]|['user', 'user', 'assistant']");
  EXPECT_EQ(Render("{{ [1, 2, 1, 3]|unique|list }}|{{ ['a', 'A', 'b']|unique|list }}|{{ [1, 2, 3]|join(',') }}|{{ ms|join('/', attribute='role') }}|{{ [1, 2, 3]|first }}|{{ [1, 2, 3]|last }}|{{ []|first is defined }}"), "[1, 2, 3]|['a', 'b']|1,2,3|user/assistant/user|1|3|False");
  EXPECT_EQ(Render("{{ [1, 2, 3, 4]|select('odd')|list }}|{{ [1, 2, 3, 4]|reject('odd')|list }}|{{ [0, 1, '']|select|list }}|{{ [1, 2, 3]|select('gt', 1)|list }}|{{ [1, 2, 3]|reject('in', [2])|list }}"), "[1, 3]|[2, 4]|[1]|[2, 3]|[1, 3]");
  EXPECT_EQ(Render("{{ ms|selectattr('role', 'equalto', 'user')|list|length }}|{{ ms|rejectattr('role', 'eq', 'user')|map(attribute='content')|list }}|{{ [{'a': 1}, {}]|selectattr('a', 'defined')|list }}|{{ [{'a': 0}, {'a': 2}]|selectattr('a')|list }}"), "2|['yo']|[{'a': 1}]|[{'a': 2}]");
  EXPECT_EQ(Render("{{ ['a', 'b']|map('upper')|list }}|{{ [{'n': 'x'}, {'n': 'y'}]|map(attribute='n')|join }}|{{ [{'n': 1}]|map(attribute='m', default=7)|list }}|{{ [1, 2]|map('string')|join('-') }}|{{ [[1, 2]]|map(attribute='1')|list }}"), "['A', 'B']|xy|[7]|1-2|[2]");
  EXPECT_EQ(Render("{{ [1, 2]|reverse|list }}|{{ 'abc'|list }}|{{ d|list }}|{{ d|first }}|{{ d|last }}|{{ [1, 2, 3]|batch(2)|list }}|{{ [1, 2, 3]|batch(2, 0)|list }}|{{ [1, 2, 3, 4, 5]|slice(2)|list }}"), "[2, 1]|['a', 'b', 'c']|['a', 'b']|a|b|[[1, 2], [3]]|[[1, 2], [3, 0]]|[[1, 2, 3], [4, 5]]");
  EXPECT_EQ(Render("{{ [{'a': 1, 'b': 'x'}, {'a': 2, 'b': 'y'}, {'a': 1, 'b': 'z'}]|groupby('a') }}|{% for g in ms|groupby('role') %}{{ g.grouper }}:{{ g.list|length }};{% endfor %}"), "[(1, [{'a': 1, 'b': 'x'}, {'a': 1, 'b': 'z'}]), (2, [{'a': 2, 'b': 'y'}])]|assistant:1;user:2;");
  EXPECT_EQ(ErrorKind(Render("{{ 5|first }}")), "TypeError");
  EXPECT_EQ(ErrorKind(Render("{{ 5|length }}")), "TypeError");
}

TEST(FiltersTest, Mappings) {
  EXPECT_EQ(Render("{{ {'b': 1, 'a': 2}|dictsort }}|{{ {'b': 1, 'a': 2}|dictsort(by='value') }}|{{ {'B': 1, 'a': 2}|dictsort(reverse=true) }}|{{ d|items|list }}|{{ missing|items|list }}"), "[('a', 2), ('b', 1)]|[('b', 1), ('a', 2)]|[('B', 1), ('a', 2)]|[('a', 1), ('b', 2)]|[]");
  EXPECT_EQ(Render("{{ {'a': 'x', 'b': none}|xmlattr }}|{{ d|attr('a') is defined }}|{{ 'x'|attr('upper') is defined }}"), " a=\"x\"|False|True");
}

TEST(FiltersTest, DefaultsAndStrings) {
  EXPECT_EQ(Render("{{ missing|default('d') }}|{{ ''|default('d', true) }}|{{ none|default('d') }}|{{ missing|d(1)|string + 'a' }}|{{ [1, [2]]|string }}|{{ none|string }}|{{ 'x'|safe }}|{{ 1|pprint }}"), "d|d|None|1a|[1, [2]]|None|x|1");
}

TEST(FiltersTest, UnknownFilterFailsWhenReached) {
  EXPECT_EQ(Render("{% if false %}{{ 1|nonexistent }}{% endif %}ok"), "ok");
  EXPECT_EQ(ErrorKind(Render("{{ 1|nonexistent }}")), "TemplateAssertionError");
}
}  // namespace
}  // namespace ferry::jinja
