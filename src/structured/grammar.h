// The grammar every structured-output constraint compiles to: a context-free grammar over
// bytes. A rule is a list of alternatives; an alternative is a sequence of elements, each a
// set of bytes (one byte of output) or a reference to a rule. Regexes, choices, JSON
// schemas and the EBNF language (structured/ebnf.h) are all built with GrammarBuilder; the
// token matcher (structured/matcher.h) runs the result as a pushdown automaton.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace ferry::structured {

using ByteSet = std::bitset<256>;

struct Element {
  enum Kind : uint8_t { kBytes, kRule, kEnd };
  Kind kind = kEnd;
  int32_t value = 0;  // kBytes: index into Grammar::byte_sets; kRule: the rule's id
};

// Immutable, flat: every alternative is a run of `elements` ending in a kEnd element.
struct Grammar {
  std::vector<Element> elements;
  std::vector<std::vector<int32_t>> alternatives;  // per rule: where each alternative starts
  std::vector<ByteSet> byte_sets;
  std::vector<std::string> rule_names;
  int32_t root = 0;

  // A stable digest of the structure (the compile cache's key includes it).
  uint64_t Hash() const;
};

using Sequence = std::vector<Element>;

// Thread-compatible. Rules are made first (so that they can refer to each other, also
// recursively) and given alternatives later.
class GrammarBuilder {
 public:
  // A new rule without alternatives; `name` is for error messages (made unique).
  int32_t AddRule(std::string_view name);
  void AddAlternative(int32_t rule, Sequence seq);
  int32_t num_rules() const { return static_cast<int32_t>(alternatives_.size()); }
  const std::string& rule_name(int32_t rule) const { return names_[rule]; }

  Element Bytes(const ByteSet& set);
  Element Byte(uint8_t b);
  static Element Ref(int32_t rule) { return Element{Element::kRule, rule}; }
  // The bytes of `text`, one element each.
  Sequence Literal(std::string_view text);

  // New rules for the usual operators (each returns the rule's id).
  int32_t Choice(std::string_view name, std::vector<Sequence> alternatives);
  int32_t Optional(std::string_view name, Sequence seq);
  int32_t Star(std::string_view name, Sequence seq);
  int32_t Plus(std::string_view name, Sequence seq);
  // seq repeated min..max times (max < 0: no upper bound). Bounds above kMaxRepeat are refused.
  Result<int32_t> Repeat(std::string_view name, const Sequence& seq, int64_t min, int64_t max);

  // Checks that every referenced rule has alternatives and that no rule is left-recursive
  // (the matcher expands leftmost references eagerly), and flattens.
  Result<Grammar> Build(int32_t root) const;

  static constexpr int64_t kMaxRepeat = 10000;
  // Elements in all alternatives together: a constraint that would need more is refused
  // (repetitions of repetitions multiply).
  static constexpr size_t kMaxElements = 2'000'000;
  size_t num_elements() const { return elements_; }

 private:
  size_t elements_ = 0;
  std::vector<std::vector<Sequence>> alternatives_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, int> name_counts_;
  std::vector<ByteSet> byte_sets_;
  std::unordered_map<std::string, int32_t> byte_set_index_;
};

// Byte sets of UTF-8: any character, and any character except the given ASCII bytes
// (a rule of alternatives, added to `b`).
int32_t AnyUtf8Char(GrammarBuilder& b, const ByteSet& excluded_ascii, std::string_view name);

}  // namespace ferry::structured
