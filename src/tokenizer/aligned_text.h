// Text that remembers where every byte came from: for each byte, the range of bytes of the
// caller's input it was produced from. Normalizers and pre-tokenizers carry it along (as
// Hugging Face's NormalizedString does) so that tokens can report offsets into the input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ferry::tokenizer {

using ByteRange = std::pair<uint32_t, uint32_t>;  // [begin, end) of the original input

struct AlignedText {
  std::string text;
  std::vector<ByteRange> align;  // one per byte of text

  // `text` aligned to itself, shifted by `base` (its place in a larger input).
  static AlignedText Identity(std::string_view text, uint32_t base = 0);
  // Appends `bytes`, every one of them aligned to `range`.
  void Append(std::string_view bytes, ByteRange range);
  // Appends bytes [from, to) of `other` with their alignment.
  void AppendSlice(const AlignedText& other, size_t from, size_t to);
  AlignedText Slice(size_t from, size_t to) const;
  // The original range of bytes [from, to): from the first one's start to the last one's
  // end (HF's convert_offsets); an empty range maps to the point before `from`.
  ByteRange Original(size_t from, size_t to) const;
  // The original range of the character at byte `pos` (its first byte's alignment).
  ByteRange At(size_t pos) const { return align[pos]; }
};

}  // namespace ferry::tokenizer
