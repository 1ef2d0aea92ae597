#include "tokenizer/unicode.h"

#include <algorithm>
#include <vector>

#include "tokenizer/unicode_data.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer::unicode {
namespace {

namespace data = unicode_data;

// Hangul syllables decompose and compose algorithmically (Unicode 3.12), so the tables
// leave out all 11,172 of them.
constexpr char32_t kHangulBase = 0xAC00;
constexpr char32_t kHangulLBase = 0x1100;
constexpr char32_t kHangulVBase = 0x1161;
constexpr char32_t kHangulTBase = 0x11A7;
constexpr char32_t kHangulLCount = 19;
constexpr char32_t kHangulVCount = 21;
constexpr char32_t kHangulTCount = 28;
constexpr char32_t kHangulNCount = kHangulVCount * kHangulTCount;
constexpr char32_t kHangulSCount = kHangulLCount * kHangulNCount;

const data::MappingEntry* FindMapping(const data::MappingEntry* table, size_t count,
                                      char32_t cp) {
  const data::MappingEntry* end = table + count;
  const data::MappingEntry* it = std::lower_bound(
      table, end, cp,
      [](const data::MappingEntry& e, char32_t value) { return e.code_point < value; });
  return it != end && it->code_point == cp ? it : nullptr;
}

uint8_t CombiningClass(char32_t cp) {
  if (cp < 0x300) return 0;
  const data::CombiningClassRun* begin = data::kCombiningClass;
  const data::CombiningClassRun* end = begin + data::kCombiningClassCount;
  const data::CombiningClassRun* it = std::upper_bound(
      begin, end, cp,
      [](char32_t value, const data::CombiningClassRun& r) { return value < r.first; });
  if (it == begin) return 0;
  --it;
  return cp <= it->last ? it->combining_class : 0;
}

void Decompose(char32_t cp, bool compatibility, std::vector<char32_t>* out) {
  if (cp >= kHangulBase && cp < kHangulBase + kHangulSCount) {
    const char32_t s = cp - kHangulBase;
    out->push_back(kHangulLBase + s / kHangulNCount);
    out->push_back(kHangulVBase + (s % kHangulNCount) / kHangulTCount);
    if (s % kHangulTCount != 0) out->push_back(kHangulTBase + s % kHangulTCount);
    return;
  }
  const data::MappingEntry* entry = nullptr;
  if (compatibility) {
    entry = FindMapping(data::kCompatibilityDecomposition,
                        data::kCompatibilityDecompositionCount, cp);
  }
  if (entry == nullptr) {
    entry = FindMapping(data::kCanonicalDecomposition, data::kCanonicalDecompositionCount, cp);
  }
  if (entry == nullptr) {
    out->push_back(cp);
    return;
  }
  out->insert(out->end(), data::kPool + entry->offset,
              data::kPool + entry->offset + entry->length);
}

// Returns the primary composite of (a, b), or 0.
char32_t Compose(char32_t a, char32_t b) {
  if (a >= kHangulLBase && a < kHangulLBase + kHangulLCount && b >= kHangulVBase &&
      b < kHangulVBase + kHangulVCount) {
    return kHangulBase + ((a - kHangulLBase) * kHangulVCount + (b - kHangulVBase)) * kHangulTCount;
  }
  if (a >= kHangulBase && a < kHangulBase + kHangulSCount && (a - kHangulBase) % kHangulTCount == 0 &&
      b > kHangulTBase && b < kHangulTBase + kHangulTCount) {
    return a + (b - kHangulTBase);
  }
  const data::CompositionPair* begin = data::kCompositions;
  const data::CompositionPair* end = begin + data::kCompositionCount;
  const data::CompositionPair* it = std::lower_bound(
      begin, end, std::pair<char32_t, char32_t>(a, b),
      [](const data::CompositionPair& p, const std::pair<char32_t, char32_t>& v) {
        return p.first != v.first ? p.first < v.first : p.second < v.second;
      });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

void CanonicalOrder(std::vector<char32_t>* cps) {
  // Insertion sort by combining class within each run of non-starters; stable, as required.
  std::vector<char32_t>& v = *cps;
  for (size_t i = 1; i < v.size(); ++i) {
    const uint8_t cc = CombiningClass(v[i]);
    if (cc == 0) continue;
    size_t j = i;
    while (j > 0) {
      const uint8_t prev = CombiningClass(v[j - 1]);
      if (prev == 0 || prev <= cc) break;
      std::swap(v[j - 1], v[j]);
      --j;
    }
  }
}

void ComposeInPlace(std::vector<char32_t>* cps) {
  std::vector<char32_t>& v = *cps;
  if (v.empty()) return;
  size_t starter = 0;
  int last_class = CombiningClass(v[0]) == 0 ? 0 : 256;  // a leading non-starter blocks
  size_t out = 1;
  for (size_t i = 1; i < v.size(); ++i) {
    const char32_t ch = v[i];
    const int ch_class = CombiningClass(ch);
    const char32_t composite = last_class == 256 ? 0 : Compose(v[starter], ch);
    if (composite != 0 && (last_class < ch_class || last_class == 0)) {
      v[starter] = composite;
      continue;
    }
    if (ch_class == 0) {
      starter = out;
      last_class = 0;
    } else {
      last_class = ch_class;
    }
    v[out++] = ch;
  }
  v.resize(out);
}

}  // namespace

Category GetCategory(char32_t cp) {
  const data::CategoryRun* begin = data::kCategoryRuns;
  const data::CategoryRun* end = begin + data::kCategoryRunCount;
  const data::CategoryRun* it = std::upper_bound(
      begin, end, cp, [](char32_t value, const data::CategoryRun& r) { return value < r.first; });
  if (it == begin) return Category::kCn;
  return static_cast<Category>((it - 1)->category);
}

bool IsWhitespace(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool IsLetter(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return GetCategory(cp) <= Category::kLo;
}

bool IsNumeric(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const Category c = GetCategory(cp);
  return c == Category::kNd || c == Category::kNl || c == Category::kNo;
}

bool IsPunctuation(char32_t cp) {
  const Category c = GetCategory(cp);
  return c >= Category::kPc && c <= Category::kPo;
}

bool IsOther(char32_t cp) { return GetCategory(cp) >= Category::kCc; }

bool IsNonspacingMark(char32_t cp) { return cp >= 0x300 && GetCategory(cp) == Category::kMn; }

bool IsWordChar(char32_t cp) {
  if (cp < 0x80) {
    return ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') || (cp >= '0' && cp <= '9') || cp == '_';
  }
  if (cp == 0x200C || cp == 0x200D) return true;
  const Category c = GetCategory(cp);
  return c <= Category::kNl || c == Category::kPc;
}

bool IsBertPunctuation(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
           (cp >= 123 && cp <= 126);
  }
  return IsPunctuation(cp);
}

bool IsChineseChar(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

void AppendLowercase(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
    return;
  }
  const data::MappingEntry* entry = FindMapping(data::kLowercase, data::kLowercaseCount, cp);
  if (entry == nullptr) {
    AppendUtf8(cp, out);
    return;
  }
  for (uint32_t i = 0; i < entry->length; ++i) AppendUtf8(data::kPool[entry->offset + i], out);
}

std::string Normalize(std::string_view text, NormalForm form) {
  // Everything below U+00C0 is unchanged by all four forms except the few compatibility
  // characters in Latin-1 (e.g. U+00A0, U+00B2); a pure ASCII text is the common fast case.
  bool ascii = true;
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return std::string(text);
  const bool compatibility = form == NormalForm::kNfkc || form == NormalForm::kNfkd;
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) Decompose(NextCodePoint(text, &pos), compatibility, &cps);
  CanonicalOrder(&cps);
  if (form == NormalForm::kNfc || form == NormalForm::kNfkc) ComposeInPlace(&cps);
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : cps) AppendUtf8(cp, &out);
  return out;
}

}  // namespace ferry::tokenizer::unicode
