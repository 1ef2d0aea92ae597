// Structured outputs through the engine core on the demo decoder, a model that never writes
// JSON by itself: every constrained output parses and validates (checked by Python's
// jsonschema, independently of ferry), regexes and choices match, stop ids only end an
// output the grammar accepts, and constrained rows do not disturb the others in a batch.
#include <gtest/gtest.h>

#include <regex>

#include "sched/engine_core.h"
#include "structured/constraint.h"
#include "test_util.h"

namespace ferry::sched {
namespace {

class StructuredDecodingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto e = engine::Engine::Load(testing::SourcePath("models/demo/kjv-decoder"), engine::EngineOptions{2, true});
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = e.value();
    cache_ = new structured::GrammarCache(
        structured::Vocabulary::FromTokenizer(*engine_->tokenizer(), engine_->config().vocab_size));
  }
  static void TearDownTestSuite() {
    delete cache_;
    engine_.reset();
  }

  std::unique_ptr<EngineCore> MakeCore(int max_num_seqs) {
    EngineCoreOptions o;
    o.batching.max_num_seqs = max_num_seqs;
    o.batching.max_num_batched_tokens = 2048;
    o.batching.max_seq_len = 512;
    auto core = EngineCore::Create("kjv", engine_, o);
    EXPECT_TRUE(core.ok()) << core.status().ToString();
    return std::move(core).value();
  }

  GenerationRequest Request(const char* prompt, std::shared_ptr<structured::TokenMatcher> grammar, uint64_t seed,
                            float temperature = 0.9f, int max_tokens = 440) {
    GenerationRequest r;
    r.prompt = engine_->EncodePrompt(prompt).value();
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    r.max_tokens = max_tokens;
    r.stop_ids = engine_->StopIds();
    r.grammar = std::move(grammar);
    return r;
  }

  std::shared_ptr<structured::TokenMatcher> Compile(structured::ConstraintKind kind, std::string text,
                                                    std::vector<std::string> choices = {}) {
    auto m = cache_->Get(structured::Constraint{kind, std::move(text), std::move(choices)});
    EXPECT_TRUE(m.ok()) << m.status().message();
    return m.ok() ? m.value() : nullptr;
  }

  static std::vector<int32_t> Tokens(const GenerationEvent& ev) {
    std::vector<int32_t> out;
    for (const auto& t : ev.tokens) out.push_back(t.token);
    return out;
  }

  std::string Text(const GenerationEvent& ev) { return engine_->tokenizer()->Decode(Tokens(ev), true).value(); }

  static std::shared_ptr<engine::Engine> engine_;
  static structured::GrammarCache* cache_;
};

std::shared_ptr<engine::Engine> StructuredDecodingTest::engine_;
structured::GrammarCache* StructuredDecodingTest::cache_ = nullptr;

