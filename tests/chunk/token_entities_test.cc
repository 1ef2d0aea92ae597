#include "chunk/token_entities.h"

#include <gtest/gtest.h>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ferry::chunk {
namespace {

const std::vector<std::string> kLabels = {"O", "B-PER", "I-PER", "B-LOC", "I-LOC"};

// "Sarah lives in Newyork" as a WordPiece model would cut it.
struct Example {
  std::string text = "Sarah lives in Newyork";
  std::vector<std::string> tokens = {"sa", "##rah", "lives", "in", "new", "##york"};
  std::vector<std::pair<uint32_t, uint32_t>> offsets = {{0, 2}, {2, 5}, {6, 11}, {12, 14}, {15, 18}, {18, 22}};
  std::vector<std::vector<float>> probs = {
      {0.025f, 0.9f, 0.025f, 0.025f, 0.025f},  // sa: B-PER
      {0.3f, 0.05f, 0.6f, 0.025f, 0.025f},     // ##rah: I-PER
      {0.95f, 0.0125f, 0.0125f, 0.0125f, 0.0125f},
      {0.9f, 0.025f, 0.025f, 0.025f, 0.025f},
      {0.05f, 0.025f, 0.025f, 0.7f, 0.2f},  // new: B-LOC
      {0.05f, 0.4f, 0.025f, 0.025f, 0.5f},  // ##york: I-LOC
  };

  EntityOptions Options(TokenAggregation a) const {
    EntityOptions o;
    o.labels = kLabels;
    o.aggregation = a;
    o.token_string = [this](int32_t id) { return tokens[static_cast<size_t>(id)]; };
    o.tokens_to_string = [](const std::vector<std::string>& t) {  // WordPiece's decoder
      std::string out;
      for (const std::string& s : t) {
        if (s.rfind("##", 0) == 0) {
          out += s.substr(2);
        } else {
          out += (out.empty() ? "" : " ") + s;
        }
      }
      return out;
    };
    return o;
  }
  std::vector<TokenScores> Tokens() const {
    std::vector<TokenScores> t;
    for (size_t i = 0; i < tokens.size(); ++i) {
      t.push_back({static_cast<int32_t>(i), static_cast<int>(i) + 1, offsets[i].first, offsets[i].second,
                   probs[i].data()});
    }
    return t;
  }
};

void ExpectEntity(const Entity& e, const std::string& label, double score, uint32_t start, uint32_t end,
                  const std::string& word) {
  EXPECT_EQ(e.label, label);
  EXPECT_NEAR(e.score, score, 1e-6) << label;
  EXPECT_EQ(e.start, start) << label;
  EXPECT_EQ(e.end, end) << label;
  EXPECT_EQ(e.word, word) << label;
}

TEST(AggregateTokensTest, TheFivePipelineStrategies) {
  const Example x;
  const CharText text(x.text);
  {
    const auto e = AggregateTokens(x.Options(TokenAggregation::kNone), text, x.Tokens());
    ASSERT_EQ(e.size(), 4u);  // the O tokens are ignored
    ExpectEntity(e[0], "B-PER", 0.9, 0, 2, "sa");
    EXPECT_EQ(e[0].index, 1);
    ExpectEntity(e[1], "I-PER", 0.6, 2, 5, "##rah");
    ExpectEntity(e[3], "I-LOC", 0.5, 18, 22, "##york");
    EXPECT_EQ(e[3].index, 6);
  }
  {
    const auto e = AggregateTokens(x.Options(TokenAggregation::kSimple), text, x.Tokens());
    ASSERT_EQ(e.size(), 2u);
    ExpectEntity(e[0], "PER", (0.9 + 0.6) / 2, 0, 5, "sarah");
    ExpectEntity(e[1], "LOC", (0.7 + 0.5) / 2, 15, 22, "newyork");
    EXPECT_EQ(e[0].index, -1);
  }
  {
    const auto e = AggregateTokens(x.Options(TokenAggregation::kFirst), text, x.Tokens());
    ASSERT_EQ(e.size(), 2u);
    ExpectEntity(e[0], "PER", 0.9, 0, 5, "sarah");
    ExpectEntity(e[1], "LOC", 0.7, 15, 22, "newyork");
  }
  {
    const auto e = AggregateTokens(x.Options(TokenAggregation::kAverage), text, x.Tokens());
    ASSERT_EQ(e.size(), 2u);
    ExpectEntity(e[0], "PER", (0.9 + 0.05) / 2, 0, 5, "sarah");          // B-PER wins the average
    ExpectEntity(e[1], "LOC", (0.7 + 0.025) / 2, 15, 22, "newyork");     // B-LOC 0.3625 > I-LOC 0.35
  }
  {
    const auto e = AggregateTokens(x.Options(TokenAggregation::kMax), text, x.Tokens());
    ASSERT_EQ(e.size(), 2u);
    ExpectEntity(e[0], "PER", 0.9, 0, 5, "sarah");
    ExpectEntity(e[1], "LOC", 0.7, 15, 22, "newyork");
  }
}

TEST(AggregateTokensTest, BTagsStartNewGroupsAndUnknownTokensAreWholeWords) {
  Example x;
  x.probs[1] = {0.05f, 0.8f, 0.1f, 0.025f, 0.025f};  // ##rah now B-PER: a second PER entity
  EntityOptions o = x.Options(TokenAggregation::kSimple);
  const auto e = AggregateTokens(o, CharText(x.text), x.Tokens());
  ASSERT_EQ(e.size(), 3u);
  ExpectEntity(e[0], "PER", 0.9, 0, 2, "sa");
  ExpectEntity(e[1], "PER", 0.8, 2, 5, "rah");  // the decoder joins a lone ## token too
  // The unknown token takes its text from the input and starts a word.
  o.unk_id = 5;
  o.aggregation = TokenAggregation::kNone;
  const auto u = AggregateTokens(o, CharText(x.text), x.Tokens());
  EXPECT_EQ(u.back().word, "york");  // offsets 18..22 of the text, not "##york"
}

TEST(AggregateTokensTest, WithoutSubwordMarksASpaceDecidesWhereWordsStart) {
  // Byte-level style tokens: "Sar" "ah" " lives": word-aware off, so "ah" (no space before
  // it) continues "Sar" and " lives" starts a word.
  const std::string text = "Sarah lives";
  const std::vector<std::string> tokens = {"Sar", "ah", "\xC4\xA0lives"};
  const std::vector<std::vector<float>> probs = {{0.1f, 0.8f, 0.1f}, {0.6f, 0.1f, 0.3f}, {0.2f, 0.7f, 0.1f}};
  EntityOptions o;
  o.labels = {"O", "B-PER", "I-PER"};
  o.aggregation = TokenAggregation::kFirst;
  o.word_aware = false;
  o.token_string = [&](int32_t id) { return tokens[static_cast<size_t>(id)]; };
  o.tokens_to_string = [](const std::vector<std::string>& t) {
    std::string s;
    for (const auto& x : t) s += x;
    return s;
  };
  const std::vector<TokenScores> t = {{0, 1, 0, 3, probs[0].data()}, {1, 2, 3, 5, probs[1].data()},
                                      {2, 3, 5, 11, probs[2].data()}};
  const auto e = AggregateTokens(o, CharText(text), t);
  ASSERT_EQ(e.size(), 2u);  // "Sarah" (first token: B-PER), " lives" (B-PER)
  EXPECT_EQ(e[0].start, 0u);
  EXPECT_EQ(e[0].end, 5u);
  EXPECT_EQ(e[1].start, 5u);
}

Entity E(uint32_t start, uint32_t end, double score, std::string label = "X") {
  Entity e;
  e.label = std::move(label);
  e.start = start;
  e.end = end;
  e.score = score;
  return e;
}

TEST(OverlapTest, TransformersRulePrefersLongerThenHigher) {
  const auto r = ResolveOverlapsHf({E(0, 5, 0.5), E(3, 10, 0.4), E(12, 15, 0.9), E(12, 15, 0.95), E(20, 22, 0.3)});
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].start, 3u);
  EXPECT_EQ(r[1].score, 0.95);
  EXPECT_EQ(r[2].start, 20u);
}

