#include "template/template.h"

#include <gtest/gtest.h>

#include "template/render_util.h"

namespace ferry::jinja {
namespace {

Result<std::string> RenderWith(const std::string& source, const RenderLimits& limits) {
  auto t = Template::Parse(source);
  if (!t.ok()) return t.status();
  return t->Render(DictData(), {}, limits);
}

TEST(TemplateTest, ErrorsNameKindLineAndColumn) {
  EXPECT_EQ(Render("line one\n{% for m in ms %}\n  {{ m.nope + 'x' }}\n{% endfor %}"),
            "ERROR UndefinedError: 'dict object' has no attribute 'nope' (line 3, column 13)");
  EXPECT_EQ(Render("{{ raise_exception('no system role') }}"),
            "ERROR TemplateError: no system role (line 1, column 4)");
  EXPECT_EQ(Render("{% if true %}\n   {{ 'a' + 1 }}{% endif %}"),
            "ERROR TypeError: can only concatenate str (not \"int\") to str (line 2, column 11)");
  EXPECT_EQ(Render("{{ 'é' }}\n  {{ x.y }}"), "ERROR UndefinedError: 'x' is undefined (line 2, column 7)");
}

TEST(TemplateTest, TheSandboxHidesInternalsAndMutation) {
  EXPECT_EQ(Render("{{ ''.__class__ }}|{{ range.__globals__ is defined }}|{{ d._private is defined }}"), "|False|False");
  EXPECT_EQ(Render("{{ ms.__class__.__mro__ }}"),
            "ERROR SecurityError: access to attribute '__class__' of 'list' object is unsafe. (line 1, column 16)");
  EXPECT_EQ(ErrorKind(Render("{{ ms.append(1) }}")), "SecurityError");
  EXPECT_EQ(ErrorKind(Render("{% set _ = d.update({'x': 1}) %}")), "SecurityError");
  EXPECT_EQ(ErrorKind(Render("{{ ''.__class__() }}")), "SecurityError");
}

TEST(TemplateTest, LoopsAreBounded) {
  RenderLimits limits;
  limits.max_loop_iterations = 1000;
  auto r = RenderWith("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", limits);
  EXPECT_EQ(r.status().message(),
            "SecurityError: the template exceeded its limit of 1000 loop iterations (line 1, column 29)");
  EXPECT_TRUE(RenderWith("{% for i in range(10) %}{% for j in range(10) %}{% endfor %}{% endfor %}", limits).ok());
  EXPECT_EQ(Render("{{ range(100001)|length }}").substr(0, 20), "ERROR OverflowError:");
}

TEST(TemplateTest, RecursionIsBounded) {
  auto r = RenderWith("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", RenderLimits());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().substr(0, 15), "RecursionError:");
  auto loop = RenderWith("{% set t = [[]] %}{% for x in t recursive %}{{ loop(t) }}{% endfor %}", RenderLimits());
  ASSERT_FALSE(loop.ok());
  EXPECT_EQ(loop.status().message().substr(0, 15), "RecursionError:");
  // Legitimate recursion (tool schemas nest a few levels) is fine.
  EXPECT_EQ(Render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(20) }}"),
            "2019181716151413121110987654321");
}

TEST(TemplateTest, OutputAndBuiltValuesAreBounded) {
  RenderLimits limits;
  limits.max_output_bytes = 10000;
  auto doubling = RenderWith("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                             "{% endfor %}{{ ns.s|length }}",
                             limits);
  EXPECT_EQ(doubling.status().message().substr(0, 14), "SecurityError:");
  EXPECT_EQ(RenderWith("{{ 'x' * 100000 }}", limits).status().message().substr(0, 14), "SecurityError:");
  EXPECT_EQ(RenderWith("{{ [1] * 100000 }}", limits).status().message().substr(0, 14), "SecurityError:");
  EXPECT_EQ(RenderWith("{% for i in range(5000) %}xyz{% endfor %}", limits).status().message().substr(0, 14),
            "SecurityError:");
  EXPECT_TRUE(RenderWith("{% for i in range(100) %}xyz{% endfor %}", limits).ok());
}

TEST(TemplateTest, EvaluationStepsAreBounded) {
  RenderLimits limits;
  limits.max_steps = 5000;
  auto r = RenderWith("{% for i in range(10000) %}{{ i }}{% endfor %}", limits);
  EXPECT_EQ(r.status().message().substr(0, 14), "SecurityError:");
}

TEST(TemplateTest, DeepExpressionsStayWithinTheStackBudget) {
  RenderLimits limits;
  limits.max_stack_bytes = 64 * 1024;
  std::string macro = "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}";
  auto r = RenderWith(macro, limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().substr(0, 15), "RecursionError:");
}

TEST(TemplateTest, Globals) {
  EXPECT_EQ(Render("{{ range(3)|list }}|{{ range(1, 10, 3)|list }}|{{ range(5, 0, -2)|list }}|{{ dict(a=1, b=2) }}|"
                   "{{ dict([('x', 1)]) }}"),
            "[0, 1, 2]|[1, 4, 7]|[5, 3, 1]|{'a': 1, 'b': 2}|{'x': 1}");
  EXPECT_EQ(Render("{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}"), "abab");
  EXPECT_EQ(Render("{% set j = joiner('|') %}{% for x in [1, 2, 3] %}{{ j() }}{{ x }}{% endfor %}"), "1|2|3");
  EXPECT_EQ(Render("{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns.c is defined }}"), "12False");
}

TEST(TemplateTest, NamespaceCyclesDoNotLeak) {
  // A namespace holding itself, and a macro closing over the scope that holds it: both are
  // freed when the render ends.
  std::weak_ptr<Object> probe;
  std::map<std::string, GlobalFn> globals;
  globals["probe"] = [&probe](Interpreter&, CallArgs& a) {
    probe = a.args.at(0).object_ptr();
    return Value("");
  };
  auto t = Template::Parse("{% set ns = namespace() %}{% set ns.self = ns %}{% macro m() %}{{ ns }}{% endmacro %}"
                           "{% set ns.m = m %}{{ probe(ns) }}ok");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->Render(DictData(), globals), "ok");
  EXPECT_TRUE(probe.expired());
}

TEST(TemplateTest, SourceSizeIsBounded) {
  EXPECT_FALSE(Template::Parse(std::string(kMaxTemplateBytes + 1, 'x')).ok());
}

}  // namespace
}  // namespace ferry::jinja