// 30 schemas, from one value to nested objects, arrays, references and alternatives. Free
// strings carry a maxLength: a model that never writes '"' would otherwise stay inside a
// string until max_tokens (as it would with any engine).
const char* const kSchemas[] = {
    R"({"type":"boolean"})",
    R"({"type":"integer","minimum":1,"maximum":12})",
    R"({"enum":["light","darkness","water","firmament"]})",
    R"({"type":"string","maxLength":12})",
    R"({"type":"number","minimum":-5,"maximum":5})",
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":10}},"required":["name"]})",
    R"({"type":"object","properties":{"book":{"enum":["Genesis","Exodus"]},"chapter":{"type":"integer","minimum":1,"maximum":50}},"required":["book","chapter"],"additionalProperties":false})",
    R"({"type":"object","properties":{"good":{"type":"boolean"},"day":{"type":"integer","minimum":1,"maximum":7}},"required":["day"]})",
    R"({"type":"array","items":{"type":"integer","minimum":0,"maximum":99},"minItems":1,"maxItems":4})",
    R"({"type":"object","properties":{"date":{"type":"string","format":"date"},"id":{"type":"string","format":"uuid"}},"required":["date","id"]})",
    R"({"type":"object","properties":{"verse":{"type":"string","pattern":"^[A-Z][a-z]{2,8} [0-9]{1,2}:[0-9]{1,2}$"}},"required":["verse"]})",
    R"({"type":"object","properties":{"a":{"type":["string","null"],"maxLength":6},"b":{"const":"fixed"}},"required":["a","b"]})",
    R"({"type":"object","properties":{"words":{"type":"array","items":{"type":"string","minLength":1,"maxLength":8},"maxItems":3}},"required":["words"]})",
    R"({"type":"object","properties":{"who":{"type":"object","properties":{"name":{"type":"string","maxLength":10},"age":{"type":"integer","minimum":0,"maximum":969}},"required":["name","age"]}},"required":["who"]})",
    R"({"type":"object","properties":{"score":{"type":"number","minimum":0,"maximum":1},"label":{"enum":["yes","no"]}},"required":["score","label"]})",
    R"({"anyOf":[{"type":"integer","minimum":0,"maximum":9},{"type":"string","maxLength":5}]})",
    R"({"type":"object","properties":{"kind":{"oneOf":[{"const":"psalm"},{"const":"proverb"}]},"n":{"type":"integer","minimum":1,"maximum":150}},"required":["kind","n"]})",
    R"({"type":"object","properties":{"when":{"type":"string","format":"date-time"},"mail":{"type":"string","format":"email"}},"required":["when","mail"]})",
    R"({"type":"array","items":{"type":"object","properties":{"x":{"type":"integer","minimum":-9,"maximum":9}},"required":["x"]},"minItems":2,"maxItems":3})",
    R"({"type":"object","properties":{"tribe":{"type":"object","properties":{"name":{"enum":["Judah","Levi","Dan"]},"sons":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":2}},"required":["name","sons"]}},"required":["tribe"]})",
    R"({"type":"object","properties":{"meta":{"type":"object","additionalProperties":{"type":"integer","minimum":0,"maximum":9}}},"required":["meta"]})",
    R"({"$defs":{"place":{"type":"object","properties":{"city":{"enum":["Jerusalem","Babylon"]}},"required":["city"]}},"type":"object","properties":{"from":{"$ref":"#/$defs/place"},"to":{"$ref":"#/$defs/place"}},"required":["from","to"]})",
    R"({"type":"object","properties":{"l1":{"type":"object","properties":{"l2":{"type":"object","properties":{"l3":{"type":"boolean"}},"required":["l3"]}},"required":["l2"]}},"required":["l1"]})",
    R"({"type":"object","properties":{"list":{"type":"array","items":{"type":"array","items":{"type":"integer","minimum":0,"maximum":5},"maxItems":2},"maxItems":2}},"required":["list"]})",
    R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer","minimum":0,"maximum":9},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"]}},"$ref":"#/$defs/node"})",
    R"({"type":"object","properties":{"p":{"type":"object","properties":{"q":{"type":"array","items":{"type":"object","properties":{"r":{"enum":[1,2,3]},"s":{"type":"string","maxLength":4}},"required":["r"]},"maxItems":2}},"required":["q"]},"t":{"type":"null"}},"required":["p","t"]})",
    R"({"type":"object","properties":{"a":{"type":"integer","minimum":0,"maximum":9},"b":{"type":"integer","minimum":0,"maximum":9},"c":{"type":"integer","minimum":0,"maximum":9},"d":{"type":"integer","minimum":0,"maximum":9},"e":{"type":"integer","minimum":0,"maximum":9},"f":{"type":"integer","minimum":0,"maximum":9}},"required":["a","c","e"]})",
    R"({"type":"object","properties":{"event":{"type":"object","properties":{"name":{"type":"string","maxLength":12},"day":{"type":"string","format":"date"},"people":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string","maxLength":8},"role":{"enum":["king","prophet","priest"]}},"required":["name","role"]},"minItems":1,"maxItems":2}},"required":["name","day","people"]}},"required":["event"]})",
    R"({"$defs":{"leaf":{"type":"object","properties":{"w":{"type":"string","maxLength":5}},"required":["w"]},"branch":{"type":"object","properties":{"kids":{"type":"array","items":{"anyOf":[{"$ref":"#/$defs/leaf"},{"$ref":"#/$defs/branch"}]},"maxItems":2}},"required":["kids"]}},"type":"object","properties":{"root":{"$ref":"#/$defs/branch"}},"required":["root"]})",
    R"({"type":"object","properties":{"l1":{"type":"object","properties":{"l2":{"type":"object","properties":{"l3":{"type":"object","properties":{"l4":{"type":"object","properties":{"l5":{"type":"array","items":{"type":"number","minimum":-1,"maximum":1},"maxItems":2}},"required":["l5"]}},"required":["l4"]}},"required":["l3"]}},"required":["l2"]}},"required":["l1"]})",
};

