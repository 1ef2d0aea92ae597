#include "template/text.h"

#include <locale.h>
#include <wctype.h>

#include "template/value.h"

namespace ferry::jinja::text {

namespace {

// Unicode classification needs a UTF-8 locale; the process's own stays "C". Created once.
locale_t Utf8Locale() {
  static const locale_t loc = [] {
    locale_t l = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
    if (l == static_cast<locale_t>(nullptr)) l = newlocale(LC_CTYPE_MASK, "C", static_cast<locale_t>(nullptr));
    return l;
  }();
  return loc;
}

template <typename F>
std::string MapChars(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  for (uint32_t cp : DecodeUtf8(s)) AppendUtf8(f(cp), out);
  return out;
}

bool InChars(uint32_t cp, const std::optional<std::vector<uint32_t>>& chars) {
  if (!chars) return IsPySpace(cp);
  for (uint32_t c : *chars) {
    if (c == cp) return true;
  }
  return false;
}

}  // namespace

uint32_t ToLower(uint32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
  return static_cast<uint32_t>(towlower_l(static_cast<wint_t>(cp), Utf8Locale()));
}

uint32_t ToUpper(uint32_t cp) {
  if (cp < 0x80) return cp >= 'a' && cp <= 'z' ? cp - 32 : cp;
  return static_cast<uint32_t>(towupper_l(static_cast<wint_t>(cp), Utf8Locale()));
}

bool IsAlpha(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  return iswalpha_l(static_cast<wint_t>(cp), Utf8Locale()) != 0;
}

bool IsDigit(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return iswdigit_l(static_cast<wint_t>(cp), Utf8Locale()) != 0;
}

bool IsLower(uint32_t cp) { return ToUpper(cp) != cp || (cp >= 'a' && cp <= 'z'); }
bool IsUpper(uint32_t cp) { return ToLower(cp) != cp || (cp >= 'A' && cp <= 'Z'); }
bool IsCased(uint32_t cp) { return IsLower(cp) || IsUpper(cp); }
bool IsWordChar(uint32_t cp) { return cp == '_' || IsAlpha(cp) || IsDigit(cp); }

std::string Lower(std::string_view s) { return MapChars(s, ToLower); }
std::string Upper(std::string_view s) { return MapChars(s, ToUpper); }
std::string SwapCase(std::string_view s) {
  return MapChars(s, [](uint32_t cp) { return IsUpper(cp) ? ToLower(cp) : IsLower(cp) ? ToUpper(cp) : cp; });
}

std::string Title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (uint32_t cp : DecodeUtf8(s)) {
    const bool cased = IsCased(cp);
    AppendUtf8(cased ? (prev_cased ? ToLower(cp) : ToUpper(cp)) : cp, out);
    prev_cased = cased;
  }
  return out;
}

std::string Capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (uint32_t cp : DecodeUtf8(s)) {
    AppendUtf8(first ? ToUpper(cp) : ToLower(cp), out);
    first = false;
  }
  return out;
}

std::string Strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::vector<uint32_t> cps = DecodeUtf8(s);
  std::optional<std::vector<uint32_t>> set;
  if (chars) set = DecodeUtf8(*chars);
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && InChars(cps[b], set)) ++b;
  }
  if (right) {
    while (e > b && InChars(cps[e - 1], set)) --e;
  }
  return EncodeUtf8(cps, b, e);
}

std::vector<std::string> Split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                               bool from_right) {
  std::vector<std::string> out;
  if (!sep) {
    const std::vector<uint32_t> cps = DecodeUtf8(s);
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && IsPySpace(cps[i])) ++i;
      if (i >= cps.size()) break;
      size_t j = i;
      while (j < cps.size() && !IsPySpace(cps[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) >= words.size()) {
      for (auto [b, e] : words) out.push_back(EncodeUtf8(cps, b, e));
      return out;
    }
    const size_t keep = static_cast<size_t>(maxsplit);
    if (!from_right) {
      // The remainder keeps its own whitespace, as Python's does.
      for (size_t w = 0; w < keep; ++w) out.push_back(EncodeUtf8(cps, words[w].first, words[w].second));
      out.push_back(EncodeUtf8(cps, words[keep].first, cps.size()));
    } else {
      const size_t split_from = words.size() - keep;
      out.push_back(EncodeUtf8(cps, 0, words[split_from - 1].second));
      for (size_t w = split_from; w < words.size(); ++w) out.push_back(EncodeUtf8(cps, words[w].first, words[w].second));
    }
    return out;
  }
  if (sep->empty()) Raise("ValueError", "empty separator");
  std::vector<size_t> cuts;
  for (size_t at = s.find(*sep); at != std::string_view::npos; at = s.find(*sep, at + sep->size())) cuts.push_back(at);
  if (maxsplit >= 0 && cuts.size() > static_cast<size_t>(maxsplit)) {
    if (from_right) {
      cuts.erase(cuts.begin(), cuts.end() - maxsplit);
    } else {
      cuts.resize(static_cast<size_t>(maxsplit));
    }
  }
  size_t begin = 0;
  for (size_t at : cuts) {
    out.emplace_back(s.substr(begin, at - begin));
    begin = at + sep->size();
  }
  out.emplace_back(s.substr(begin));
  return out;
}

std::vector<std::string> SplitLines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  const std::vector<uint32_t> cps = DecodeUtf8(s);
  size_t begin = 0;
  size_t i = 0;
  while (i < cps.size()) {
    const uint32_t c = cps[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                     c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    size_t end = i + 1;
    if (c == '\r' && end < cps.size() && cps[end] == '\n') ++end;
    out.push_back(EncodeUtf8(cps, begin, keepends ? end : i));
    begin = i = end;
  }
  if (begin < cps.size()) out.push_back(EncodeUtf8(cps, begin, cps.size()));
  return out;
}

std::string Replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between every character (and at both ends).
    const std::vector<uint32_t> cps = DecodeUtf8(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < cps.size()) AppendUtf8(cps[i], out);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(from, pos);
    if (at == std::string_view::npos) break;
    out.append(s.substr(pos, at - pos));
    out.append(to);
    pos = at + from.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

std::string Pad(std::string_view s, int64_t width, std::string_view fill, char align) {
  const int64_t len = static_cast<int64_t>(Utf8Length(s));
  if (width <= len) return std::string(s);
  const int64_t total = width - len;
  int64_t left = align == '<' ? 0 : align == '>' ? total : total / 2 + (total & width & 1);
  const int64_t right = total - left;
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < right; ++i) out += fill;
  return out;
}

}  // namespace ferry::jinja::text
