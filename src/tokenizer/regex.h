// PCRE2-backed regular expressions for pre-tokenizers, normalizers and decoders.
// Patterns written for Oniguruma (what Hugging Face tokenizers compile them with) are
// translated so that \s, \w and \d keep Oniguruma's Unicode meaning under PCRE2.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "tokenizer/json_util.h"

namespace ferry::tokenizer {

// Thread-safe: an immutable compiled pattern; matching uses per-thread scratch.
class Regex {
 public:
  struct Match {
    size_t begin;
    size_t end;
  };

  // Compiles with UTF + UCP and JIT. Errors name the pattern and the offset PCRE2 reports.
  static Result<Regex> Compile(std::string_view pattern);
  // A pattern that matches `literal` exactly.
  static Result<Regex> Literal(std::string_view literal);

  // Appends the successive non-overlapping, non-empty matches in `text` (valid UTF-8).
  Status FindAll(std::string_view text, std::vector<Match>* matches) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  Regex(std::shared_ptr<const Code> code, std::string pattern)
      : code_(std::move(code)), pattern_(std::move(pattern)) {}

  std::shared_ptr<const Code> code_;
  std::string pattern_;
};

// Reads the {"String": ...} / {"Regex": ...} pattern objects of tokenizer.json.
Result<Regex> MakePattern(const Json& pattern);

// Rewrites an Oniguruma pattern for PCRE2 (exposed for tests).
std::string TranslateOnigurumaPattern(std::string_view pattern);

}  // namespace ferry::tokenizer
