#include <gtest/gtest.h>

#include "template/render_util.h"

namespace ferry::jinja {
namespace {

TEST(OperatorsTest, Arithmetic) {
  EXPECT_EQ(Render("{{ 1 + 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 7.5 % 2 }}|{{ 2 ** 10 }}|{{ 2 ** -1 }}|{{ 7 / 2 }}|{{ 4 / 2 }}|{{ -7.0 // 2 }}|{{ true + 1 }}"), "3|3|-4|1|2|1.5|1024|0.5|3.5|2.0|-4.0|2");
  EXPECT_EQ(Render("{{ 'a' * 3 }}|{{ [1] * 3 }}|{{ 3 * 'ab' }}|{{ -1 * 'a' }}|{{ [1, 2] + [3] }}|{{ (1, 2) + (3,) }}|{{ 'a' + 'b' }}|{{ 'test' ~ 1.0 ~ 2.50 ~ none ~ true }}"), "aaa|[1, 1, 1]|ababab||[1, 2, 3]|(1, 2, 3)|ab|test1.02.5NoneTrue");
  EXPECT_EQ(ErrorKind(Render("{{ 5 // 0 }}")), "ZeroDivisionError");
  EXPECT_EQ(ErrorKind(Render("{{ 5 / 0 }}")), "ZeroDivisionError");
  EXPECT_EQ(ErrorKind(Render("{{ 5 % 0 }}")), "ZeroDivisionError");
  EXPECT_EQ(ErrorKind(Render("{{ 'a' + 1 }}")), "TypeError");
  EXPECT_EQ(ErrorKind(Render("{{ 1 + 'a' }}")), "TypeError");
  EXPECT_EQ(ErrorKind(Render("{{ [1] + 'a' }}")), "TypeError");
  EXPECT_EQ(ErrorKind(Render("{{ {'a': 1} + {} }}")), "TypeError");
  EXPECT_EQ(ErrorKind(Render("{{ 'a' * 1.5 }}")), "TypeError");
  EXPECT_EQ(ErrorKind(Render("{{ 'a' - 'b' }}")), "TypeError");
}

TEST(OperatorsTest, ComparisonsAndMembership) {
  EXPECT_EQ(Render("{{ 1 == true }}|{{ 0 == false }}|{{ none == none }}|{{ 1 == 1.0 }}|{{ [1, 2] == [1, 2] }}|{{ [1] == (1,) }}|{{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }}|{{ 'a' < 'b' }}|{{ [1, 2] < [1, 3] }}"), "True|True|True|True|True|False|True|True|True");
  EXPECT_EQ(ErrorKind(Render("{{ 'abc' < 1 }}")), "TypeError");
  EXPECT_EQ(ErrorKind(Render("{{ none < 1 }}")), "TypeError");
  EXPECT_EQ(ErrorKind(Render("{{ 'a' in 1 }}")), "TypeError");
  EXPECT_EQ(ErrorKind(Render("{{ 1 in 'a' }}")), "TypeError");
}

TEST(OperatorsTest, PercentFormatting) {
  EXPECT_EQ(Render("{{ '%s and %d' % ('a', 3) }}|{{ '%5.2f|%-4s|%04d' % (3.14159, 'ab', 7) }}|{{ '%(x)s' % {'x': 1} }}|{{ '%r' % 'q' }}|{{ '%x %o %e' % (255, 8, 1234.5) }}|{{ '%s' % [1, 2] }}|{{ '%.3s' % 'abcdef' }}"), "a and 3| 3.14|ab  |0007|1|'q'|ff 10 1.234500e+03|[1, 2]|abc");
  EXPECT_EQ(ErrorKind(Render("{{ '%s %s' % ('a',) }}")), "TypeError");
  EXPECT_EQ(ErrorKind(Render("{{ '%s' % ('a', 'b') }}")), "TypeError");
  EXPECT_EQ(ErrorKind(Render("{{ '%d' % 'x' }}")), "TypeError");
}
TEST(OperatorsTest, IntegersDoNotSilentlyOverflow) {
  // Python's ints are unbounded; here they are 64-bit and overflow is an error, never a wrap.
  EXPECT_EQ(ErrorKind(Render("{{ 9223372036854775807 + 1 }}")), "OverflowError");
  EXPECT_EQ(ErrorKind(Render("{{ 2 ** 64 }}")), "OverflowError");
  EXPECT_EQ(Render("{{ 2 ** 62 }}"), "4611686018427387904");
}

}  // namespace
}  // namespace ferry::jinja