TEST(OverlapTest, NonMaximumSuppressionKeepsTheHigherScore) {
  const auto r = SuppressOverlaps({E(0, 5, 0.5), E(3, 10, 0.4), E(12, 15, 0.9), E(12, 15, 0.95), E(20, 22, 0.3),
                                   E(9, 12, 0.1)});
  // (0, 5) beats (3, 10); (12, 15) at 0.95 beats its twin; (9, 12) overlaps nothing kept,
  // since (3, 10) was dropped and (12, 15) starts where it ends.
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].start, 0u);
  EXPECT_EQ(r[1].start, 9u);
  EXPECT_EQ(r[2].score, 0.95);
  EXPECT_EQ(r[3].start, 20u);
}

TEST(CharTextTest, ByteOffsetsBecomeCodePoints) {
  const CharText t("F\xC3\xBChrer \xF0\x9F\x98\x80!");  // "Führer 😀!"
  EXPECT_EQ(t.size(), 9u);
  EXPECT_EQ(t.FromBytes(0, 3), (std::pair<uint32_t, uint32_t>{0, 2}));   // "Fü"
  EXPECT_EQ(t.FromBytes(1, 2), (std::pair<uint32_t, uint32_t>{1, 2}));   // half of ü is all of it
  EXPECT_EQ(t.FromBytes(9, 10), (std::pair<uint32_t, uint32_t>{7, 8}));  // one byte of the emoji
  EXPECT_EQ(t.Slice(1, 2), "\xC3\xBC");
  EXPECT_EQ(t.At(7), U'\U0001F600');
}

