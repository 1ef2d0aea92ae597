// Structured-output constraints from untrusted text: the first byte picks the kind (JSON
// schema, regex, grammar, choice list), the rest is the constraint. Compiling either
// succeeds or refuses with a message; a compiled constraint's matcher finds its first
// mask, walks the output the input's tail spells where the grammar allows it, and every
// state's mask agrees with advancing each token.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "structured/constraint.h"

namespace {

using ferry::structured::Constraint;
using ferry::structured::ConstraintKind;
using ferry::structured::TokenMatcher;
using ferry::structured::Vocabulary;

std::shared_ptr<const Vocabulary> Vocab() {
  static const std::shared_ptr<const Vocabulary> v = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
    for (const char* t : {"{\"", "\":", ", \"", "\"}", "true", "null", "12", "ab", "\n  "}) tokens.push_back(t);
    return std::make_shared<const Vocabulary>(tokens, std::vector<char>(tokens.size(), 1));
  }();
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 4096) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  // The constraint is the input up to the first NUL; what follows is output to walk.
  const size_t cut = in.find('\0');
  const std::string text(in.substr(0, cut));
  const std::string walk(cut == std::string_view::npos ? std::string_view() : in.substr(cut + 1));
  Constraint c;
  switch (data[0] % 4) {
    case 0: c = Constraint(ConstraintKind::kJsonSchema, text); break;
    case 1: c = Constraint(ConstraintKind::kRegex, text); break;
    case 2: c = Constraint(ConstraintKind::kGrammar, text); break;
    default: {
      std::vector<std::string> choices;
      size_t start = 0;
      for (size_t i = 0; i <= text.size(); ++i) {
        if (i == text.size() || text[i] == '|') {
          choices.push_back(text.substr(start, i - start));
          start = i + 1;
        }
      }
      c = Constraint(ConstraintKind::kChoice, "", choices);
    }
  }
  c.any_whitespace = (data[0] & 4) == 0;
  auto grammar = ferry::structured::CompileConstraint(c);
  if (!grammar.ok()) {
    FUZZ_CHECK(!grammar.status().message().empty());
    return 0;
  }
  TokenMatcher m(std::move(grammar).value(), Vocab());
  TokenMatcher::State s = m.initial();
  for (size_t i = 0; i <= walk.size() && i < 64; ++i) {
    if (s == TokenMatcher::kDead || s == TokenMatcher::kTooLarge) break;
    auto mask = m.Mask(s);
    for (int32_t id = 0; id < Vocab()->size(); ++id) {
      const bool allowed = (mask->words[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1;
      const TokenMatcher::State next = m.Advance(s, id);
      if (next != TokenMatcher::kTooLarge) FUZZ_CHECK(allowed == (next != TokenMatcher::kDead));
    }
    if (i == walk.size()) break;
    const int32_t token = static_cast<uint8_t>(walk[i]);
    if ((mask->words[static_cast<size_t>(token) >> 6] >> (token & 63)) & 1) s = m.Advance(s, token);
  }
  return 0;
}
