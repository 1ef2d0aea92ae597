// GGUF import end to end: the fixture checkpoints written as GGUF files (as llama.cpp lays
// them out) load, tokenize, generate and build exactly as the checkpoint directories do.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "decoder_test_util.h"
#include "engine/engine.h"
#include "engine/engine_builder.h"
#include "engine/gguf_llama_writer.h"
#include "io/gguf_model.h"
#include "io/safetensors.h"
#include "io/temp_dir.h"
#include "test_util.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;
using testing::GgufBuilder;

struct Prompt {
  std::vector<int32_t> ids;
};

std::vector<Prompt> FixturePrompts(const std::string& model) {
  auto ref = io::SafetensorsFile::Open(testing::FixturePath("models/" + model + "/reference.safetensors"));
  EXPECT_TRUE(ref.ok());
  std::vector<Prompt> prompts;
  for (int j = 0; ref.ok() && (*ref)->Has("p" + std::to_string(j) + ".input_ids"); ++j) {
    prompts.push_back({testing::ToIds(*(*ref)->Get("p" + std::to_string(j) + ".input_ids"))});
  }
  return prompts;
}

// Last-position logits of every fixture prompt.
std::vector<std::vector<float>> LastLogits(std::shared_ptr<engine::Engine> e, const std::vector<Prompt>& prompts) {
  auto h = testing::DecoderHarness::Create(e, 1, 64);
  EXPECT_NE(h, nullptr);
  std::vector<std::vector<float>> out;
  for (const Prompt& p : prompts) {
    auto logits = h->Step({{1, p.ids, 0, false}});
    EXPECT_TRUE(logits.ok()) << logits.status().ToString();
    h->cache().Free(1);
    if (logits.ok()) out.push_back(testing::ToFloats(*logits));
  }
  return out;
}

// max |a - b| over every prompt's logits, relative to the largest |logit| of b.
double MaxLogitDiff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].size(), b[i].size());
    worst = std::max(worst, testing::MaxDiff(a[i].data(), b[i].data(), std::min(a[i].size(), b[i].size())));
    scale = std::max(scale, testing::MaxAbs(b[i]));
  }
  EXPECT_GT(scale, 1.0);  // logits that are not flat
  return worst / std::max(scale, 1e-6);
}

std::shared_ptr<engine::Engine> MustLoad(const std::string& path) {
  auto e = engine::Engine::Load(path);
  EXPECT_TRUE(e.ok()) << path << ": " << e.status().ToString();
  return e.ok() ? *e : nullptr;
}

struct TypeCase {
  const char* name;
  uint32_t type;
  // Max |logit difference| against the checkpoint, relative to the largest |logit|. F32 and
  // the checkpoint's own dtype hold the very same weights (what is left is summation order);
  // F16 from bf16 and BF16 from f16 round every weight once (bf16: 2^-9 relative); Q8_0
  // rounds every weight to a 1/254 step of its block's largest value.
  double llama_tol;   // llama-tiny: bf16 checkpoint
  double llama3_tol;  // llama3-tiny: f16 checkpoint
};

const TypeCase kTypes[] = {
    {"F32", GgufBuilder::kTF32, 1e-4, 1e-4},
    {"F16", GgufBuilder::kTF16, 1e-3, 1e-4},
    {"BF16", GgufBuilder::kTBF16, 1e-4, 1e-2},
    {"Q8_0", GgufBuilder::kTQ8_0, 3e-2, 3e-2},
};

class GgufModelTest : public ::testing::TestWithParam<TypeCase> {};

TEST_P(GgufModelTest, LlamaTinyLogitsMatchTheCheckpoint) {
  testing::TempDir tmp;
  const std::string dir = testing::FixturePath("models/llama-tiny");
  const std::string gguf = tmp.File("llama-tiny.gguf");
  ASSERT_TRUE(testing::WriteLlamaGguf(dir, gguf, {.type = GetParam().type}).ok());
  auto from_gguf = MustLoad(gguf);
  auto from_dir = MustLoad(dir);
  ASSERT_TRUE(from_gguf && from_dir);
  EXPECT_EQ(from_gguf->config().num_kv_heads, 2);
  EXPECT_FALSE(from_gguf->config().tie_word_embeddings);
  const std::vector<Prompt> prompts = FixturePrompts("llama-tiny");
  ASSERT_FALSE(prompts.empty());
  const double diff = MaxLogitDiff(LastLogits(from_gguf, prompts), LastLogits(from_dir, prompts));
  EXPECT_LE(diff, GetParam().llama_tol) << GetParam().name;
  RecordProperty("max_relative_logit_diff", std::to_string(diff));
}

