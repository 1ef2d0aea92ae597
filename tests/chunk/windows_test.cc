#include "chunk/windows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace ferry::chunk {
namespace {

// HF tokenizers' Encoding::truncate with a stride, written as it is there: starts every
// max_len - stride tokens while no part has reached the end yet.
std::vector<Span> HfStrideParts(int n, int max_len, int stride) {
  std::vector<Span> parts;
  if (max_len >= n) return {{0, n}};
  bool end = false;
  for (int start = 0; start < n; start += max_len - stride) {
    if (end) break;
    const int stop = std::min(start + max_len, n);
    end = stop == n;
    parts.push_back({start, stop});
  }
  return parts;
}

void ExpectSpans(const std::vector<Span>& got, const std::vector<Span>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].begin, want[i].begin) << "window " << i;
    EXPECT_EQ(got[i].end, want[i].end) << "window " << i;
  }
}

TEST(PlanWindowsTest, StrideTable) {
  ExpectSpans(PlanWindows(3, 4, 1).value(), {{0, 3}});
  ExpectSpans(PlanWindows(4, 4, 1).value(), {{0, 4}});
  ExpectSpans(PlanWindows(10, 4, 1).value(), {{0, 4}, {3, 7}, {6, 10}});
  ExpectSpans(PlanWindows(11, 4, 1).value(), {{0, 4}, {3, 7}, {6, 10}, {9, 11}});
  ExpectSpans(PlanWindows(8, 4, 0).value(), {{0, 4}, {4, 8}});
  ExpectSpans(PlanWindows(5, 4, 3).value(), {{0, 4}, {1, 5}});
  ExpectSpans(PlanWindows(0, 4, 1).value(), {{0, 0}});  // an empty input is one empty window
}

TEST(PlanWindowsTest, MatchesHfStrideTruncationOnRandomSizes) {
  std::mt19937 rng(1611);
  for (int trial = 0; trial < 2000; ++trial) {
    const int window = 1 + static_cast<int>(rng() % 64);
    const int overlap = static_cast<int>(rng() % static_cast<unsigned>(window));
    const int n = static_cast<int>(rng() % 400);
    auto got = PlanWindows(n, window, overlap);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    const std::vector<Span> want = HfStrideParts(n, window, overlap);
    ASSERT_EQ(got->size(), want.size()) << "n " << n << " window " << window << " overlap " << overlap;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ((*got)[i].begin, want[i].begin);
      ASSERT_EQ((*got)[i].end, want[i].end);
    }
    // Every token is covered and consecutive windows share exactly `overlap` tokens.
    for (size_t i = 1; i < got->size(); ++i) EXPECT_EQ((*got)[i - 1].end - (*got)[i].begin, overlap);
  }
}

TEST(PlanWindowsTest, WindowsWithoutNewContentAreRefusedNamingTheField) {
  auto no_room = PlanWindows(10, 0, 0);
  ASSERT_FALSE(no_room.ok());
  EXPECT_EQ(ErrorField(no_room.status()), "chunk_tokens");
  auto overlap = PlanWindows(10, 4, 4);
  ASSERT_FALSE(overlap.ok());
  EXPECT_EQ(ErrorField(overlap.status()), "chunk_overlap");
  EXPECT_EQ(ErrorField(InvalidArgument("something else")), "");
}

TEST(CenterOwnersTest, EachTokenGoesToTheWindowWhereItIsFarthestFromAnEdge) {
  // Windows [0,6) and [4,10): token 4 is 1 from w0's cut edge and 0 from w1's; token 5 the reverse.
  const std::vector<int> owners = CenterOwners({{0, 6}, {4, 10}}, 10);
  EXPECT_EQ(owners, (std::vector<int>{0, 0, 0, 0, 0, 1, 1, 1, 1, 1}));
  // Three windows with a wide overlap: the middle of each overlap splits it; ties go left.
  const std::vector<int> three = CenterOwners({{0, 8}, {4, 12}, {8, 14}}, 14);
  EXPECT_EQ(three, (std::vector<int>{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}));
  // One window owns everything; the document's own ends are not window edges.
  EXPECT_EQ(CenterOwners({{0, 3}}, 3), (std::vector<int>{0, 0, 0}));
}

