#include "tools/checkpoint_maker.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <span>

#include "decoder_test_util.h"
#include "engine/encoder_runner.h"
#include "engine/engine.h"
#include "engine/engine_builder.h"
#include "test_util.h"

namespace ferry::tools {
namespace {

namespace fs = std::filesystem;

class CheckpointMakerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ferry_ckpt_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CheckpointMakerTest, TokenClassifierWithATokenizerTakesText) {
  CheckpointSpec spec;
  spec.preset = "bert-test-vocab";
  spec.dtype = DType::kF32;
  spec.head = "token";
  spec.tokenizer_dir = ferry::testing::FixturePath("tokenizers/bert");
  ASSERT_TRUE(MakeCheckpoint(spec, dir_.string()).ok());
  EXPECT_TRUE(fs::exists(dir_ / "vocab.txt"));
  auto e = engine::Engine::Load(dir_.string());
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ((*e)->config().architecture, "BertForTokenClassification");
  EXPECT_EQ((*e)->config().id2label.at(1), "B-PER");  // CoNLL's tags by default
  EXPECT_EQ((*e)->config().num_labels, 9);
  ASSERT_TRUE((*e)->encoder()->has_token_classifier());
  auto enc = (*e)->tokenizer()->EncodeWithSpecial("Moses went up to Jerusalem");
  ASSERT_TRUE(enc.ok());
  auto logits = engine::ClassifyTokens(**e, {{enc->ids, enc->type_ids}});
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  EXPECT_EQ(logits->dim(0), static_cast<int64_t>(enc->ids.size()));
  EXPECT_EQ(logits->dim(1), 9);
}

TEST_F(CheckpointMakerTest, HeadsAndLabels) {
  CheckpointSpec spec;
  spec.preset = "bert-test";
  spec.dtype = DType::kF32;
  spec.head = "none";
  ASSERT_TRUE(MakeCheckpoint(spec, (dir_ / "none").string()).ok());
  auto none = engine::Engine::Load((dir_ / "none").string());
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ((*none)->encoder()->head(), model::EncoderHead::kNone);
  spec.head = "sequence";
  spec.num_labels = 1;  // a cross-encoder
  ASSERT_TRUE(MakeCheckpoint(spec, (dir_ / "cross").string()).ok());
  auto cross = engine::Engine::Load((dir_ / "cross").string());
  ASSERT_TRUE(cross.ok()) << cross.status().ToString();
  EXPECT_TRUE((*cross)->encoder()->has_classifier());
  EXPECT_EQ((*cross)->config().num_labels, 1);
  spec.head = "tokens";
  EXPECT_EQ(MakeCheckpoint(spec, (dir_ / "bad").string()).code(), StatusCode::kInvalidArgument);
  spec.head = "token";
  spec.preset = "llama-test";
  EXPECT_EQ(MakeCheckpoint(spec, (dir_ / "bad").string()).code(), StatusCode::kInvalidArgument);
  spec.preset = "bert-test";
  spec.tokenizer_dir = (dir_ / "nowhere").string();
  EXPECT_EQ(MakeCheckpoint(spec, (dir_ / "bad").string()).code(), StatusCode::kNotFound);
}


// The architectures without a transformers reference here (Qwen3, Gemma 2, Phi-3 with
// longrope, Mistral's window) on random checkpoints of small shapes: they load, a ragged batch
// gives each prompt's logits, chunked prefill and decode through the KV cache give a full
// recompute's (across the sliding windows), and every engine precision builds, loads and
// stays near the checkpoint's logits.
TEST_F(CheckpointMakerTest, NewDecoderArchitecturesLoadAndKeepTheCacheInvariants) {
  for (const std::string preset : {"qwen3-test", "gemma2-test", "phi3-test", "mistral-swa-test"}) {
    SCOPED_TRACE(preset);
    const fs::path dir = dir_ / preset;
    CheckpointSpec spec;
    spec.preset = preset;
    spec.dtype = DType::kF32;
    spec.seed = 7;
    ASSERT_TRUE(MakeCheckpoint(spec, dir.string()).ok());
    auto e = engine::Engine::Load(dir.string());
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    const io::ModelConfig& c = (*e)->config();
    const int vocab = c.vocab_size;
    auto h = testing::DecoderHarness::Create(*e, 4, 128);
    ASSERT_NE(h, nullptr);
    // phi3-test switches to its long factors past 32 tokens, which a cache filled before the
    // switch cannot follow (as in transformers): stay inside the window there.
    const int n = c.rope_scaling.type == io::RopeScaling::Type::kLongRope ? 30 : 45;
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i) ids.push_back((i * 131 + 17) % vocab);
    auto full = h->Step({{1, ids, 0, false}});
    ASSERT_TRUE(full.ok()) << full.status().ToString();
    h->cache().Free(1);
    const std::vector<float> ref(full->data<float>(), full->data<float>() + vocab);
    double scale = 0;
    for (float v : ref) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    ASSERT_GT(scale, 0.0);
    // Chunks of 5, then one token at a time through the cache.
    Result<Tensor> last = InvalidArgument("unset");
    for (int pos = 0; pos < n;) {
      const int k = pos < n - 6 ? std::min(5, n - 6 - pos) : 1;
      last = h->Step({{2, std::span<const int32_t>(ids.data() + pos, k), pos, false}});
      ASSERT_TRUE(last.ok()) << last.status().ToString();
      pos += k;
    }
    h->cache().Free(2);
    double err = 0;
    for (int v = 0; v < vocab; ++v) err = std::max(err, static_cast<double>(std::fabs(last->data<float>()[v] - ref[v])));
    EXPECT_LE(err, 1e-4 * scale);
    // A ragged batch with a shorter prompt beside it.
    const std::vector<int32_t> other(ids.begin(), ids.begin() + 11);
    auto batch = h->Step({{3, other, 0, false}, {4, ids, 0, false}});
    ASSERT_TRUE(batch.ok());
    h->cache().Free(3);
    h->cache().Free(4);
    err = 0;
    for (int v = 0; v < vocab; ++v) err = std::max(err, static_cast<double>(std::fabs(batch->data<float>()[vocab + v] - ref[v])));
    EXPECT_LE(err, 1e-4 * scale);
    // int8 (SmoothQuant calibration) is the same code path for every architecture and costs
    // most of the time: the weight-only formats cover the new weight layouts.
    for (const char* precision : {"bf16", "int8-wo"}) {
      const std::string path = (dir_ / (preset + "-" + precision + ".ferry")).string();
      engine::BuildOptions bo;
      bo.tune = false;
      bo.precision = *ParsePrecision(precision);
      auto built = engine::BuildEngine(dir.string(), path, bo);
      ASSERT_TRUE(built.ok()) << precision << ": " << built.status().ToString();
      auto pe = engine::Engine::Load(path);
      ASSERT_TRUE(pe.ok()) << pe.status().ToString();
      auto ph = testing::DecoderHarness::Create(*pe, 1, 128);
      ASSERT_NE(ph, nullptr);
      auto got = ph->Step({{1, ids, 0, false}});
      ASSERT_TRUE(got.ok());
      err = 0;
      for (int v = 0; v < vocab; ++v) err = std::max(err, static_cast<double>(std::fabs(got->data<float>()[v] - ref[v])));
      EXPECT_LE(err, 0.2 * scale) << precision;
    }
  }
}


