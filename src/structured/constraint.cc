#include "structured/constraint.h"

#include <nlohmann/json.hpp>

#include "core/json_limits.h"
#include "structured/ebnf.h"
#include "structured/json_schema.h"
#include "structured/regex.h"

namespace ferry::structured {

const char* ConstraintKindName(ConstraintKind kind) {
  switch (kind) {
    case ConstraintKind::kJsonSchema: return "json_schema";
    case ConstraintKind::kJsonObject: return "json_object";
    case ConstraintKind::kRegex: return "regex";
    case ConstraintKind::kChoice: return "choice";
    case ConstraintKind::kGrammar: return "grammar";
  }
  return "?";
}

std::string Constraint::Key() const {
  std::string key = ConstraintKindName(kind);
  key += any_whitespace ? ":ws:" : ":nows:";
  key += std::to_string(text.size()) + ":" + text;
  for (const std::string& c : choices) key += ":" + std::to_string(c.size()) + ":" + c;
  if (max_values > 1) key += ":values:" + std::to_string(max_values) + ":" + separator;
  return key;
}

Result<Grammar> CompileConstraint(const Constraint& c) {
  JsonGrammarOptions json_options;
  json_options.any_whitespace = c.any_whitespace;
  json_options.max_values = c.max_values;
  json_options.separator = c.separator;
  switch (c.kind) {
    case ConstraintKind::kJsonObject: return JsonObjectGrammar(json_options);
    case ConstraintKind::kJsonSchema: {
      FERRY_RETURN_IF_ERROR(ParseUntrustedJson(c.text).status());  // bounds the nesting first
      nlohmann::ordered_json schema;
      try {
        schema = nlohmann::ordered_json::parse(c.text);
      } catch (const std::exception& e) {
        return InvalidArgument(std::string("JSON schema: ") + e.what());
      }
      return JsonSchemaToGrammar(schema, json_options);
    }
    case ConstraintKind::kRegex: {
      GrammarBuilder b;
      FERRY_ASSIGN_OR_RETURN(int32_t root, AddRegex(b, c.text, RegexOptions{}));
      return b.Build(root);
    }
    case ConstraintKind::kChoice: {
      if (c.choices.empty()) return InvalidArgument("choice needs at least one string");
      GrammarBuilder b;
      std::vector<Sequence> alts;
      for (const std::string& s : c.choices) alts.push_back(b.Literal(s));
      return b.Build(b.Choice("choice", std::move(alts)));
    }
    case ConstraintKind::kGrammar: return ParseEbnf(c.text);
  }
  return InvalidArgument("unknown constraint");
}

GrammarCache::GrammarCache(std::shared_ptr<const Vocabulary> vocab, size_t capacity)
    : vocab_(std::move(vocab)), capacity_(std::max<size_t>(1, capacity)) {}

Result<std::shared_ptr<TokenMatcher>> GrammarCache::Get(const Constraint& constraint) {
  const std::string key = constraint.Key();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      return it->second->second;
    }
    ++misses_;
  }
  // Compiled outside the lock: two requests with a new constraint may both compile it.
  FERRY_ASSIGN_OR_RETURN(Grammar grammar, CompileConstraint(constraint));
  auto matcher = std::make_shared<TokenMatcher>(std::move(grammar), vocab_);
  if (matcher->initial() == TokenMatcher::kDead) return InvalidArgument("the constraint matches no output");
  matcher->Mask(matcher->initial());
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second->second;
  lru_.emplace_front(key, matcher);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return matcher;
}

uint64_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

uint64_t GrammarCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

}  // namespace ferry::structured