TEST_P(GgufModelTest, Llama3TinyLogitsMatchTheCheckpoint) {
  // MQA, tied embeddings, Llama 3 RoPE scaling carried as rope_freqs.weight.
  testing::TempDir tmp;
  const std::string dir = testing::FixturePath("models/llama3-tiny");
  const std::string gguf = tmp.File("llama3-tiny.gguf");
  ASSERT_TRUE(testing::WriteLlamaGguf(dir, gguf, {.type = GetParam().type}).ok());
  auto from_gguf = MustLoad(gguf);
  auto from_dir = MustLoad(dir);
  ASSERT_TRUE(from_gguf && from_dir);
  EXPECT_EQ(from_gguf->config().num_kv_heads, 1);
  EXPECT_TRUE(from_gguf->config().tie_word_embeddings);
  const std::vector<Prompt> prompts = FixturePrompts("llama3-tiny");
  ASSERT_FALSE(prompts.empty());
  const double diff = MaxLogitDiff(LastLogits(from_gguf, prompts), LastLogits(from_dir, prompts));
  EXPECT_LE(diff, GetParam().llama3_tol) << GetParam().name;
  RecordProperty("max_relative_logit_diff", std::to_string(diff));
}

INSTANTIATE_TEST_SUITE_P(Types, GgufModelTest, ::testing::ValuesIn(kTypes),
                         [](const ::testing::TestParamInfo<TypeCase>& i) { return std::string(i.param.name); });

TEST(GgufModelTest, WithoutRopeFreqsTheLlama3ScalingIsGone) {
  // The scaling lives only in rope_freqs.weight: without it the frequencies are plain, and
  // the logits differ from the checkpoint's (the test above is not passing by accident).
  testing::TempDir tmp;
  const std::string dir = testing::FixturePath("models/llama3-tiny");
  const std::string gguf = tmp.File("plain.gguf");
  ASSERT_TRUE(testing::WriteLlamaGguf(dir, gguf, {.type = GgufBuilder::kTF16, .rope_freqs = false}).ok());
  auto from_gguf = MustLoad(gguf);
  auto from_dir = MustLoad(dir);
  ASSERT_TRUE(from_gguf && from_dir);
  const std::vector<Prompt> prompts = FixturePrompts("llama3-tiny");
  EXPECT_GT(MaxLogitDiff(LastLogits(from_gguf, prompts), LastLogits(from_dir, prompts)), 1e-3);
}

TEST(GgufModelTest, GreedyOutputMatchesTheCheckpoint) {
  // Same dtype as the checkpoints (bf16, f16): the same weights, so the same tokens.
  for (const auto& [model, type] : {std::pair<std::string, uint32_t>{"llama-tiny", GgufBuilder::kTBF16},
                                    std::pair<std::string, uint32_t>{"llama3-tiny", GgufBuilder::kTF16}}) {
    testing::TempDir tmp;
    const std::string dir = testing::FixturePath("models/" + model);
    const std::string gguf = tmp.File("m.gguf");
    ASSERT_TRUE(testing::WriteLlamaGguf(dir, gguf, {.type = type}).ok());
    auto from_gguf = MustLoad(gguf);
    auto from_dir = MustLoad(dir);
    ASSERT_TRUE(from_gguf && from_dir);
    auto hg = testing::DecoderHarness::Create(from_gguf, 1, 128);
    auto hd = testing::DecoderHarness::Create(from_dir, 1, 128);
    for (const Prompt& p : FixturePrompts(model)) {
      auto a = hg->Greedy(p.ids, 12);
      auto b = hd->Greedy(p.ids, 12);
      ASSERT_TRUE(a.ok()) << a.status().ToString();
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      EXPECT_EQ(*a, *b) << model;
    }
    // Prompts encode alike, BOS included.
    const std::string text = "The capital of France is";
    EXPECT_EQ(*from_gguf->EncodePrompt(text), *from_dir->EncodePrompt(text));
  }
}

