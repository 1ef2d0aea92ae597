#include "tokenizer/utf8.h"

namespace ferry::tokenizer {

Utf8Scan ScanUtf8(std::string_view text, size_t pos, size_t* len, char32_t* cp) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) {
    *len = 1;
    *cp = b0;
    return Utf8Scan::kOk;
  }
  // Table 3-7 of the Unicode standard: the second byte's range depends on the lead byte,
  // which is what rules out overlongs, surrogates and code points above U+10FFFF.
  size_t trail = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  char32_t value = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    trail = 1;
    value = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    trail = 2;
    value = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    trail = 3;
    value = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *len = 1;
    return Utf8Scan::kInvalid;
  }
  for (size_t i = 1; i <= trail; ++i) {
    if (pos + i >= text.size()) {
      *len = i;
      return Utf8Scan::kTruncated;
    }
    const auto b = static_cast<unsigned char>(text[pos + i]);
    if (b < lo || b > hi) {
      *len = i;
      return Utf8Scan::kInvalid;
    }
    lo = 0x80;
    hi = 0xBF;
    value = (value << 6) | (b & 0x3F);
  }
  *len = trail + 1;
  *cp = value;
  return Utf8Scan::kOk;
}

size_t FindInvalidUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    size_t len = 0;
    char32_t cp = 0;
    if (ScanUtf8(text, pos, &len, &cp) != Utf8Scan::kOk) return pos;
    pos += len;
  }
  return std::string_view::npos;
}

char32_t NextCodePoint(std::string_view text, size_t* pos) {
  const auto b0 = static_cast<unsigned char>(text[*pos]);
  if (b0 < 0x80) {
    ++*pos;
    return b0;
  }
  size_t len = 0;
  char32_t cp = kReplacementChar;
  if (ScanUtf8(text, *pos, &len, &cp) != Utf8Scan::kOk) cp = kReplacementChar;
  *pos += len;
  return cp;
}

char32_t PrevCodePoint(std::string_view text, size_t end, size_t* start) {
  size_t begin = end - 1;
  while (begin > 0 && end - begin < 4 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) {
    --begin;
  }
  *start = begin;
  size_t pos = begin;
  return NextCodePoint(text, &pos);
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t AppendValidUtf8(std::string_view bytes, bool keep_truncated_tail, std::string* out) {
  size_t pos = 0;
  size_t run_start = 0;  // start of the pending run of valid bytes, copied in one go
  while (pos < bytes.size()) {
    if (static_cast<unsigned char>(bytes[pos]) < 0x80) {
      ++pos;
      continue;
    }
    size_t len = 0;
    char32_t cp = 0;
    const Utf8Scan scan = ScanUtf8(bytes, pos, &len, &cp);
    if (scan == Utf8Scan::kOk) {
      pos += len;
      continue;
    }
    out->append(bytes.substr(run_start, pos - run_start));
    if (scan == Utf8Scan::kTruncated && keep_truncated_tail) return bytes.size() - pos;
    AppendUtf8(kReplacementChar, out);
    pos += len;
    run_start = pos;
  }
  out->append(bytes.substr(run_start));
  return 0;
}

}  // namespace ferry::tokenizer