// A BERT-like template: [CLS]=101 A [SEP]=102 (B [SEP]).
TemplateFn BertTemplate() {
  return [](std::span<const int32_t> a, std::optional<std::span<const int32_t>> b) -> Result<tokenizer::TemplatedEncoding> {
    tokenizer::TemplatedEncoding e;
    auto add = [&e](int32_t id, int32_t type, int8_t seq, int32_t pos) {
      e.ids.push_back(id);
      e.type_ids.push_back(type);
      e.sequence.push_back(seq);
      e.position.push_back(pos);
    };
    add(101, 0, -1, -1);
    for (size_t i = 0; i < a.size(); ++i) add(a[i], 0, 0, static_cast<int32_t>(i));
    add(102, 0, -1, -1);
    if (b) {
      for (size_t i = 0; i < b->size(); ++i) add((*b)[i], 1, 1, static_cast<int32_t>(i));
      add(102, 1, -1, -1);
    }
    return e;
  };
}

std::vector<int32_t> Iota(int n, int32_t from) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = from + i;
  return v;
}

TEST(PlanInputTest, ErrorModeKeepsOneInputOrRefuses) {
  const std::vector<int32_t> ids = Iota(6, 1000);
  auto fits = PlanInput(BertTemplate(), ids, std::nullopt, Truncation::kError, {8, 1});
  ASSERT_TRUE(fits.ok());
  ASSERT_EQ(fits->windows.size(), 1u);
  EXPECT_EQ(fits->windows[0].ids, (std::vector<int32_t>{101, 1000, 1001, 1002, 1003, 1004, 1005, 102}));
  EXPECT_EQ(fits->windows[0].content_at, 1);
  EXPECT_EQ(fits->input_tokens, 8);
  auto over = PlanInput(BertTemplate(), ids, std::nullopt, Truncation::kError, {7, 1});
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kOutOfRange);
}

TEST(PlanInputTest, EndModeKeepsTheFirstTokensAndPairsLoseFromTheLongerFirst) {
  const std::vector<int32_t> ids = Iota(20, 1000);
  auto single = PlanInput(BertTemplate(), ids, std::nullopt, Truncation::kEnd, {8, 0});
  ASSERT_TRUE(single.ok());
  ASSERT_EQ(single->windows.size(), 1u);
  EXPECT_TRUE(single->truncated);
  EXPECT_EQ(single->windows[0].ids, (std::vector<int32_t>{101, 1000, 1001, 1002, 1003, 1004, 1005, 102}));
  // longest_first with a budget of 12 - 3 = 9: (3, 20) -> (3, 6); (10, 20) -> (4, 5) (the
  // longer takes the odd token); (20, 10) -> (5, 4).
  struct Case {
    int a, b, want_a, want_b;
  };
  for (const Case& c : {Case{3, 20, 3, 6}, Case{10, 20, 4, 5}, Case{20, 10, 5, 4}, Case{6, 6, 4, 5}}) {
    auto pair = PlanInput(BertTemplate(), Iota(c.a, 1000), Iota(c.b, 2000), Truncation::kEnd, {12, 0});
    ASSERT_TRUE(pair.ok());
    const std::vector<int32_t>& w = pair->windows[0].ids;
    const auto n_a = std::count_if(w.begin(), w.end(), [](int32_t id) { return id >= 1000 && id < 2000; });
    const auto n_b = std::count_if(w.begin(), w.end(), [](int32_t id) { return id >= 2000; });
    EXPECT_EQ(n_a, c.want_a) << c.a << "," << c.b;
    EXPECT_EQ(n_b, c.want_b) << c.a << "," << c.b;
    EXPECT_LE(w.size(), 12u);
  }
}