// The tokenizer from GGUF metadata against the fixture cases (sentencepiece's ids for llama,
// Hugging Face's for gpt2).
void ExpectCases(const tokenizer::Tokenizer& tok, const std::string& cases_path) {
  std::ifstream in(cases_path);
  const nlohmann::json cases = nlohmann::json::parse(in);
  ASSERT_GT(cases.size(), 10u);
  int failures = 0;
  for (const nlohmann::json& c : cases) {
    auto ids = tok.Encode(c["text"].get<std::string>());
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    if (*ids != want && ++failures <= 5) ADD_FAILURE() << "text: " << c["text"];
  }
  EXPECT_EQ(failures, 0);
}

TEST(GgufModelTest, TokenizersMatchTheFixtureCases) {
  testing::TempDir tmp;
  const std::string spm = tmp.File("llama.gguf");
  ASSERT_TRUE(testing::WriteLlamaGguf(testing::FixturePath("models/llama-tiny"), spm, {}).ok());
  auto a = engine::LoadTokenizerFor(spm);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ExpectCases(**a, testing::FixturePath("tokenizers/llama/cases.json"));
  EXPECT_EQ((*a)->bos_id(), 1);

  const std::string bpe = tmp.File("gpt2.gguf");
  ASSERT_TRUE(testing::WriteLlamaGguf(testing::FixturePath("models/llama3-tiny"), bpe, {.pre = "gpt2"}).ok());
  auto b = engine::LoadTokenizerFor(bpe);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ExpectCases(**b, testing::FixturePath("tokenizers/gpt2/cases.json"));
  EXPECT_TRUE((*b)->IsSpecial(50256));
  auto with_special = (*b)->EncodeWithSpecial("Hello");
  ASSERT_TRUE(with_special.ok());
  EXPECT_EQ(with_special->ids, *(*b)->Encode("Hello"));  // add_bos_token false

  // The chat template travels in tokenizer_config.json.
  auto e = MustLoad(spm);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->tokenizer_config().chat_templates.count("default"), 1u);
}

TEST(GgufModelTest, PreTokenizerChoices) {
  testing::TempDir tmp;
  const std::string dir = testing::FixturePath("models/llama3-tiny");
  // Llama 3's regex splits digits in threes where GPT-2's keeps runs of them whole.
  const std::string l3 = tmp.File("l3.gguf");
  ASSERT_TRUE(testing::WriteLlamaGguf(dir, l3, {.pre = "llama-bpe"}).ok());
  auto a = engine::LoadTokenizerFor(l3);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const std::string g2 = tmp.File("g2.gguf");
  ASSERT_TRUE(testing::WriteLlamaGguf(dir, g2, {.pre = "gpt2"}).ok());
  auto b = engine::LoadTokenizerFor(g2);
  ASSERT_TRUE(b.ok());
  auto ids_a = (*a)->Encode("12345678"), ids_b = (*b)->Encode("12345678");
  ASSERT_TRUE(ids_a.ok() && ids_b.ok());
  EXPECT_NE(*ids_a, *ids_b);
  std::string joined;
  for (int32_t id : *ids_a) joined += (*a)->IdToToken(id) + "|";
  EXPECT_EQ(joined.substr(0, 4), "123|");

  const std::string bad = tmp.File("bad.gguf");
  ASSERT_TRUE(testing::WriteLlamaGguf(dir, bad, {.pre = "qwen2"}).ok());
  auto e = engine::Engine::Load(bad);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(e.status().message().find("tokenizer.ggml.pre 'qwen2'"), std::string::npos) << e.status().ToString();
}

TEST(GgufModelTest, QKRowsAreRestoredToHuggingFaceOrder) {
  testing::TempDir tmp;
  const std::string dir = testing::FixturePath("models/llama-tiny");
  const std::string gguf = tmp.File("m.gguf");
  ASSERT_TRUE(testing::WriteLlamaGguf(dir, gguf, {.type = GgufBuilder::kTBF16}).ok());
  auto m = io::GgufModel::Open(gguf);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto ckpt = io::Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  for (const char* name : {"model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.k_proj.weight",
                           "model.layers.0.mlp.down_proj.weight", "lm_head.weight", "model.norm.weight"}) {
    auto a = (*m)->Get(name);
    auto b = (*ckpt)->Get(name);
    ASSERT_TRUE(a.ok() && b.ok()) << name << ": " << a.status().ToString();
    ASSERT_EQ(a->shape(), b->shape()) << name;
    const std::vector<float> x = testing::ToFloats(*a), y = testing::ToFloats(*b);
    EXPECT_EQ(testing::MaxDiff(x.data(), y.data(), x.size()), 0.0) << name;
  }
  EXPECT_FALSE((*m)->Has("model.layers.9.mlp.up_proj.weight"));
  EXPECT_FALSE((*m)->Has("model.layers.x.mlp.up_proj.weight"));
}

