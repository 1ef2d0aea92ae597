// GPT-2's reversible byte <-> printable character mapping used by byte-level BPE.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace ferry::tokenizer {

// Thread-safe: immutable after construction (use ByteLevelAlphabet::Get()).
class ByteLevelAlphabet {
 public:
  static const ByteLevelAlphabet& Get();

  // Appends the mapped characters of every byte of `bytes`.
  void Encode(std::string_view bytes, std::string* out) const;
  // Maps a token back to bytes. Returns false (leaving *out unchanged) when a character is
  // outside the alphabet, e.g. in an added token such as "<|endoftext|>" with a space.
  bool Decode(std::string_view token, std::string* out) const;

 private:
  ByteLevelAlphabet();

  std::array<std::string, 256> byte_to_utf8_;
  std::array<int16_t, 324> char_to_byte_;  // indexed by code point; -1 when unmapped
};

}  // namespace ferry::tokenizer
