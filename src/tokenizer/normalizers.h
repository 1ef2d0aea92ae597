// Hugging Face normalizers: rewrite text before pre-tokenization. Offsets are not tracked,
// since ferry never returns them.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "tokenizer/json_util.h"

namespace ferry::tokenizer {

// Thread-safe: immutable after construction.
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `text` is valid UTF-8 and stays so.
  virtual Status Normalize(std::string* text) const = 0;
};

// Builds from a tokenizer.json "normalizer" object. A null JSON value yields nullptr.
Result<std::unique_ptr<Normalizer>> MakeNormalizer(const Json& config);

}  // namespace ferry::tokenizer