TEST_F(StructuredDecodingTest, ThirtySchemasValidateInOneBatch) {
  if (!testing::HaveJsonSchemaValidator()) GTEST_SKIP() << "python3 with jsonschema is not installed (scripts/install_deps.sh)";
  constexpr size_t kCount = sizeof(kSchemas) / sizeof(kSchemas[0]);
  static_assert(kCount == 30);
  auto core = MakeCore(static_cast<int>(kCount));
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < kCount; ++i) {
    requests.push_back(Request("And God said,", Compile(structured::ConstraintKind::kJsonSchema, kSchemas[i]), 100 + i));
  }
  auto r = GenerateAll(*core, std::move(requests));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<std::pair<std::string, std::string>> cases;
  for (size_t i = 0; i < kCount; ++i) {
    ASSERT_TRUE((*r)[i].error.ok()) << kSchemas[i] << ": " << (*r)[i].error.ToString();
    EXPECT_EQ((*r)[i].finish_reason, FinishReason::kStop) << kSchemas[i] << " -> " << Text((*r)[i]);
    cases.emplace_back(kSchemas[i], Text((*r)[i]));
  }
  const std::vector<std::string> verdicts = testing::ValidateJson(cases);
  for (size_t i = 0; i < kCount; ++i) {
    EXPECT_EQ(verdicts[i], "") << "schema " << cases[i].first << "\noutput " << cases[i].second;
  }
  EXPECT_GT(core->grammar_seconds(), 0.0);
  EXPECT_TRUE(core->empty());
  EXPECT_EQ(core->cache().num_free_blocks(), core->cache().num_blocks());
}

TEST_F(StructuredDecodingTest, RandomSeedsGreedyAndSampledAlwaysValidate) {
  if (!testing::HaveJsonSchemaValidator()) GTEST_SKIP() << "python3 with jsonschema is not installed";
  auto core = MakeCore(16);
  std::vector<GenerationRequest> requests;
  std::vector<std::pair<std::string, std::string>> cases;
  const int picks[] = {6, 13, 19, 24, 27, 28};
  for (int k = 0; k < 16; ++k) {
    const char* schema = kSchemas[picks[k % 6]];
    requests.push_back(Request("In the beginning", Compile(structured::ConstraintKind::kJsonSchema, schema),
                               0x5EED0000u + static_cast<uint64_t>(k) * 7919u, k % 4 == 0 ? 0.0f : 1.2f));
    cases.emplace_back(schema, "");
  }
  auto r = GenerateAll(*core, std::move(requests));
  ASSERT_TRUE(r.ok());
  for (size_t i = 0; i < cases.size(); ++i) cases[i].second = Text((*r)[i]);
  const std::vector<std::string> verdicts = testing::ValidateJson(cases);
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(verdicts[i], "") << cases[i].first << "\n" << cases[i].second;
}

TEST_F(StructuredDecodingTest, RegexesAndChoicesMatch) {
  auto core = MakeCore(8);
  const std::vector<std::string> patterns = {"(Genesis|Exodus|Psalms) [1-9][0-9]?:[1-9][0-9]?",
                                             "[A-Z][a-z]+( [a-z]+){2,4}\\.", "[0-9]{3}-[0-9]{4}",
                                             "(yea|nay)(, (yea|nay)){0,3}"};
  const std::vector<std::string> choices = {"light", "darkness", "the waters"};
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < patterns.size(); ++i) {
    requests.push_back(Request("And the LORD said", Compile(structured::ConstraintKind::kRegex, patterns[i]), 7 + i));
  }
  for (int k = 0; k < 4; ++k) {
    requests.push_back(Request("God divided the", Compile(structured::ConstraintKind::kChoice, "", choices), 50 + k));
  }
  auto r = GenerateAll(*core, std::move(requests));
  ASSERT_TRUE(r.ok());
  for (size_t i = 0; i < patterns.size(); ++i) {
    const std::string text = Text((*r)[i]);
    EXPECT_TRUE(std::regex_match(text, std::regex(patterns[i]))) << patterns[i] << " -> '" << text << "'";
  }
  for (size_t i = patterns.size(); i < r->size(); ++i) {
    const std::string text = Text((*r)[i]);
    EXPECT_NE(std::find(choices.begin(), choices.end(), text), choices.end()) << text;
    EXPECT_EQ((*r)[i].finish_reason, FinishReason::kStop);
  }
}

