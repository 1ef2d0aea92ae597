// Unicode tables and UTF-8 helpers.
#include <gtest/gtest.h>

#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer {
namespace {

using unicode::NormalForm;

TEST(Utf8Test, ValidatesPerUnicodeTable) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("ascii"));
  EXPECT_TRUE(IsValidUtf8("é€🦙"));
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));  // U+10FFFF
  EXPECT_EQ(FindInvalidUtf8("ab\xC0\xAF"), 2u);   // overlong
  EXPECT_EQ(FindInvalidUtf8("\xED\xA0\x80"), 0u);  // surrogate
  EXPECT_EQ(FindInvalidUtf8("\xF4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(FindInvalidUtf8("x\xE2\x82"), 1u);  // truncated
  EXPECT_EQ(FindInvalidUtf8("\x80"), 0u);
}

TEST(Utf8Test, LossyConversionReplacesMaximalSubparts) {
  std::string out;
  AppendValidUtf8("a\xF0\x9F\x41\xFF", false, &out);
  EXPECT_EQ(out, "a\xEF\xBF\xBD" "A\xEF\xBF\xBD");
  out.clear();
  EXPECT_EQ(AppendValidUtf8("ok\xE2\x82", true, &out), 2u);
  EXPECT_EQ(out, "ok");
  out.clear();
  EXPECT_EQ(AppendValidUtf8("ok\xE2\x82", false, &out), 0u);
  EXPECT_EQ(out, "ok\xEF\xBF\xBD");
}

TEST(UnicodeTest, Categories) {
  EXPECT_EQ(unicode::GetCategory(U'A'), unicode::Category::kLu);
  EXPECT_EQ(unicode::GetCategory(U'ж'), unicode::Category::kLl);
  EXPECT_EQ(unicode::GetCategory(0x0301), unicode::Category::kMn);
  EXPECT_EQ(unicode::GetCategory(U'½'), unicode::Category::kNo);
  EXPECT_EQ(unicode::GetCategory(0x200D), unicode::Category::kCf);
  EXPECT_EQ(unicode::GetCategory(0x10FFFF), unicode::Category::kCn);
  EXPECT_TRUE(unicode::IsWhitespace(0x3000));
  EXPECT_TRUE(unicode::IsWhitespace(0x85));
  EXPECT_FALSE(unicode::IsWhitespace(0x200B));
  EXPECT_TRUE(unicode::IsBertPunctuation(U'$'));
  EXPECT_TRUE(unicode::IsBertPunctuation(U'「'));
  EXPECT_FALSE(unicode::IsBertPunctuation(U'€'));
  EXPECT_TRUE(unicode::IsChineseChar(U'我'));
  EXPECT_FALSE(unicode::IsChineseChar(U'～'));
  EXPECT_TRUE(unicode::IsNumeric(U'٣'));
  EXPECT_TRUE(unicode::IsWordChar(0x0301));
}

TEST(UnicodeTest, Lowercase) {
  std::string out;
  for (char32_t cp : std::u32string(U"ÀÉÎ БЪЛГ Σ İ")) unicode::AppendLowercase(cp, &out);
  EXPECT_EQ(out, "àéî бълг σ i\xCC\x87");
}

TEST(UnicodeTest, NormalForms) {
  EXPECT_EQ(unicode::Normalize("e\xCC\x81", NormalForm::kNfc), "é");
  EXPECT_EQ(unicode::Normalize("é", NormalForm::kNfd), "e\xCC\x81");
  EXPECT_EQ(unicode::Normalize("ﬁ①", NormalForm::kNfkc), "fi1");
  EXPECT_EQ(unicode::Normalize("ﬁ", NormalForm::kNfc), "ﬁ");
  EXPECT_EQ(unicode::Normalize("Ǆ", NormalForm::kNfkd), "DZ\xCC\x8C");
  // Hangul decomposes into jamo and composes back.
  const std::string jamo = unicode::Normalize("한", NormalForm::kNfd);
  EXPECT_EQ(jamo, "\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB");
  EXPECT_EQ(unicode::Normalize(jamo, NormalForm::kNfc), "한");
  // Canonical ordering: dot below (220) sorts before dot above (230); NFC then composes
  // the dot below with the letter.
  EXPECT_EQ(unicode::Normalize("a\xCC\x87\xCC\xA3", NormalForm::kNfd), "a\xCC\xA3\xCC\x87");
  EXPECT_EQ(unicode::Normalize("a\xCC\x87\xCC\xA3", NormalForm::kNfc), "\xE1\xBA\xA1\xCC\x87");
  // Composition exclusions stay decomposed.
  EXPECT_EQ(unicode::Normalize("\xE0\xA5\x98", NormalForm::kNfc), "\xE0\xA4\x95\xE0\xA4\xBC");
  EXPECT_EQ(unicode::Normalize("Cửa Việt", NormalForm::kNfc), "Cửa Việt");
}

}  // namespace
}  // namespace ferry::tokenizer
