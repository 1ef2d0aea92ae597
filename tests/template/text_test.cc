#include "template/text.h"

#include <gtest/gtest.h>

namespace ferry::jinja::text {
namespace {

using V = std::vector<std::string>;

TEST(TextTest, CaseMappingIsUnicode) {
  EXPECT_EQ(Lower("ÉCOLE Ω"), "école ω");
  EXPECT_EQ(Upper("straße ä"), "STRAßE Ä");  // Python gives "STRASSE": special casing is not modelled
  EXPECT_EQ(Title("hello wORLD they're"), "Hello World They'Re");
  EXPECT_EQ(Capitalize("hELLO"), "Hello");
  EXPECT_EQ(SwapCase("aBc"), "AbC");
}

TEST(TextTest, StripUsesPythonWhitespace) {
  EXPECT_EQ(Strip("\u3000\u00a0 x\t\n\x1c", std::nullopt, true, true), "x");
  EXPECT_EQ(Strip("xxaxx", std::string("x"), true, false), "axx");
  EXPECT_EQ(Strip("éaé", std::string("é"), true, true), "a");
}

TEST(TextTest, SplitMatchesPython) {
  EXPECT_EQ(Split("  a  b ", std::nullopt, -1, false), (V{"a", "b"}));
  EXPECT_EQ(Split("a b c", std::nullopt, 1, false), (V{"a", "b c"}));
  EXPECT_EQ(Split("a b c ", std::nullopt, 1, true), (V{"a b", "c"}));
  EXPECT_EQ(Split("a,,b", std::string(","), -1, false), (V{"a", "", "b"}));
  EXPECT_EQ(Split("a,b,c", std::string(","), 1, true), (V{"a,b", "c"}));
  EXPECT_EQ(SplitLines("a\nb\r\nc\rd\u2028e", false), (V{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(SplitLines("a\n", true), (V{"a\n"}));
}

TEST(TextTest, ReplaceAndPad) {
  EXPECT_EQ(Replace("aaa", "a", "b", 2), "bba");
  EXPECT_EQ(Replace("ab", "", "-", -1), "-a-b-");
  EXPECT_EQ(Pad("ab", 5, "*", '^'), "**ab*");
  EXPECT_EQ(Pad("abc", 6, "*", '^'), "*abc**");
  EXPECT_EQ(Pad("é", 3, ".", '>'), "..é");
}

}  // namespace
}  // namespace ferry::jinja::text