// An end-of-sequence id only where the grammar accepts: [0-9]{2,6} may end after 2..6
// digits, by EOS or by the grammar; never before two.
TEST_F(StructuredDecodingTest, StopIdsOnlyWhereTheGrammarAccepts) {
  auto core = MakeCore(16);
  std::vector<GenerationRequest> requests;
  auto grammar = Compile(structured::ConstraintKind::kRegex, "[0-9]{2,6}");
  for (int k = 0; k < 16; ++k) requests.push_back(Request("And", grammar, 900 + k, 1.5f));
  // EOS made likely: without the grammar the model would end at once.
  for (auto& r : requests) r.sampling.logit_bias.push_back({engine_->StopIds()[0], 30.0f});
  auto r = GenerateAll(*core, std::move(requests));
  ASSERT_TRUE(r.ok());
  int ended_by_eos = 0;
  for (const GenerationEvent& ev : *r) {
    const std::string text = Text(ev);
    EXPECT_TRUE(std::regex_match(text, std::regex("[0-9]{2,6}"))) << text;
    EXPECT_EQ(ev.finish_reason, FinishReason::kStop);
    ended_by_eos += Tokens(ev).back() == engine_->StopIds()[0];
  }
  EXPECT_GT(ended_by_eos, 0);
}

// Per-row masks: unconstrained requests batched with constrained ones draw exactly what they
// draw alone.
TEST_F(StructuredDecodingTest, ConstrainedRowsDoNotDisturbOthers) {
  auto alone_core = MakeCore(4);
  auto alone = GenerateAll(*alone_core, {Request("Blessed are the meek", nullptr, 11, 0.8f, 24),
                                         Request("Praise ye the LORD", nullptr, 12, 0.0f, 24)});
  ASSERT_TRUE(alone.ok());
  auto core = MakeCore(4);
  auto mixed = GenerateAll(
      *core, {Request("Blessed are the meek", nullptr, 11, 0.8f, 24),
              Request("And God said,", Compile(structured::ConstraintKind::kJsonSchema, kSchemas[13]), 3),
              Request("Praise ye the LORD", nullptr, 12, 0.0f, 24),
              Request("And", Compile(structured::ConstraintKind::kRegex, "[a-z ]{5,40}"), 4)});
  ASSERT_TRUE(mixed.ok());
  EXPECT_EQ(Tokens((*mixed)[0]), Tokens((*alone)[0]));
  EXPECT_EQ(Tokens((*mixed)[2]), Tokens((*alone)[1]));
}

// A complete output that the grammar would let go on, but that no token of the vocabulary
// continues, ends at its last token: at once when that state's mask is known, and one step
// later, without the extra step's token, when the mask is first found then (masks are
// walked while the next forward pass runs, not on the critical path). Both give the same
// output. The vocabulary spells only "a"; the grammar is a then optionally c.
TEST_F(StructuredDecodingTest, CompleteOutputThatNoTokenContinuesEndsAtItsLastToken) {
  const int vocab = engine_->config().vocab_size;
  std::vector<std::string> bytes(static_cast<size_t>(vocab));
  std::vector<char> usable(static_cast<size_t>(vocab), 0);
  bytes[10] = "a";
  usable[10] = 1;
  structured::GrammarCache cache(std::make_shared<const structured::Vocabulary>(bytes, usable));
  auto grammar = cache.Get(structured::Constraint{structured::ConstraintKind::kRegex, "ac?", {}});
  ASSERT_TRUE(grammar.ok()) << grammar.status().ToString();
  for (int round = 0; round < 2; ++round) {  // the second finds the mask known
    auto core = MakeCore(2);
    GenerationRequest r = Request("And", *grammar, 5, 0.0f, 8);
    r.stop_ids.clear();  // nothing but the grammar can end it
    auto out = GenerateAll(*core, {std::move(r)});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_TRUE((*out)[0].error.ok()) << (*out)[0].error.ToString();
    EXPECT_EQ(Tokens((*out)[0]), std::vector<int32_t>{10}) << "round " << round;
    EXPECT_EQ((*out)[0].finish_reason, FinishReason::kStop);
    EXPECT_EQ((*out)[0].generated_tokens_count, 1);
  }
}

TEST_F(StructuredDecodingTest, GrammarOfAnotherVocabularyIsRefused) {
  auto core = MakeCore(1);
  std::vector<std::string> bytes = {"a", "b"};
  auto small = std::make_shared<const structured::Vocabulary>(bytes, std::vector<char>{1, 1});
  structured::GrammarBuilder b;
  auto g = b.Build(b.Choice("r", {b.Literal("a")}));
  GenerationRequest r = Request("And", std::make_shared<structured::TokenMatcher>(std::move(g).value(), small), 1);
  const Status s = core->Validate(r);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("vocabulary"), std::string::npos);
}

}  // namespace
}  // namespace ferry::sched
