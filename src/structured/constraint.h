// A request's output constraint as the APIs give it, compiled to a TokenMatcher through a
// cache keyed by the constraint's hash and the vocabulary's.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "structured/grammar.h"
#include "structured/matcher.h"

namespace ferry::structured {

enum class ConstraintKind { kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar };
const char* ConstraintKindName(ConstraintKind kind);  // "json_schema", "json_object", ...

struct Constraint {
  Constraint() = default;
  Constraint(ConstraintKind k, std::string t, std::vector<std::string> c = {})
      : kind(k), text(std::move(t)), choices(std::move(c)) {}

  ConstraintKind kind = ConstraintKind::kJsonObject;
  std::string text;                  // the schema (JSON text), the regex or the grammar
  std::vector<std::string> choices;  // kChoice: the output is exactly one of them
  bool any_whitespace = true;        // JSON: whitespace allowed between tokens (bounded)
  int max_values = 1;                // kJsonSchema: up to this many values, `separator` between
  std::string separator;

  std::string Key() const;  // everything that makes the grammar, as one string
};

// Constraint → grammar (no cache). InvalidArgument naming what is wrong or unsupported.
Result<Grammar> CompileConstraint(const Constraint& constraint);

// Thread-safe. Keeps the most recently used `capacity` matchers; a matcher keeps the states
// and masks it has found, so a cached constraint also skips the mask walks.
class GrammarCache {
 public:
  GrammarCache(std::shared_ptr<const Vocabulary> vocab, size_t capacity = 64);

  // The matcher for `constraint`, compiled on a miss (on the caller's thread), with the
  // mask of its initial state computed.
  Result<std::shared_ptr<TokenMatcher>> Get(const Constraint& constraint);

  const std::shared_ptr<const Vocabulary>& vocab() const { return vocab_; }
  uint64_t hits() const;
  uint64_t misses() const;

 private:
  const std::shared_ptr<const Vocabulary> vocab_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<TokenMatcher>>> lru_;  // most recent first
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace ferry::structured