// Two windows that disagree around their boundary: tokens 0..9, windows [0,6) and [4,10).
struct TwoWindows {
  std::string text = "a b c d Bo Bi e f g h";
  std::vector<int32_t> ids = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<std::pair<uint32_t, uint32_t>> offsets = {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 10},
                                                        {11, 13}, {14, 15}, {16, 17}, {18, 19}, {20, 21}};
  std::vector<WindowScores> windows;
  TwoWindows() {
    const std::vector<float> o = {0.9f, 0.05f, 0.05f, 0.0f, 0.0f};
    const std::vector<float> b = {0.1f, 0.8f, 0.1f, 0.0f, 0.0f};
    const std::vector<float> i = {0.1f, 0.1f, 0.8f, 0.0f, 0.0f};
    WindowScores w0{{0, 6}, 1, {}};
    for (const auto* row : {&o, &o, &o, &o, &b, &i}) w0.probs.insert(w0.probs.end(), row->begin(), row->end());
    // The second window misses the start of the name (token 4 as O) and sees token 5 as I-PER.
    WindowScores w1{{4, 10}, 1, {}};
    for (const auto* row : {&o, &i, &o, &o, &o, &o}) w1.probs.insert(w1.probs.end(), row->begin(), row->end());
    windows = {w0, w1};
  }
  EntityOptions Options() const {
    EntityOptions opt;
    opt.labels = kLabels;
    opt.aggregation = TokenAggregation::kSimple;
    opt.token_string = [](int32_t id) { return std::string(id == 4 ? "bo" : id == 5 ? "bi" : "x"); };
    opt.tokens_to_string = [](const std::vector<std::string>& t) {
      std::string s;
      for (const auto& x : t) s += (s.empty() ? "" : " ") + x;
      return s;
    };
    return opt;
  }
};

TEST(DocumentEntitiesTest, CenterMergeJoinsAnEntityAcrossTheWindowBoundary) {
  const TwoWindows d;
  const CharText text(d.text);
  // Token 4 belongs to window 0 (B-PER there), token 5 to window 1 (I-PER): one PER entity.
  const auto center = DocumentEntities(d.Options(), text, d.ids, d.offsets, d.windows, TokenMerge::kCenter);
  ASSERT_EQ(center.size(), 1u);
  ExpectEntity(center[0], "PER", 0.8, 8, 13, "bo bi");
  // transformers' rule: window 0 finds "bo bi", window 1 finds "bi"; the longer one stays.
  const auto hf = DocumentEntities(d.Options(), text, d.ids, d.offsets, d.windows, TokenMerge::kHf);
  ASSERT_EQ(hf.size(), 1u);
  ExpectEntity(hf[0], "PER", 0.8, 8, 13, "bo bi");
  // aggregation none with the center merge reports document-wide indices.
  EntityOptions none = d.Options();
  none.aggregation = TokenAggregation::kNone;
  const auto tokens = DocumentEntities(none, text, d.ids, d.offsets, d.windows, TokenMerge::kCenter);
  ASSERT_EQ(tokens.size(), 2u);
  EXPECT_EQ(tokens[0].label, "B-PER");
  EXPECT_EQ(tokens[0].index, 5);  // content position 4 after [CLS]
  EXPECT_EQ(tokens[1].index, 6);
}

TEST(DocumentEntitiesTest, EntitiesUseTheRealTokenizersWordsAndOffsets) {
  auto tok = tokenizer::LoadTokenizer(testing::FixturePath("tokenizers/bert"));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::string text = "Jerusalem is near Bethlehem";
  std::vector<tokenizer::TokenOffset> offsets;
  auto ids = (*tok)->EncodeWithOffsets(text, &offsets);
  ASSERT_TRUE(ids.ok());
  const CharText chars(text);
  std::vector<std::pair<uint32_t, uint32_t>> co;
  for (const auto& o : offsets) co.push_back(chars.FromBytes(o.begin, o.end));
  // Every token a B-LOC.
  WindowScores w{{0, static_cast<int>(ids->size())}, 1, {}};
  for (size_t i = 0; i < ids->size(); ++i) w.probs.insert(w.probs.end(), {0.0f, 0.0f, 0.0f, 1.0f, 0.0f});
  EntityOptions o;
  o.labels = kLabels;
  o.aggregation = TokenAggregation::kFirst;
  o.token_string = [&](int32_t id) { return (*tok)->IdToToken(id); };
  o.tokens_to_string = [&](const std::vector<std::string>& t) { return (*tok)->TokensToString(t); };
  o.word_aware = !(*tok)->continuing_subword_prefix().empty();
  o.unk_id = (*tok)->unk_id();
  const auto e = DocumentEntities(o, chars, *ids, co, {w}, TokenMerge::kCenter);
  ASSERT_EQ(e.size(), 4u);  // one per word: B- tags never join
  EXPECT_EQ(chars.Slice(e[0].start, e[0].end), "Jerusalem");
  EXPECT_EQ(e[0].word, "jerusalem");
  EXPECT_EQ(chars.Slice(e[3].start, e[3].end), "Bethlehem");
}

}  // namespace
}  // namespace ferry::chunk
