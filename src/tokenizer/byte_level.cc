#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace ferry::tokenizer {

ByteLevelAlphabet::ByteLevelAlphabet() {
  char_to_byte_.fill(-1);
  // Printable bytes map to themselves; the rest, in order, to U+0100 upwards.
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
    AppendUtf8(cp, &byte_to_utf8_[b]);
    char_to_byte_[cp] = static_cast<int16_t>(b);
  }
}

const ByteLevelAlphabet& ByteLevelAlphabet::Get() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

void ByteLevelAlphabet::Encode(std::string_view bytes, std::string* out) const {
  for (char c : bytes) out->append(byte_to_utf8_[static_cast<unsigned char>(c)]);
}

bool ByteLevelAlphabet::Decode(std::string_view token, std::string* out) const {
  const size_t mark = out->size();
  size_t pos = 0;
  while (pos < token.size()) {
    size_t len = 0;
    char32_t cp = 0;
    if (ScanUtf8(token, pos, &len, &cp) != Utf8Scan::kOk || cp >= char_to_byte_.size() ||
        char_to_byte_[cp] < 0) {
      out->resize(mark);
      return false;
    }
    out->push_back(static_cast<char>(char_to_byte_[cp]));
    pos += len;
  }
  return true;
}

}  // namespace ferry::tokenizer
