#include <gtest/gtest.h>

#include "template/render_util.h"

namespace ferry::jinja {
namespace {

TEST(MethodsTest, StrMethods) {
  EXPECT_EQ(Render("{{ 'a,b,,c'.split(',') }}|{{ '  a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ ' a b '.rsplit(None, 1) }}|{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ 'a\\nb'.splitlines(true) }}"), "['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|['a b', 'c']|[' a', 'b']|['a', 'b', 'c']|['a\\n', 'b']");
  EXPECT_EQ(Render("{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'abc'.startswith('b', 1) }}|{{ 'Hello'.upper() }}|{{ 'Hello'.lower() }}|{{ \"they're bill's\".title() }}|{{ 'aBc'.swapcase() }}|{{ 'hello world'.capitalize() }}"), "True|True|True|HELLO|hello|They'Re Bill'S|AbC|Hello world");
  EXPECT_EQ(Render("{{ '  x '.strip() }}|{{ '  x '.lstrip() }}|{{ '  x '.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a-b'.replace('-', '+') }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'ab'.replace('', '.') }}"), "x|x |  x|a|a+b|bba|.a.b.");
  EXPECT_EQ(Render("{{ 'abcabc'.find('c') }}|{{ 'abcabc'.rfind('c') }}|{{ 'abc'.find('z') }}|{{ 'éabc'.find('b') }}|{{ 'abcabc'.index('b', 2) }}|{{ 'abc'.count('b') }}|{{ ','.join(['a', 'b']) }}|{{ '-'.join('abc') }}"), "2|5|-1|2|4|1|a,b|a-b-c");
  EXPECT_EQ(Render("{{ 'x'.zfill(3) }}|{{ '-5'.zfill(4) }}|{{ 'xy'.center(5, '*') }}|{{ 'x'.ljust(3, '.') }}|{{ 'x'.rjust(3) }}|{{ 'a=b=c'.partition('=') }}|{{ 'a=b=c'.rpartition('=') }}|{{ 'abc'.removeprefix('a') }}|{{ 'abc'.removesuffix('c') }}"), "00x|-005|**xy*|x..|  x|('a', '=', 'b=c')|('a=b', '=', 'c')|bc|ab");
  EXPECT_EQ(Render("{{ 'abc'.isalpha() }}|{{ '123'.isdigit() }}|{{ 'a1'.isalnum() }}|{{ ' \\t'.isspace() }}|{{ 'abc'.islower() }}|{{ 'ABC'.isupper() }}|{{ ''.isalpha() }}|{{ 'Ab Cd'.istitle() }}|{{ 'a\\tb'.expandtabs(4) }}"), "True|True|True|True|True|True|False|True|a   b");
  EXPECT_EQ(Render("{{ '{} {}'.format(1, 'a') }}|{{ '{x:>5}|{0:03d}'.format(7, x='r') }}|{{ '{:.2f}'.format(1.0) }}|{{ '{:,}'.format(1234567) }}|{{ '{!r}'.format('a') }}|{{ '{0[a]} {1.a}'.format({'a': 1}, {'a': 2}) }}|{{ '{{}}{:^7}'.format('mid') }}|{{ '{:+d} {:x} {:5.1%}'.format(3, 255, 0.25) }}"), "1 a|    r|007|1.00|1,234,567|'a'|1 2|{}  mid  |+3 ff 25.0%");
  EXPECT_EQ(ErrorKind(Render("{{ 'abc'.index('z') }}")), "ValueError");
  EXPECT_EQ(ErrorKind(Render("{{ ''.join([1]) }}")), "TypeError");
  EXPECT_EQ(ErrorKind(Render("{{ 'a'.split('') }}")), "ValueError");
}

TEST(MethodsTest, DictAndListMethods) {
  EXPECT_EQ(Render("{{ d.get('a') }}|{{ d.get('z', 'none') }}|{{ d.get('z') }}|{{ d.keys()|list }}|{{ d.values()|list }}|{{ d.items()|list }}|{{ d.copy() }}|{{ [1, 2, 1].count(1) }}|{{ [1, 2].index(2) }}|{{ (1, 2).index(1) }}"), "1|none|None|['a', 'b']|[1, 2]|[('a', 1), ('b', 2)]|{'a': 1, 'b': 2}|2|1|0");
  EXPECT_EQ(Render("{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}|{{ d.items is defined }}|{{ ms[0].content.strip().upper() }}"), "a1b2|True|HI");
  EXPECT_EQ(ErrorKind(Render("{{ [1, 2].append(3) }}")), "SecurityError");
  EXPECT_EQ(ErrorKind(Render("{{ d.update({}) }}")), "SecurityError");
  EXPECT_EQ(ErrorKind(Render("{{ d.pop('a') }}")), "SecurityError");
  EXPECT_EQ(ErrorKind(Render("{{ [1].index(5) }}")), "ValueError");
}
}  // namespace
}  // namespace ferry::jinja
