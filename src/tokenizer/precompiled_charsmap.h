// SentencePiece's precompiled character map, the "Precompiled" normalizer of tokenizer.json
// files converted from SentencePiece models (XLM-RoBERTa, bge-m3, multilingual-e5, T5, ...):
// a double-array trie (darts-clone) from UTF-8 keys to replacement strings, applied the way
// Hugging Face tokenizers applies it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ferry::tokenizer {

// Thread-safe: immutable after Create().
class PrecompiledCharsmap {
 public:
  // From the raw map: a little-endian u32 trie size in bytes, the trie's u32 units, then the
  // NUL-separated replacement strings.
  static Result<PrecompiledCharsmap> Create(std::string_view blob);
  // From tokenizer.json's base64 text.
  static Result<PrecompiledCharsmap> FromBase64(std::string_view base64);

  // The replacement of the shortest key that is a prefix of `chunk`, if any (what the
  // reference takes: the first result of its common-prefix search).
  bool Transform(std::string_view chunk, std::string_view* replacement) const;

  // Per grapheme cluster: a cluster of fewer than 6 bytes is first looked up whole; else (or
  // when that finds nothing) each character is replaced by its mapping or kept.
  std::string Normalize(std::string_view text) const;

 private:
  std::vector<uint32_t> units_;
  std::string normalized_;
};

// Where extended grapheme clusters begin (approximately UAX #29: combining marks, ZWJ
// sequences, emoji modifiers, Hangul jamo, regional-indicator pairs and CR LF stay together).
// Returns the byte offsets of the cluster starts in `text`, plus text.size().
std::vector<size_t> GraphemeBoundaries(std::string_view text);

}  // namespace ferry::tokenizer