// XLM-RoBERTa's layout (roberta. prefix, a position table two rows longer than the usable
// length, the classifier.dense / out_proj head): it loads, takes exactly 128 tokens, a batch
// gives each input's logits, and an engine file gives the checkpoint's.
TEST_F(CheckpointMakerTest, XlmRobertaClassifierLoadsAndClassifies) {
  CheckpointSpec spec;
  spec.preset = "xlmr-test";
  spec.dtype = DType::kF32;
  ASSERT_TRUE(MakeCheckpoint(spec, dir_.string()).ok());
  auto e = engine::Engine::Load(dir_.string());
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ((*e)->config().position_offset, 2);
  EXPECT_EQ((*e)->config().max_position_embeddings, 128);
  std::vector<engine::EncodedInput> inputs(3);
  for (int i = 0; i < 128; ++i) inputs[0].ids.push_back(i == 0 ? 0 : i == 127 ? 2 : 5 + (i * 13) % 500);
  inputs[1].ids = {0, 17, 99, 2};
  inputs[2].ids = {0, 3, 2};
  for (auto& in : inputs) in.type_ids.assign(in.ids.size(), 0);
  auto batch = engine::Classify(**e, inputs);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto alone = engine::Classify(**e, {inputs[i]});
    ASSERT_TRUE(alone.ok());
    for (int l = 0; l < 2; ++l) EXPECT_NEAR(batch->data<float>()[i * 2 + l], alone->data<float>()[l], 1e-5) << i;
  }
  engine::EncodedInput too_long = inputs[0];
  too_long.ids.push_back(2);
  too_long.type_ids.push_back(0);
  EXPECT_FALSE(engine::Classify(**e, {too_long}).ok());
  const std::string path = (dir_ / "xlmr.ferry").string();
  engine::BuildOptions bo;
  bo.tune = false;
  ASSERT_TRUE(engine::BuildEngine(dir_.string(), path, bo).ok());
  auto built = engine::Engine::Load(path);
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  auto again = engine::Classify(**built, inputs);
  ASSERT_TRUE(again.ok());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(again->data<float>()[i], batch->data<float>()[i]);
}

}  // namespace
}  // namespace ferry::tools
