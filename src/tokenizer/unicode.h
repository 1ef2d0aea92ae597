// Unicode character properties and normalization forms, as the Hugging Face normalizers and
// pre-tokenizers define them (Rust's char methods and the unicode-normalization crate).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ferry::tokenizer::unicode {

enum class Category : uint8_t {
  kLu, kLl, kLt, kLm, kLo, kMn, kMc, kMe, kNd, kNl, kNo, kPc, kPd, kPs, kPe, kPi, kPf, kPo,
  kSm, kSc, kSk, kSo, kZs, kZl, kZp, kCc, kCf, kCs, kCo, kCn,
};

Category GetCategory(char32_t cp);

// The White_Space property (Rust's char::is_whitespace).
bool IsWhitespace(char32_t cp);
bool IsLetter(char32_t cp);
// Any N* category (Rust's char::is_numeric).
bool IsNumeric(char32_t cp);
// Any P* category.
bool IsPunctuation(char32_t cp);
// Any C* category (Rust's unicode_categories is_other).
bool IsOther(char32_t cp);
bool IsNonspacingMark(char32_t cp);
// A regex word character (\w in Rust's regex and Oniguruma): letters, marks, decimal
// digits, letter numbers, connector punctuation and the joiners.
bool IsWordChar(char32_t cp);
// What BERT treats as punctuation: ASCII punctuation and symbols, plus every P* category.
bool IsBertPunctuation(char32_t cp);
// The CJK ideograph blocks BERT pads with spaces.
bool IsChineseChar(char32_t cp);

// Appends the full lowercase mapping of `cp` (which may be several code points).
void AppendLowercase(char32_t cp, std::string* out);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// `text` must be valid UTF-8.
std::string Normalize(std::string_view text, NormalForm form);

}  // namespace ferry::tokenizer::unicode
