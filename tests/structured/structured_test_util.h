// Helpers for the structured-output tests: small vocabularies and whole-string matching.
// (The independent JSON Schema validator is in test_util.h.)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "structured/grammar.h"
#include "structured/matcher.h"
#include "test_util.h"

namespace ferry::structured::testing {

// One token per byte value: matching bytes is matching tokens.
std::shared_ptr<const Vocabulary> ByteVocab();
// Bytes plus multi-byte tokens that cut JSON across its structure (`{"`, `":`, `, "`, ...),
// and English words, as a real vocabulary does.
std::shared_ptr<const Vocabulary> MixedVocab();

// Whether the whole of `text` is in the grammar's language.
bool Matches(const Grammar& grammar, const std::string& text);

}  // namespace ferry::structured::testing
