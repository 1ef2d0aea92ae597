#include <gtest/gtest.h>

#include "template/render_util.h"

namespace ferry::jinja {
namespace {

TEST(ValueTest, PrintsAsPythonStr) {
  EXPECT_EQ(Render("{{ 1.0 }}|{{ 1e20 }}|{{ 1e-5 }}|{{ 0.1 + 0.2 }}|{{ 0.000123 }}|{{ 123456789.0 }}|{{ 1e16 }}|{{ 1e15 }}|{{ 1.5e-7 }}|{{ -0.0 }}|{{ 100.0 / 3 }}|{{ 10 ** 15 * 1.0 }}"), "1.0|1e+20|1e-05|0.30000000000000004|0.000123|123456789.0|1e+16|1000000000000000.0|1.5e-07|-0.0|33.333333333333336|1000000000000000.0");
  EXPECT_EQ(Render("{{ none }}|{{ true }}|{{ false }}|{{ [1, 'a', none, true, 1.5] }}|{{ {'a': 1, 'b': [1, 2]} }}|{{ (1,) }}|{{ () }}|{{ (1, 2) }}|{{ [(1, 'x')] }}"), "None|True|False|[1, 'a', None, True, 1.5]|{'a': 1, 'b': [1, 2]}|(1,)|()|(1, 2)|[(1, 'x')]");
  EXPECT_EQ(Render("{{ \"it's\" }}|{{ [\"it's\", 'say \"hi\"', \"both ' \\\"\"] }}|{{ ['\\n\\t\\\\', '\\x00\\x7f', 'é😀', '\\u00a0\\u200b\\u2028'] }}"), "it's|[\"it's\", 'say \"hi\"', 'both \\' \"']|['\\n\\t\\\\', '\\x00\\x7f', 'é😀', '\\xa0\\u200b\\u2028']");
  EXPECT_EQ(Render("{{ namespace(a=1, b='x') }}"), "<Namespace {'a': 1, 'b': 'x'}>");
}

TEST(ValueTest, Truthiness) {
  EXPECT_EQ(Render("{{ 'y' if 0 else 'n' }}{{ 'y' if 0.0 else 'n' }}{{ 'y' if '' else 'n' }}{{ 'y' if [] else 'n' }}{{ 'y' if {} else 'n' }}{{ 'y' if none else 'n' }}{{ 'y' if missing else 'n' }}{{ 'y' if ' ' else 'n' }}{{ 'y' if [0] else 'n' }}{{ 'y' if namespace() else 'n' }}"), "nnnnnnnyyy");
}
TEST(ValueTest, FormatFloatIsPythonRepr) {
  EXPECT_EQ(FormatFloat(1.0), "1.0");
  EXPECT_EQ(FormatFloat(0.1), "0.1");
  EXPECT_EQ(FormatFloat(1e16), "1e+16");
  EXPECT_EQ(FormatFloat(1e15), "1000000000000000.0");
  EXPECT_EQ(FormatFloat(0.0001), "0.0001");
  EXPECT_EQ(FormatFloat(0.00001), "1e-05");
  EXPECT_EQ(FormatFloat(-2.5e-300), "-2.5e-300");
  EXPECT_EQ(FormatFloat(1.0 / 0.0), "inf");
  EXPECT_EQ(FormatFloat(-0.0), "-0.0");
}

TEST(ValueTest, DeeplyNestedValuesFailInsteadOfOverflowingTheStack) {
  std::vector<Value> inner;
  Value v = Value::List({});
  for (int i = 0; i < 100000; ++i) v = Value::List({v});
  EXPECT_THROW(Str(v), RenderError);
  EXPECT_THROW(Equals(v, v), RenderError);
}

// Freeing such a value must not recurse either: lists and dicts nested 200,000 deep, and a
// shared inner value that outlives its holders.
TEST(ValueTest, DeeplyNestedValuesAreFreedWithoutRecursion) {
  Value list = Value::List({});
  for (int i = 0; i < 200000; ++i) list = Value::List({list, Value(i)});
  Value dict = Value::None();
  for (int i = 0; i < 200000; ++i) {
    DictData d;
    d.Set(Value("next"), dict);
    d.Set(Value("list"), Value::List({dict}));
    dict = Value::Dict(std::move(d));
  }
  Value kept = list.AsList()[0].AsList()[0];  // shared: survives the release of its holders
  list = Value();
  dict = Value();
  ASSERT_TRUE(kept.is_list());
  EXPECT_EQ(kept.AsList()[1].AsInt(), 199997);
  kept = Value();
}

TEST(ValueTest, DictKeepsInsertionOrderAndReplacesInPlace) {
  DictData d;
  d.Set(Value("b"), Value(1));
  d.Set(Value("a"), Value(2));
  d.Set(Value(int64_t{3}), Value("three"));
  d.Set(Value("b"), Value(9));
  EXPECT_EQ(Str(Value::Dict(d)), "{'b': 9, 'a': 2, 3: 'three'}");
  ASSERT_NE(d.Find(Value(3.0)), nullptr);  // 3 == 3.0, as in Python
  EXPECT_EQ(d.Find(Value(3.0))->AsString(), "three");
}

}  // namespace
}  // namespace ferry::jinja
