#include "tokenizer/aligned_text.h"

namespace ferry::tokenizer {

AlignedText AlignedText::Identity(std::string_view text, uint32_t base) {
  AlignedText out;
  out.text.assign(text);
  out.align.resize(text.size());
  // Every byte of a character maps to the whole character, as HF aligns them.
  size_t pos = 0;
  while (pos < text.size()) {
    size_t len = 1;
    while (pos + len < text.size() && (static_cast<unsigned char>(text[pos + len]) & 0xC0) == 0x80) ++len;
    const ByteRange r{base + static_cast<uint32_t>(pos), base + static_cast<uint32_t>(pos + len)};
    for (size_t i = 0; i < len; ++i) out.align[pos + i] = r;
    pos += len;
  }
  return out;
}

void AlignedText::Append(std::string_view bytes, ByteRange range) {
  text.append(bytes);
  align.insert(align.end(), bytes.size(), range);
}

void AlignedText::AppendSlice(const AlignedText& other, size_t from, size_t to) {
  text.append(other.text, from, to - from);
  align.insert(align.end(), other.align.begin() + static_cast<std::ptrdiff_t>(from),
               other.align.begin() + static_cast<std::ptrdiff_t>(to));
}

AlignedText AlignedText::Slice(size_t from, size_t to) const {
  AlignedText out;
  out.AppendSlice(*this, from, to);
  return out;
}

ByteRange AlignedText::Original(size_t from, size_t to) const {
  if (align.empty()) return {0, 0};
  if (to <= from) {
    const uint32_t p = from < align.size() ? align[from].first : align.back().second;
    return {p, p};
  }
  return {align[from].first, align[to - 1].second};
}

}  // namespace ferry::tokenizer
