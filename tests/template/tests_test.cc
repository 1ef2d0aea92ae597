#include <gtest/gtest.h>

#include "template/render_util.h"

namespace ferry::jinja {
namespace {

TEST(JinjaTestsTest, TypeTests) {
  EXPECT_EQ(Render("{{ x is defined }}|{{ none is none }}|{{ 1 is number }}|{{ 'a' is string }}|{{ {} is mapping }}|{{ [] is iterable }}|{{ 'a' is iterable }}|{{ missing is iterable }}|{{ 1 is iterable }}|{{ 1 is integer }}|{{ true is integer }}|{{ 1.0 is float }}|{{ true is boolean }}"), "False|True|True|True|True|True|True|True|False|True|False|True|True");
  EXPECT_EQ(Render("{{ 'a' is sequence }}|{{ d is sequence }}|{{ 1 is sequence }}|{{ true is true }}|{{ 1 is true }}|{{ false is false }}|{{ range is callable }}|{{ 'x' is callable }}|{{ x is undefined }}|{{ d is mapping }}|{{ ms is mapping }}"), "True|True|False|True|False|True|True|False|True|True|False");
}

TEST(JinjaTestsTest, ValueTests) {
  EXPECT_EQ(Render("{{ 3 is odd }}|{{ 4 is even }}|{{ 9 is divisibleby 3 }}|{{ 10 is divisibleby(3) }}|{{ 'abc' is lower }}|{{ 'ABC' is upper }}|{{ 'aBc' is lower }}|{{ 2 is eq 2 }}|{{ 2 is equalto 3 }}|{{ 2 is ne 3 }}"), "True|True|True|False|True|True|False|True|False|True");
  EXPECT_EQ(Render("{{ 3 is gt 2 }}|{{ 3 is ge 3 }}|{{ 1 is lt 2 }}|{{ 2 is le 1 }}|{{ 2 is greaterthan 1 }}|{{ 1 is lessthan 1 }}|{{ 1 is in [1] }}|{{ 'a' is in 'cat' }}|{{ 'upper' is filter }}|{{ 'odd' is test }}|{{ 'nope' is test }}|{{ 1 is sameas 1 }}|{{ none is sameas none }}"), "True|True|True|False|True|False|True|True|True|True|False|True|True");
  EXPECT_EQ(Render("{{ 1 is not none and 1 is not string }}|{{ ms[0] is mapping and ms[0].role is string }}"), "True|True");
  EXPECT_EQ(ErrorKind(Render("{{ 1 is nonexistent }}")), "TemplateAssertionError");
}
}  // namespace
}  // namespace ferry::jinja
