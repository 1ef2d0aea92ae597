// The GGUF file written by llama.cpp's own gguf-py (tests/fixtures/gguf) against its
// safetensors twin: the reader and the test writer cannot share a misreading of the format.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "decoder_test_util.h"
#include "engine/engine.h"
#include "io/gguf_model.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace ferry {
namespace {

const std::string kGguf = "tests/fixtures/gguf/tiny-llama.gguf";
const std::string kTwin = "tests/fixtures/gguf/tiny-llama";

// Both fixtures: tiny-llama (4 heads of 8) and tiny-llama-hd16 (2 heads of 16, one KV head,
// for the GPU kernels, which take head sizes from 16 up).
TEST(GgufFixtureTest, EveryTensorEqualsTheTwin) {
  for (const std::string name : {"tiny-llama", "tiny-llama-hd16"}) {
    SCOPED_TRACE(name);
    auto m = io::GgufModel::Open(testing::SourcePath("tests/fixtures/gguf/" + name + ".gguf"));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    auto twin = io::Checkpoint::Open(testing::SourcePath("tests/fixtures/gguf/" + name));
    ASSERT_TRUE(twin.ok()) << twin.status().ToString();
    int compared = 0;
    for (const std::string& name : (*twin)->Names()) {
      ASSERT_TRUE((*m)->Has(name)) << name;
      auto a = (*m)->Get(name);
      auto b = (*twin)->Get(name);
      ASSERT_TRUE(a.ok()) << name << ": " << a.status().ToString();
      ASSERT_EQ(a->shape(), b->shape()) << name;
      const std::vector<float> x = testing::ToFloats(*a), y = testing::ToFloats(*b);
      EXPECT_EQ(testing::MaxDiff(x.data(), y.data(), x.size()), 0.0) << name;
      ++compared;
    }
    EXPECT_EQ(compared, 3 + 2 * 9);
  }
}

TEST(GgufFixtureTest, LogitsTokensAndSettingsMatchTheTwin) {
  auto g = engine::Engine::Load(testing::SourcePath(kGguf));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto t = engine::Engine::Load(testing::SourcePath(kTwin));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const io::ModelConfig& cg = (*g)->config();
  const io::ModelConfig& ct = (*t)->config();
  EXPECT_EQ(cg.num_layers, ct.num_layers);
  EXPECT_EQ(cg.num_kv_heads, 2);
  EXPECT_EQ(cg.vocab_size, ct.vocab_size);
  EXPECT_EQ(cg.eos_token_ids, ct.eos_token_ids);
  EXPECT_FLOAT_EQ(cg.rope_theta, ct.rope_theta);
  EXPECT_EQ((*g)->tokenizer_config().chat_templates, (*t)->tokenizer_config().chat_templates);

  for (const char* text : {"the world is on the other side", "Hello, world! 123 <|endoftext|> ok",
                           "  spaces\tand\nlines  ", "\xc3\xa9t\xc3\xa9 \xe2\x82\xac"}) {
    auto a = (*g)->EncodePrompt(text);
    auto b = (*t)->EncodePrompt(text);
    ASSERT_TRUE(a.ok() && b.ok()) << text;
    EXPECT_EQ(*a, *b) << text;
  }
  auto hg = testing::DecoderHarness::Create(*g, 1, 64);
  auto ht = testing::DecoderHarness::Create(*t, 1, 64);
  ASSERT_TRUE(hg && ht);
  // Prompts long enough that the scaled RoPE pairs matter.
  for (const char* text : {"the world", "where the world is in the other world and the rest of it"}) {
    const std::vector<int32_t> ids = *(*t)->EncodePrompt(text);
    auto a = hg->Step({{1, ids, 0, false}});
    auto b = ht->Step({{1, ids, 0, false}});
    ASSERT_TRUE(a.ok() && b.ok());
    hg->cache().Free(1);
    ht->cache().Free(1);
    const std::vector<float> x = testing::ToFloats(*a), y = testing::ToFloats(*b);
    EXPECT_LE(testing::MaxDiff(x.data(), y.data(), x.size()), 1e-4) << text;
    EXPECT_GT(testing::MaxAbs(y), 0.5);  // not flat
    auto ga = hg->Greedy(ids, 8);
    auto gb = ht->Greedy(ids, 8);
    ASSERT_TRUE(ga.ok() && gb.ok());
    EXPECT_EQ(*ga, *gb) << text;
  }
}

}  // namespace
}  // namespace ferry
