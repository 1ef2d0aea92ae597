#include "structured/matcher.h"

#include <gtest/gtest.h>

#include <deque>
#include <nlohmann/json.hpp>
#include <random>
#include <unordered_set>

#include "structured/constraint.h"
#include "structured/json_schema.h"
#include "structured/structured_test_util.h"

namespace ferry::structured {
namespace {

using json = nlohmann::ordered_json;

bool Allowed(const TokenMask& m, int32_t id) { return (m.words[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1; }

// The trie walk must agree with advancing every token on its own.
TEST(TokenMatcher, MaskEqualsTokenByTokenAdvance) {
  auto g = JsonSchemaToGrammar(json::parse(R"({"type":"object","properties":{"name":{"type":"string","maxLength":5},
      "id":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","b"]}}},"required":["name"]})"),
                               JsonGrammarOptions{});
  ASSERT_TRUE(g.ok());
  auto vocab = testing::MixedVocab();
  TokenMatcher m(std::move(g).value(), vocab);
  std::mt19937 rng(7);
  TokenMatcher::State s = m.initial();
  for (int step = 0; step < 60; ++step) {
    auto mask = m.Mask(s);
    int64_t count = 0;
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab->size(); ++id) {
      const bool expect = m.Advance(s, id) != TokenMatcher::kDead;
      ASSERT_EQ(Allowed(*mask, id), expect) << "state " << s << " token " << id;
      if (expect) allowed.push_back(id);
      count += expect;
    }
    EXPECT_EQ(mask->allowed, count);
    if (allowed.empty()) {
      EXPECT_TRUE(mask->finished);
      break;
    }
    s = m.Advance(s, allowed[rng() % allowed.size()]);
  }
}

TEST(TokenMatcher, UnusableTokensNeverAllowedAndFinishedStates) {
  GrammarBuilder b;
  auto g = b.Build(b.Choice("yes_no", {b.Literal("yes"), b.Literal("no")}));
  ASSERT_TRUE(g.ok());
  auto vocab = testing::MixedVocab();
  TokenMatcher m(std::move(g).value(), vocab);
  auto first = m.Mask(m.initial());
  EXPECT_FALSE(first->accepting);
  EXPECT_FALSE(Allowed(*first, vocab->size() - 1));  // the empty special token
  EXPECT_EQ(first->allowed, 2);                       // 'y' and 'n'
  const TokenMatcher::State done = m.AdvanceBytes(m.initial(), "no");
  auto last = m.Mask(done);
  EXPECT_TRUE(last->accepting);
  EXPECT_TRUE(last->finished);
  EXPECT_EQ(last->allowed, 0);
  EXPECT_EQ(m.AdvanceBytes(m.initial(), "nope"), TokenMatcher::kDead);
  EXPECT_EQ(m.Advance(m.initial(), -1), TokenMatcher::kDead);
}

TEST(TokenMatcher, StatesAndMasksAreShared) {
  GrammarBuilder b;
  auto g = b.Build(b.Star("as", b.Literal("a")));
  ASSERT_TRUE(g.ok());
  TokenMatcher m(std::move(g).value(), testing::ByteVocab());
  TokenMatcher::State s = m.initial();
  for (int i = 0; i < 1000; ++i) s = m.AdvanceBytes(s, "a");
  m.Mask(s);
  EXPECT_LE(m.num_states(), 3u);  // a repetition does not grow the parse stack
  EXPECT_LE(m.num_masks(), 2u);
}

// A random schema of the supported keywords, at most `depth` levels deep.
json RandomSchema(std::mt19937& rng, int depth) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const int kind = depth <= 0 ? pick(9) : pick(13);
  switch (kind) {
    case 0: return {{"type", "string"}, {"maxLength", pick(6)}};
    case 1: return {{"type", "integer"}, {"minimum", -pick(50)}, {"maximum", pick(500)}};
    case 2: return {{"type", "number"}, {"minimum", -pick(5)}, {"maximum", 1 + pick(5)}};
    case 3: return {{"type", "boolean"}};
    case 4: return {{"enum", {"alpha", "beta", 7, nullptr}}};
    case 5: return {{"type", "string"}, {"pattern", "^[a-c]{1,3}(-[0-9]{2})?$"}};
    case 6: return {{"type", "string"}, {"format", pick(2) ? "date" : "uuid"}};
    case 7: return {{"const", "fixed"}};
    case 8: return {{"type", {"integer", "null"}}, {"maximum", 9}, {"minimum", 0}};
    case 9:
    case 10: {
      json props = json::object();
      json required = json::array();
      const int n = 1 + pick(4);
      for (int i = 0; i < n; ++i) {
        const std::string key = "k" + std::to_string(i);
        props[key] = RandomSchema(rng, depth - 1);
        if (pick(2)) required.push_back(key);
      }
      return {{"type", "object"}, {"properties", props}, {"required", required}, {"additionalProperties", false}};
    }
    case 11: {
      const int lo = pick(2);
      return {{"type", "array"}, {"items", RandomSchema(rng, depth - 1)}, {"minItems", lo}, {"maxItems", lo + pick(3)}};
    }
    default: return {{"anyOf", {RandomSchema(rng, depth - 1), RandomSchema(rng, depth - 1)}}};
  }
}

// The shortest byte string from `s` to an accepting state.
std::string ShortestCompletion(TokenMatcher& m, TokenMatcher::State s) {
  std::deque<std::pair<TokenMatcher::State, std::string>> queue{{s, ""}};
  std::unordered_set<TokenMatcher::State> seen{s};
  while (!queue.empty()) {
    auto [state, text] = queue.front();
    queue.pop_front();
    if (m.Accepting(state)) return text;
    for (int byte = 0; byte < 128; ++byte) {
      const TokenMatcher::State next = m.AdvanceBytes(state, std::string(1, static_cast<char>(byte)));
      if (next == TokenMatcher::kDead || !seen.insert(next).second) continue;
      queue.emplace_back(next, text + static_cast<char>(byte));
    }
  }
  return "<no completion>";
}

// Property: random schemas, random walks through the allowed tokens with random seeds; every
// completed output is valid JSON that an independent validator accepts.
TEST(TokenMatcher, RandomSchemasRandomWalksAlwaysValidate) {
  if (!ferry::testing::HaveJsonSchemaValidator()) GTEST_SKIP() << "python3 with jsonschema is not installed (scripts/install_deps.sh)";
  auto vocab = testing::MixedVocab();
  std::vector<std::pair<std::string, std::string>> cases;
  for (uint32_t seed = 1; seed <= 120; ++seed) {
    std::mt19937 rng(seed);
    const json schema = RandomSchema(rng, 3);
    auto g = JsonSchemaToGrammar(schema, JsonGrammarOptions{seed % 3 != 0});
    ASSERT_TRUE(g.ok()) << schema.dump() << ": " << g.status().message();
    TokenMatcher m(std::move(g).value(), vocab);
    TokenMatcher::State s = m.initial();
    std::string out;
    for (int step = 0; step < 80; ++step) {
      auto mask = m.Mask(s);
      if (mask->finished || (mask->accepting && rng() % 4 == 0)) break;
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->size(); ++id) {
        if (Allowed(*mask, id)) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty()) << schema.dump() << " after " << out;
      const int32_t t = allowed[rng() % allowed.size()];
      out += vocab->bytes(t);
      s = m.Advance(s, t);
      ASSERT_NE(s, TokenMatcher::kDead);
    }
    out += ShortestCompletion(m, s);
    cases.emplace_back(schema.dump(), out);
  }
  const std::vector<std::string> verdicts = ferry::testing::ValidateJson(cases);
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(verdicts[i], "") << "schema " << cases[i].first << "\noutput " << cases[i].second;
  }
}

}  // namespace
}  // namespace ferry::structured
