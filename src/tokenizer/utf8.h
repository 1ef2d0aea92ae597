// UTF-8 scanning shared by the tokenizer: validation, code point iteration and the lossy
// conversion Hugging Face applies to decoded bytes (String::from_utf8_lossy).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ferry::tokenizer {

inline constexpr char32_t kReplacementChar = 0xFFFD;

enum class Utf8Scan {
  kOk,         // a complete, well-formed sequence
  kInvalid,    // not a prefix of any well-formed sequence
  kTruncated,  // well-formed so far, but the input ends inside the sequence
};

// Examines the sequence starting at text[pos] (pos < text.size()). Sets *len to the sequence
// length for kOk, to the maximal invalid subpart (replaced by one U+FFFD) for kInvalid, and to
// the bytes seen for kTruncated. *cp is set only for kOk.
Utf8Scan ScanUtf8(std::string_view text, size_t pos, size_t* len, char32_t* cp);

// Byte offset of the first ill-formed sequence, or std::string_view::npos when valid.
size_t FindInvalidUtf8(std::string_view text);
inline bool IsValidUtf8(std::string_view text) {
  return FindInvalidUtf8(text) == std::string_view::npos;
}

// Decodes the code point at text[*pos] of valid UTF-8 and advances *pos past it.
char32_t NextCodePoint(std::string_view text, size_t* pos);
// Code point ending at text[end - 1] of valid UTF-8; sets *start to its first byte.
char32_t PrevCodePoint(std::string_view text, size_t end, size_t* start);

void AppendUtf8(char32_t cp, std::string* out);
inline size_t Utf8Length(char32_t cp) {
  return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

// Appends `bytes` with every maximal ill-formed subpart replaced by U+FFFD. When
// `keep_truncated_tail` is set, a well-formed but incomplete sequence at the very end is left
// out and its length returned, so that a stream can complete it later; otherwise it is
// replaced too and 0 is returned.
size_t AppendValidUtf8(std::string_view bytes, bool keep_truncated_tail, std::string* out);

}  // namespace ferry::tokenizer
