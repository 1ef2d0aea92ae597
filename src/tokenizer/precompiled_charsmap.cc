#include "tokenizer/precompiled_charsmap.h"

#include <cstring>

#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer {
namespace {

// darts-clone's unit layout.
bool HasLeaf(uint32_t unit) { return ((unit >> 8) & 1) == 1; }
uint32_t Value(uint32_t unit) { return unit & ((1U << 31) - 1); }
uint32_t Label(uint32_t unit) { return unit & ((1U << 31) | 0xFF); }
uint32_t Offset(uint32_t unit) { return (unit >> 10) << ((unit & (1U << 9)) >> 6); }

int Base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

bool IsExtend(char32_t cp) {
  using unicode::Category;
  const Category c = unicode::GetCategory(cp);
  if (c == Category::kMn || c == Category::kMc || c == Category::kMe) return true;
  if (cp == 0x200C || (cp >= 0x1F3FB && cp <= 0x1F3FF) || (cp >= 0xE0020 && cp <= 0xE007F)) return true;
  return false;
}

bool IsHangulL(char32_t cp) { return (cp >= 0x1100 && cp <= 0x115F) || (cp >= 0xA960 && cp <= 0xA97C); }
bool IsHangulV(char32_t cp) { return (cp >= 0x1160 && cp <= 0x11A7) || (cp >= 0xD7B0 && cp <= 0xD7C6); }
bool IsHangulT(char32_t cp) { return (cp >= 0x11A8 && cp <= 0x11FF) || (cp >= 0xD7CB && cp <= 0xD7FB); }
bool IsHangulSyllable(char32_t cp) { return cp >= 0xAC00 && cp <= 0xD7A3; }
bool IsHangulLV(char32_t cp) { return IsHangulSyllable(cp) && (cp - 0xAC00) % 28 == 0; }
bool IsRegional(char32_t cp) { return cp >= 0x1F1E6 && cp <= 0x1F1FF; }

}  // namespace

Result<PrecompiledCharsmap> PrecompiledCharsmap::Create(std::string_view blob) {
  if (blob.size() < 4) return InvalidArgument("precompiled_charsmap is shorter than its header");
  uint32_t trie_bytes = 0;
  for (int i = 3; i >= 0; --i) trie_bytes = (trie_bytes << 8) | static_cast<unsigned char>(blob[static_cast<size_t>(i)]);
  if (trie_bytes % 4 != 0 || trie_bytes > blob.size() - 4 || trie_bytes == 0) {
    return InvalidArgument("precompiled_charsmap has a trie of " + std::to_string(trie_bytes) +
                           " bytes in a map of " + std::to_string(blob.size()));
  }
  PrecompiledCharsmap m;
  m.units_.resize(trie_bytes / 4);
  for (size_t i = 0; i < m.units_.size(); ++i) {
    const unsigned char* p = reinterpret_cast<const unsigned char*>(blob.data()) + 4 + 4 * i;
    m.units_[i] = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                  (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
  }
  m.normalized_.assign(blob.substr(4 + trie_bytes));
  return m;
}

Result<PrecompiledCharsmap> PrecompiledCharsmap::FromBase64(std::string_view base64) {
  std::string raw;
  raw.reserve(base64.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : base64) {
    if (c == '=' || c == '\n' || c == '\r') continue;
    const int v = Base64Value(c);
    if (v < 0) return InvalidArgument("precompiled_charsmap is not base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      raw.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return Create(raw);
}

bool PrecompiledCharsmap::Transform(std::string_view chunk, std::string_view* replacement) const {
  const size_t n_units = units_.size();
  size_t node = 0;
  node ^= Offset(units_[0]);
  for (char ch : chunk) {
    const uint32_t key = static_cast<unsigned char>(ch);
    node ^= key;
    if (node >= n_units) return false;
    const uint32_t unit = units_[node];
    if (Label(unit) != key) return false;
    node ^= Offset(unit);
    if (node >= n_units) return false;
    if (HasLeaf(unit)) {
      const size_t index = Value(units_[node]);
      if (index >= normalized_.size()) return false;
      const size_t end = normalized_.find('\0', index);
      *replacement = std::string_view(normalized_).substr(index, (end == std::string::npos ? normalized_.size() : end) -
                                                                     index);
      return true;  // the first (shortest) match, as the reference takes
    }
  }
  return false;
}

std::string PrecompiledCharsmap::Normalize(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  const std::vector<size_t> bounds = GraphemeBoundaries(text);
  for (size_t g = 0; g + 1 < bounds.size(); ++g) {
    const std::string_view grapheme = text.substr(bounds[g], bounds[g + 1] - bounds[g]);
    std::string_view rep;
    if (grapheme.size() < 6 && Transform(grapheme, &rep)) {
      out.append(rep);
      continue;
    }
    size_t pos = 0;
    while (pos < grapheme.size()) {
      const size_t start = pos;
      NextCodePoint(grapheme, &pos);
      const std::string_view ch = grapheme.substr(start, pos - start);
      if (Transform(ch, &rep)) {
        out.append(rep);
      } else {
        out.append(ch);
      }
    }
  }
  return out;
}

std::vector<size_t> GraphemeBoundaries(std::string_view text) {
  std::vector<size_t> bounds;
  size_t pos = 0;
  char32_t prev = 0;
  int regional_run = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const char32_t cp = NextCodePoint(text, &pos);
    bool join = false;
    if (start > 0) {
      if (prev == '\r' && cp == '\n') {
        join = true;
      } else if (prev == '\r' || prev == '\n' || cp == '\r' || cp == '\n') {
        join = false;
      } else if (IsExtend(cp) || cp == 0x200D) {
        join = true;
      } else if (prev == 0x200D) {
        join = true;  // ZWJ sequences (emoji)
      } else if ((IsHangulL(prev) && (IsHangulL(cp) || IsHangulV(cp) || IsHangulSyllable(cp))) ||
                 ((IsHangulLV(prev) || IsHangulV(prev)) && (IsHangulV(cp) || IsHangulT(cp))) ||
                 ((IsHangulSyllable(prev) || IsHangulT(prev)) && IsHangulT(cp) && !IsHangulLV(prev)) ||
                 (IsHangulLV(prev) && IsHangulT(cp))) {
        join = true;
      } else if (IsRegional(prev) && IsRegional(cp) && regional_run % 2 == 1) {
        join = true;
      }
    }
    regional_run = IsRegional(cp) ? regional_run + 1 : 0;
    if (!join) bounds.push_back(start);
    prev = cp;
  }
  bounds.push_back(text.size());
  return bounds;
}

}  // namespace ferry::tokenizer
