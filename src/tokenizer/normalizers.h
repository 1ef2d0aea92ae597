// Hugging Face normalizers: rewrite text before pre-tokenization, optionally keeping every
// byte's alignment with the input (for token offsets).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "tokenizer/aligned_text.h"
#include "tokenizer/json_util.h"

namespace ferry::tokenizer {

// Thread-safe: immutable after construction.
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `text` is valid UTF-8 and stays so.
  virtual Status Normalize(std::string* text) const = 0;
  // Normalize, keeping each byte's alignment; the text comes out exactly as Normalize
  // writes it. The default rewrites one character at a time, which is exact for normalizers
  // that treat characters independently, and checks the result against Normalize; where
  // they differ (a composition across characters) it aligns whole words, and failing that
  // the whole text, to what they came from.
  virtual Status NormalizeAligned(AlignedText* text) const;
};

// Builds from a tokenizer.json "normalizer" object. A null JSON value yields nullptr.
Result<std::unique_ptr<Normalizer>> MakeNormalizer(const Json& config);

}  // namespace ferry::tokenizer
