// Helpers for the structured-output tests: small vocabularies, whole-string matching, and
// an independent JSON Schema validator (Python's jsonschema) run over many instances at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "structured/grammar.h"
#include "structured/matcher.h"

namespace ferry::structured::testing {

// One token per byte value: matching bytes is matching tokens.
std::shared_ptr<const Vocabulary> ByteVocab();
// Bytes plus multi-byte tokens that cut JSON across its structure (`{"`, `":`, `, "`, ...),
// and English words, as a real vocabulary does.
std::shared_ptr<const Vocabulary> MixedVocab();

// Whether the whole of `text` is in the grammar's language.
bool Matches(const Grammar& grammar, const std::string& text);

// Whether python3 with the jsonschema module can be run.
bool HaveJsonSchemaValidator();
// Validates each instance (JSON text) against its schema with Draft 2020-12 and its format
// checker; returns "" for a valid one, else the validator's message (or "parse error").
std::vector<std::string> ValidateJson(const std::vector<std::pair<std::string, std::string>>& schema_and_instance);

}  // namespace ferry::structured::testing