TEST(GgufModelTest, Q8_0BlocksKeepTheRowOrderGetGives) {
  testing::TempDir tmp;
  const std::string gguf = tmp.File("m.gguf");
  const std::string dir = testing::FixturePath("models/llama-tiny");
  ASSERT_TRUE(testing::WriteLlamaGguf(dir, gguf, {.type = GgufBuilder::kTQ8_0}).ok());
  auto m = io::GgufModel::Open(gguf);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  for (const char* name : {"model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.k_proj.weight",
                           "model.layers.0.mlp.down_proj.weight", "lm_head.weight"}) {
    auto blocks = (*m)->GetInt8Blocks(name);
    auto dense = (*m)->Get(name);
    ASSERT_TRUE(blocks.ok() && dense.ok()) << name << ": " << blocks.status().ToString();
    ASSERT_TRUE(blocks->has_value()) << name;
    const io::Int8Blocks& b = **blocks;
    ASSERT_EQ(b.q.shape(), dense->shape()) << name;
    const int64_t k = b.in(), per_row = k / b.block_size;
    int64_t differ = 0;
    for (int64_t i = 0; i < b.q.numel(); ++i) {
      const auto* scales = static_cast<const uint16_t*>(b.scales.raw());
      const float scale = F16ToF32(scales[i / k * per_row + i % k / b.block_size]);
      const float v = static_cast<float>(b.q.data<int8_t>()[i]) * scale;
      differ += v != dense->data<float>()[i];
    }
    EXPECT_EQ(differ, 0) << name;
  }
  auto norm = (*m)->GetInt8Blocks("model.norm.weight");  // F32 in the file
  ASSERT_TRUE(norm.ok());
  EXPECT_FALSE(norm->has_value());
}