TEST(PlanInputTest, ChunkModeWrapsEveryWindowAndRepeatsAPairsFirstSequence) {
  const std::vector<int32_t> ids = Iota(10, 1000);
  // 6-token windows hold 4 content tokens; overlap 1 -> content [0,4) [3,7) [6,10).
  auto single = PlanInput(BertTemplate(), ids, std::nullopt, Truncation::kChunk, {6, 1});
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  ASSERT_EQ(single->windows.size(), 3u);
  EXPECT_EQ(single->windows[1].ids, (std::vector<int32_t>{101, 1003, 1004, 1005, 1006, 102}));
  EXPECT_EQ(single->windows[2].content.begin, 6);
  EXPECT_EQ(single->windows[2].content.end, 10);
  EXPECT_EQ(single->ContentWeights(), (std::vector<int>{4, 4, 4}));
  EXPECT_EQ(single->TotalTokens(), 18);

  // A pair: [CLS] q q [SEP] window-of-second [SEP]: 9 - 3 - 2 = 4 content tokens a window.
  const std::vector<int32_t> query = {7, 8};
  auto pair = PlanInput(BertTemplate(), query, ids, Truncation::kChunk, {9, 2});
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  ASSERT_EQ(pair->windows.size(), 4u);  // [0,4) [2,6) [4,8) [6,10)
  for (const WindowInput& w : pair->windows) {
    EXPECT_EQ(w.ids[1], 7);
    EXPECT_EQ(w.ids[2], 8);
    EXPECT_EQ(w.content_at, 4);
    EXPECT_EQ(w.type_ids.back(), 1);
    EXPECT_EQ(w.type_ids[1], 0);
  }
  EXPECT_EQ(pair->windows[3].ids, (std::vector<int32_t>{101, 7, 8, 102, 1006, 1007, 1008, 1009, 102}));

  // A first sequence that leaves no room, and an overlap that leaves no new token.
  auto crowded = PlanInput(BertTemplate(), Iota(6, 1), ids, Truncation::kChunk, {9, 0});
  ASSERT_FALSE(crowded.ok());
  EXPECT_EQ(ErrorField(crowded.status()), "chunk_tokens");
  auto stuck = PlanInput(BertTemplate(), ids, std::nullopt, Truncation::kChunk, {6, 4});
  ASSERT_FALSE(stuck.ok());
  EXPECT_EQ(ErrorField(stuck.status()), "chunk_overlap");
}

// With a real tokenizer, one window of a text that fits is exactly EncodeWithSpecial.
TEST(PlanInputTest, OneWindowEqualsTheTokenizersOwnSpecialTokens) {
  auto tok = tokenizer::LoadTokenizer(testing::FixturePath("tokenizers/bert"));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::string a = "Who wrote the book of Ruth?";
  const std::string b = "And Ruth said, Intreat me not to leave thee.";
  auto ia = (*tok)->Encode(a);
  auto ib = (*tok)->Encode(b);
  ASSERT_TRUE(ia.ok() && ib.ok());
  auto want = (*tok)->EncodeWithSpecial(a, b);
  ASSERT_TRUE(want.ok());
  auto plan = PlanInput(TemplateOf(tok->get()), *ia, std::span<const int32_t>(*ib), Truncation::kChunk, {512, 64});
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->windows.size(), 1u);
  EXPECT_EQ(plan->windows[0].ids, want->ids);
  EXPECT_EQ(plan->windows[0].type_ids, want->type_ids);
  // And windows of a long text hold consecutive slices of its ids.
  std::string long_text;
  for (int i = 0; i < 60; ++i) long_text += "And Ruth said, Intreat me not to leave thee. ";
  auto ids = (*tok)->Encode(long_text);
  ASSERT_TRUE(ids.ok());
  auto chunks = PlanInput(TemplateOf(tok->get()), *ids, std::nullopt, Truncation::kChunk, {128, 16});
  ASSERT_TRUE(chunks.ok());
  ASSERT_GT(chunks->windows.size(), 3u);
  for (const WindowInput& w : chunks->windows) {
    ASSERT_LE(w.ids.size(), 128u);
    EXPECT_EQ(w.ids.front(), (*tok)->TokenToId("[CLS]").value());
    EXPECT_EQ(w.ids.back(), (*tok)->TokenToId("[SEP]").value());
    EXPECT_TRUE(std::equal(w.ids.begin() + 1, w.ids.end() - 1, ids->begin() + w.content.begin));
  }
}

TEST(LongInputOptionsTest, ResolveWindowFillsDefaultsAndNamesBadFields) {
  auto g = ResolveWindow(0, -1, 512);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->chunk_tokens, 512);
  EXPECT_EQ(g->chunk_overlap, 64);
  EXPECT_EQ(ErrorField(ResolveWindow(600, -1, 512).status()), "chunk_tokens");
  EXPECT_EQ(ErrorField(ResolveWindow(64, 64, 512).status()), "chunk_overlap");
  LongInputOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.chunk_tokens = 16;
  o.chunk_overlap = 16;
  EXPECT_FALSE(o.Validate().ok());
  EXPECT_EQ(ParseTruncation("chunk"), Truncation::kChunk);
  EXPECT_EQ(ParseTruncation("middle"), std::nullopt);
  EXPECT_EQ(TokenAggregationName(TokenAggregation::kAverage), "average");
}

}  // namespace
}  // namespace ferry::chunk
