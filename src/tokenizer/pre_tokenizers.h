// Hugging Face pre-tokenizers: cut normalized text into words for the model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/aligned_text.h"
#include "tokenizer/json_util.h"

namespace ferry::tokenizer {

struct PreToken {
  std::string text;
  // Begins at offset 0 of the input text; Metaspace's prepend_scheme "first" needs it.
  bool at_start = false;
  // Empty, or one original range per byte of `text` (when offsets are wanted); kept
  // through every split and rewrite.
  std::vector<ByteRange> align = {};

  // Bytes [begin, end) of this piece, with their alignment.
  PreToken Sub(size_t begin, size_t end, bool starts) const;
};

// Thread-safe: immutable after construction.
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces every piece by its splits (possibly rewritten); empty pieces are dropped.
  virtual Status PreTokenize(std::vector<PreToken>* pieces) const = 0;
};

// Builds from a tokenizer.json "pre_tokenizer" object. A null JSON value yields nullptr.
Result<std::unique_ptr<PreTokenizer>> MakePreTokenizer(const Json& config);

}  // namespace ferry::tokenizer
