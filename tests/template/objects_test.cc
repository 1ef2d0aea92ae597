#include "template/objects.h"

#include <gtest/gtest.h>

#include "template/lexer.h"
#include "template/parser.h"
#include "template/render_util.h"

namespace ferry::jinja {
namespace {

TEST(ObjectsTest, MacrosKnowWhetherTheyTakeExtraArguments) {
  auto tokens = Tokenize("{{ varargs }}{% for x in kwargs %}{% endfor %}{% macro inner() %}{{ nothing }}{% endmacro %}");
  ASSERT_TRUE(tokens.ok());
  auto body = Parse(*tokens);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(ScanMacroNames(*body), std::make_pair(true, true));
  auto none = Parse(*Tokenize("{% macro m() %}{{ varargs }}{% endmacro %}{{ x }}"));
  EXPECT_EQ(ScanMacroNames(*none), std::make_pair(false, false));  // a nested macro's names are its own
}

TEST(ObjectsTest, NamespaceAttributes) {
  NamespaceObject ns;
  EXPECT_TRUE(ns.GetAttr("a").is_undefined());
  EXPECT_EQ(ns.GetAttr("a").undefined_hint(), "'Namespace object' has no attribute 'a'");
  EXPECT_TRUE(ns.SetAttr("a", Value(int64_t{1})));
  EXPECT_EQ(ns.GetAttr("a").AsInt(), 1);
  EXPECT_EQ(ns.Repr(), "<Namespace {'a': 1}>");
}

TEST(ObjectsTest, LoopAttributes) {
  auto owner = std::make_shared<LoopObject>(nullptr, std::vector<Value>{Value("a"), Value("b"), Value("c")}, 0,
                                            std::weak_ptr<Scope>());
  LoopObject& loop = *owner;
  loop.set_index(1);
  EXPECT_EQ(loop.GetAttr("index").AsInt(), 2);
  EXPECT_EQ(loop.GetAttr("revindex0").AsInt(), 1);
  EXPECT_EQ(loop.GetAttr("previtem").AsString(), "a");
  EXPECT_EQ(loop.GetAttr("nextitem").AsString(), "c");
  EXPECT_EQ(loop.GetAttr("depth").AsInt(), 1);
  loop.set_index(2);
  EXPECT_TRUE(loop.GetAttr("last").AsBool());
  EXPECT_TRUE(loop.GetAttr("nextitem").is_undefined());
  EXPECT_TRUE(loop.GetAttr("missing").is_undefined());
}

TEST(ObjectsTest, BoundMethodsAndMacrosHaveNames) {
  MethodFn m(Value("x"), "upper");
  EXPECT_EQ(m.Name(), "str.upper");
  EXPECT_EQ(Render("{{ 'x'.upper }}|{% macro mm() %}{% endmacro %}{{ mm }}"), "<function str.upper>|<function mm>");
}

}  // namespace
}  // namespace ferry::jinja
