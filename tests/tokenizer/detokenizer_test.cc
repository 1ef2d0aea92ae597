// Streaming detokenization: pieces concatenate to the full decode and never split a
// UTF-8 character.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "fixture_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace ferry::tokenizer {
namespace {

using ::ferry::testing::FixturePath;
using ::testing::ElementsAre;

struct Named {
  std::string name;
  std::unique_ptr<Tokenizer> tokenizer;
};

std::vector<Named> AllTokenizers() {
  std::vector<Named> out;
  for (const char* name : {"gpt2", "bert", "llama"}) {
    auto t = LoadTokenizer(FixturePath(std::string("tokenizers/") + name));
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (t.ok()) out.push_back({name, std::move(t).value()});
  }
  auto json_llama = LoadTokenizerFromFiles(testing::LoadFiles("tokenizers/llama", {"tokenizer.model"}));
  EXPECT_TRUE(json_llama.ok());
  if (json_llama.ok()) out.push_back({"llama tokenizer.json", std::move(json_llama).value()});
  return out;
}

// Feeds `ids` one at a time; checks every piece and returns the concatenation.
std::string Stream(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip_special,
                   int* empty_adds = nullptr) {
  IncrementalDetokenizer detokenizer(tokenizer, skip_special);
  std::string out;
  for (int32_t id : ids) {
    const std::string piece = detokenizer.Add(id);
    EXPECT_TRUE(IsValidUtf8(piece)) << "piece for id " << id;
    if (piece.empty() && empty_adds != nullptr) ++*empty_adds;
    out += piece;
  }
  const std::string rest = detokenizer.Flush();
  EXPECT_TRUE(IsValidUtf8(rest));
  return out + rest;
}

const char* const kMultiByteTexts[] = {
    "Hello 🦙 world",
    "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅",
    "我想在apple工作1314151天～",
    "Cửa Việt, café, naïve, Führer, São Paulo",
    "нещо на Български",
    "កាន់តែពិសេសអាចខលចេញ",
    " leading space and trailing space ",
    "line one\n\tline two\n",
};

TEST(IncrementalDetokenizerTest, ConcatenationEqualsFullDecode) {
  for (const Named& t : AllTokenizers()) {
    SCOPED_TRACE(t.name);
    for (const char* text : kMultiByteTexts) {
      auto encoding = t.tokenizer->EncodeWithSpecial(text);
      ASSERT_TRUE(encoding.ok()) << encoding.status().ToString();
      for (bool skip_special : {true, false}) {
        auto full = t.tokenizer->Decode(encoding->ids, skip_special);
        ASSERT_TRUE(full.ok());
        EXPECT_EQ(Stream(*t.tokenizer, encoding->ids, skip_special), *full) << text;
      }
    }
  }
}

TEST(IncrementalDetokenizerTest, HoldsBackIncompleteCharacters) {
  auto gpt2 = LoadTokenizer(FixturePath("tokenizers/gpt2"));
  ASSERT_TRUE(gpt2.ok());
  // " 🦙" is split by byte-level BPE into tokens that each carry part of the emoji.
  auto ids = (*gpt2)->Encode(" this is 🦙.cpp");
  ASSERT_TRUE(ids.ok());
  int empty_adds = 0;
  EXPECT_EQ(Stream(**gpt2, *ids, true, &empty_adds), " this is 🦙.cpp");
  EXPECT_GE(empty_adds, 1);
}

TEST(IncrementalDetokenizerTest, ByteFallbackTokensCompleteOneCharacter) {
  auto llama = LoadTokenizer(FixturePath("tokenizers/llama"));
  ASSERT_TRUE(llama.ok());
  const Tokenizer& t = **llama;
  const int32_t f0 = *t.TokenToId("<0xF0>");
  const int32_t x9f = *t.TokenToId("<0x9F>");
  const int32_t xa6 = *t.TokenToId("<0xA6>");
  const int32_t x99 = *t.TokenToId("<0x99>");
  IncrementalDetokenizer detokenizer(t);
  EXPECT_EQ(detokenizer.Add(*t.TokenToId("▁Hello")), "Hello");  // start of sequence: no space
  EXPECT_EQ(detokenizer.Add(29871), " ");
  EXPECT_EQ(detokenizer.Add(f0), "");
  EXPECT_EQ(detokenizer.Add(x9f), "");
  EXPECT_EQ(detokenizer.Add(xa6), "");
  EXPECT_EQ(detokenizer.Add(x99), "🦙");
  EXPECT_EQ(detokenizer.Add(*t.TokenToId("▁world")), " world");
  EXPECT_EQ(detokenizer.Flush(), "");
}

TEST(IncrementalDetokenizerTest, LeadingSpaceOnlyStrippedAtSequenceStart) {
  auto llama = LoadTokenizer(FixturePath("tokenizers/llama"));
  ASSERT_TRUE(llama.ok());
  const Tokenizer& t = **llama;
  const std::vector<int32_t> ids = {1, 15043, 3186};  // <s> ▁Hello ▁world
  {
    IncrementalDetokenizer detokenizer(t);
    EXPECT_EQ(detokenizer.Add(ids[0]), "");  // skipped BOS is not the first decoded token
    EXPECT_EQ(detokenizer.Add(ids[1]), "Hello");
    EXPECT_EQ(detokenizer.Add(ids[2]), " world");
  }
  {
    // Continuing after a prompt: the first generated token keeps its space.
    IncrementalDetokenizer detokenizer(t, true, /*sequence_start=*/false);
    EXPECT_EQ(detokenizer.Add(ids[1]), " Hello");
    EXPECT_EQ(detokenizer.Add(ids[2]), " world");
  }
  {
    IncrementalDetokenizer detokenizer(t, /*skip_special=*/false);
    std::string text = detokenizer.Add(ids[0]);
    text += detokenizer.Add(ids[1]);
    text += detokenizer.Add(ids[2]);
    EXPECT_EQ(text, "<s> Hello world");
  }
}

TEST(IncrementalDetokenizerTest, InvalidBytesBecomeReplacementCharacters) {
  auto llama = LoadTokenizer(FixturePath("tokenizers/llama"));
  ASSERT_TRUE(llama.ok());
  const Tokenizer& t = **llama;
  {
    // A stray continuation byte cannot start a character: it is replaced at once.
    IncrementalDetokenizer detokenizer(t);
    EXPECT_EQ(detokenizer.Add(*t.TokenToId("<0x80>")), "\xEF\xBF\xBD");
    EXPECT_EQ(detokenizer.Add(*t.TokenToId("▁ok")), " ok");
  }
  {
    // A truncated character is held until Flush, which replaces it.
    IncrementalDetokenizer detokenizer(t);
    EXPECT_EQ(detokenizer.Add(*t.TokenToId("<0xF0>")), "");
    EXPECT_EQ(detokenizer.Add(*t.TokenToId("<0x9F>")), "");
    EXPECT_EQ(detokenizer.Flush(), "\xEF\xBF\xBD");
    EXPECT_EQ(detokenizer.Flush(), "");
  }
  {
    // A truncated character followed by a complete one: the broken part is replaced.
    IncrementalDetokenizer detokenizer(t);
    EXPECT_EQ(detokenizer.Add(*t.TokenToId("<0xE2>")), "");
    EXPECT_EQ(detokenizer.Add(*t.TokenToId("<0x41>")), "\xEF\xBF\xBD" "A");
  }
}

TEST(IncrementalDetokenizerTest, RandomGpt2IdsMatchLossyDecode) {
  auto gpt2 = LoadTokenizer(FixturePath("tokenizers/gpt2"));
  ASSERT_TRUE(gpt2.ok());
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> id(0, (*gpt2)->vocab_size() - 1);
  for (int round = 0; round < 50; ++round) {
    std::vector<int32_t> ids(1 + rng() % 40);
    for (int32_t& v : ids) v = id(rng);
    auto full = (*gpt2)->Decode(ids, /*skip_special=*/false);
    ASSERT_TRUE(full.ok());
    EXPECT_EQ(Stream(**gpt2, ids, false), *full);
  }
}

TEST(IncrementalDetokenizerTest, RandomLlamaPiecesMatchDecode) {
  auto llama = LoadTokenizer(FixturePath("tokenizers/llama"));
  ASSERT_TRUE(llama.ok());
  std::mt19937 rng(99);
  // Ids above the 259 control/byte tokens: ordinary pieces, whose decode is lossless.
  std::uniform_int_distribution<int32_t> id(259, (*llama)->vocab_size() - 1);
  for (int round = 0; round < 50; ++round) {
    std::vector<int32_t> ids(1 + rng() % 40);
    for (int32_t& v : ids) v = id(rng);
    auto full = (*llama)->Decode(ids);
    ASSERT_TRUE(full.ok());
    EXPECT_EQ(Stream(**llama, ids, true), *full);
  }
}

TEST(IncrementalDetokenizerTest, WordPieceJoinsContinuations) {
  auto bert = LoadTokenizer(FixturePath("tokenizers/bert"));
  ASSERT_TRUE(bert.ok());
  auto ids = (*bert)->Encode("discards w048");
  ASSERT_TRUE(ids.ok());
  IncrementalDetokenizer detokenizer(**bert);
  std::vector<std::string> pieces;
  for (int32_t id : *ids) pieces.push_back(detokenizer.Add(id));
  EXPECT_THAT(pieces, ElementsAre("disc", "ards", " w", "0", "48"));
}

}  // namespace
}  // namespace ferry::tokenizer