// A Q8_0 file on the CPU runs its blocks as they are: about a byte a weight read, and the very
// logits of the f32 weights they stand for (an fp32 engine built from the same file).
TEST(GgufModelTest, Q8_0RunsItsBlocksWithTheF32WeightsLogits) {
  testing::TempDir tmp;
  const std::string gguf = tmp.File("m.gguf");
  const std::string dir = testing::FixturePath("models/llama-tiny");
  ASSERT_TRUE(testing::WriteLlamaGguf(dir, gguf, {.type = GgufBuilder::kTQ8_0}).ok());
  const std::string f32 = tmp.File("m-f32.ferry");
  engine::BuildOptions o;
  o.tune = false;
  o.precision = Precision::kFp32;
  auto report = engine::BuildEngine(gguf, f32, o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  auto from_gguf = MustLoad(gguf);
  auto built = MustLoad(f32);
  ASSERT_TRUE(from_gguf && built);
  const std::vector<Prompt> prompts = FixturePrompts("llama-tiny");
  EXPECT_EQ(MaxLogitDiff(LastLogits(from_gguf, prompts), LastLogits(built, prompts)), 0.0);
  // The linears were read as their blocks (34 bytes a 32 weights, as stored), not widened; the
  // embedding table (a table, not a linear) and the norms as f32.
  const io::ModelConfig& c = from_gguf->config();
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const int64_t linear = c.num_layers * (h * (q + 2 * kv) + q * h + 3 * h * c.intermediate_size) + c.vocab_size * h;
  const int64_t floats = c.vocab_size * h + (2 * c.num_layers + 1) * h;
  EXPECT_EQ(from_gguf->load_stats().weight_bytes, static_cast<uint64_t>(linear / 32 * 34 + 4 * floats));
}

TEST(GgufModelTest, BuildFromGgufEmbedsTheSynthesizedFiles) {
  testing::TempDir tmp;
  const std::string dir = testing::FixturePath("models/llama-tiny");
  const std::string gguf = tmp.File("m.gguf");
  ASSERT_TRUE(testing::WriteLlamaGguf(dir, gguf, {.type = GgufBuilder::kTQ8_0}).ok());
  const std::string out = tmp.File("m.ferry");
  engine::BuildOptions o;
  o.tune = false;
  auto report = engine::BuildEngine(gguf, out, o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  auto built = MustLoad(out);
  auto from_gguf = MustLoad(gguf);
  ASSERT_TRUE(built && from_gguf);
  ASSERT_NE(built->tokenizer(), nullptr);
  EXPECT_EQ(*built->EncodePrompt("Hello world"), *from_gguf->EncodePrompt("Hello world"));
  EXPECT_EQ(built->config().eos_token_ids, std::vector<int>{2});
  const std::vector<Prompt> prompts = FixturePrompts("llama-tiny");
  EXPECT_LE(MaxLogitDiff(LastLogits(built, prompts), LastLogits(from_gguf, prompts)), 1e-5);
}

TEST(GgufModelTest, UnsupportedFilesAreRefusedByName) {
  testing::TempDir tmp;
  GgufBuilder b;
  b.Str("general.architecture", "qwen2");
  const std::string qwen = tmp.Write("q.gguf", b.Build());
  auto e = engine::Engine::Load(qwen);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("'qwen2'"), std::string::npos) << e.status().ToString();

  // A quantized type ferry does not read, named with its tensor.
  GgufBuilder q;
  q.Str("general.architecture", "llama");
  q.U32("llama.block_count", 1);
  q.U32("llama.context_length", 64);
  q.U32("llama.embedding_length", 256);
  q.U32("llama.feed_forward_length", 256);
  q.U32("llama.attention.head_count", 2);
  q.Tensor("token_embd.weight", {256, 4}, GgufBuilder::kTQ4_K, std::string(4 * 144, '\0'));
  const std::string q4 = tmp.Write("q4.gguf", q.Build());
  auto f = engine::Engine::Load(q4);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kUnimplemented) << f.status().ToString();
  EXPECT_NE(f.status().message().find("Q4_K"), std::string::npos) << f.status().ToString();
  EXPECT_NE(f.status().message().find("token_embd.weight"), std::string::npos) << f.status().ToString();
}

TEST(GgufModelTest, BrokenTokenizerMetadataIsACleanError) {
  testing::TempDir tmp;
  auto base = [] {
    GgufBuilder b;
    b.Str("general.architecture", "llama");
    b.U32("llama.block_count", 1);
    b.U32("llama.context_length", 64);
    b.U32("llama.embedding_length", 4);
    b.U32("llama.feed_forward_length", 8);
    b.U32("llama.attention.head_count", 2);
    b.Tensor("token_embd.weight", {4, 2}, GgufBuilder::kTF32, std::string(32, '\0'));
    b.Str("tokenizer.ggml.model", "gpt2");
    b.StrArray("tokenizer.ggml.merges", {});
    return b;
  };
  // A token that is not UTF-8 cannot be written into tokenizer.json.
  GgufBuilder bad_utf8 = base();
  bad_utf8.StrArray("tokenizer.ggml.tokens", {"a", "\xff"});
  auto e = engine::Engine::Load(tmp.Write("a.gguf", bad_utf8.Build()));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << e.status().ToString();
  // Special token ids outside the vocabulary, token types of the wrong count.
  GgufBuilder bad_id = base();
  bad_id.StrArray("tokenizer.ggml.tokens", {"a", "b"});
  bad_id.U32("tokenizer.ggml.eos_token_id", 7);
  auto f = engine::Engine::Load(tmp.Write("b.gguf", bad_id.Build()));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("outside the vocabulary"), std::string::npos) << f.status().ToString();
  GgufBuilder bad_types = base();
  bad_types.StrArray("tokenizer.ggml.tokens", {"a", "b"});
  bad_types.Array<int32_t>("tokenizer.ggml.token_type", GgufBuilder::kI32, {1});
  auto g = engine::Engine::Load(tmp.Write("c.gguf", bad_types.Build()));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("token_type"), std::string::npos) << g.status().ToString();
}

}  // namespace
}  // namespace ferry
