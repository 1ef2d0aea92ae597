// The bundled demo models against PyTorch's logits for them (exported by
// tools/train_demo/train.py into tests/fixtures/demo).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <thread>

#include "engine/engine.h"
#include "decoder_test_util.h"
#include "chunk/offline.h"
#include "core/thread_pool.h"
#include "engine/encoder_runner.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace ferry {
namespace {

using testing::MaxAbs;
using testing::MaxDiff;
using testing::ToFloats;
using testing::ToIds;

class DemoModelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ref = io::SafetensorsFile::Open(testing::SourcePath("tests/fixtures/demo/reference.safetensors"));
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    ref_ = *ref;
    std::ifstream in(testing::SourcePath("tests/fixtures/demo/reference.json"));
    json_ = nlohmann::json::parse(in);
  }
  std::shared_ptr<io::SafetensorsFile> ref_;
  nlohmann::json json_;
};

TEST_F(DemoModelsTest, DecoderLogitsTokensAndGreedyTextMatchPyTorch) {
  auto e = engine::Engine::Load(testing::SourcePath("models/demo/kjv-decoder"));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto runner = testing::DecoderHarness::Create(*e, 8, std::min(4096, (*e)->config().max_position_embeddings));
  ASSERT_NE(runner, nullptr);
  const int vocab = (*e)->config().vocab_size;
  for (const auto& p : json_["decoder"]["prompts"]) {
    const std::string key = "p" + std::to_string(p["index"].get<int>());
    const std::vector<int32_t> ids = ToIds(ref_->Get(key + ".input_ids").value());
    auto encoded = (*e)->EncodePrompt(p["text"].get<std::string>());
    ASSERT_TRUE(encoded.ok());
    EXPECT_EQ(*encoded, ids) << key;
    auto logits = runner->Step({{1, ids, 0, false}});
    ASSERT_TRUE(logits.ok()) << logits.status().ToString();
    runner->cache().Free(1);
    const std::vector<float> ref = ToFloats(ref_->Get(key + ".last_logits").value());
    const double err = MaxDiff(logits->data<float>(), ref.data(), vocab);
    EXPECT_LE(err, 1e-3 * MaxAbs(ref)) << key;

    auto res = runner->Greedy(ids, 24);
    ASSERT_TRUE(res.ok());
    if (p["min_top2_margin"].get<double>() > 2 * err) {
      EXPECT_EQ(*res, ToIds(ref_->Get(key + ".greedy_ids").value())) << key;
      auto text = (*e)->tokenizer()->Decode(*res);
      ASSERT_TRUE(text.ok());
      EXPECT_EQ(*text, p["greedy_text"].get<std::string>()) << key;
    }
  }
}

TEST_F(DemoModelsTest, ClassifierLogitsMatchPyTorchAloneAndBatched) {
  auto e = engine::Engine::Load(testing::SourcePath("models/demo/kjv-classifier"));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ((*e)->config().id2label.size(), 8u);
  std::vector<engine::EncodedInput> all;
  for (const auto& in : json_["classifier"]["inputs"]) {
    const std::string key = "i" + std::to_string(in["index"].get<int>());
    engine::EncodedInput input{ToIds(ref_->Get(key + ".input_ids").value()),
                               ToIds(ref_->Get(key + ".token_type_ids").value())};
    auto enc = (*e)->tokenizer()->EncodeWithSpecial(in["text"].get<std::string>());
    ASSERT_TRUE(enc.ok());
    EXPECT_EQ(enc->ids, input.ids) << key;
    auto logits = engine::Classify(**e, {input});
    ASSERT_TRUE(logits.ok()) << logits.status().ToString();
    const std::vector<float> ref = ToFloats(ref_->Get(key + ".logits").value());
    EXPECT_LE(MaxDiff(logits->data<float>(), ref.data(), ref.size()), 1e-3 * MaxAbs(ref)) << key;
    const int64_t best = std::max_element(logits->data<float>(), logits->data<float>() + ref.size()) - logits->data<float>();
    EXPECT_EQ((*e)->config().id2label.at(static_cast<int>(best)), in["predicted"].get<std::string>()) << key;
    all.push_back(input);
  }
  auto batched = engine::Classify(**e, all);
  ASSERT_TRUE(batched.ok());
  const std::vector<float> ref = ToFloats(ref_->Get("batch.logits").value());
  EXPECT_LE(MaxDiff(batched->data<float>(), ref.data(), ref.size()), 1e-3 * MaxAbs(ref));
}

// The tagger (when tools/train_demo has trained it and it is in the repository): per-token
// logits against PyTorch's, and the entities of chunk/'s grouping against the pipeline's.
TEST_F(DemoModelsTest, TaggerTokenLogitsAndEntitiesMatchPyTorch) {
  const std::string dir = testing::SourcePath("models/demo/kjv-tagger");
  if (!std::ifstream(dir + "/config.json") || !json_.contains("tagger")) {
    GTEST_SKIP() << "models/demo/kjv-tagger and its references are not in the repository yet";
  }
  auto e = engine::Engine::Load(dir);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_TRUE((*e)->encoder()->has_token_classifier());
  for (const auto& input : json_["tagger"]["inputs"]) {
    const std::string key = "t" + std::to_string(input["index"].get<int>());
    const std::vector<int32_t> ids = ToIds(ref_->Get(key + ".input_ids").value());
    auto enc = (*e)->tokenizer()->EncodeWithSpecial(input["text"].get<std::string>());
    ASSERT_TRUE(enc.ok());
    EXPECT_EQ(enc->ids, ids) << key;
    auto logits = engine::ClassifyTokens(**e, {{enc->ids, enc->type_ids}});
    ASSERT_TRUE(logits.ok()) << logits.status().ToString();
    const std::vector<float> ref = ToFloats(ref_->Get(key + ".logits").value());
    ASSERT_EQ(static_cast<size_t>(logits->numel()), ref.size());
    EXPECT_LE(MaxDiff(logits->data<float>(), ref.data(), ref.size()), 1e-3 * MaxAbs(ref)) << key;
    chunk::OfflineOptions options;
    options.truncation = chunk::Truncation::kEnd;
    auto entities = chunk::TokenClassifyDocument(**e, input["text"].get<std::string>(), options,
                                                 chunk::TokenAggregation::kSimple, chunk::TokenMerge::kCenter);
    ASSERT_TRUE(entities.ok()) << entities.status().ToString();
    const auto& want = input["entities"];
    ASSERT_EQ(entities->entities.size(), want.size()) << key;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(entities->entities[i].label, want[i]["label"]) << key;
      EXPECT_EQ(entities->entities[i].start, want[i]["start"].get<uint32_t>()) << key;
      EXPECT_EQ(entities->entities[i].end, want[i]["end"].get<uint32_t>()) << key;
      EXPECT_NEAR(entities->entities[i].score, want[i]["score"].get<double>(), 1e-4) << key;
    }
  }
}

// A model's `threads` applies on whatever thread runs it: OpenMP's thread count is a per-thread
// setting that a scheduler thread does not inherit from the thread that loaded the engine.
TEST(DemoModelThreadsTest, ThreadsApplyOnTheThreadThatRunsTheModel) {
  engine::EngineOptions o;
  o.threads = 1;
  auto e = engine::Engine::Load(testing::SourcePath("models/demo/kjv-decoder"), o);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  SetComputeThreads(0);  // the loading thread back to all cores
  auto runner = testing::DecoderHarness::Create(*e, 2, 64);
  ASSERT_NE(runner, nullptr);
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  int before = -1, after = -1;
  Status step;
  std::thread t([&] {
    before = ComputeThreads();  // the process default
    step = runner->Step({{1, prompt, 0, false}}).status();
    after = ComputeThreads();
  });
  t.join();
  ASSERT_TRUE(step.ok()) << step.ToString();
  if (before > 1) {
    EXPECT_NE(before, 1);
  }
  EXPECT_EQ(after, 1);
  EXPECT_EQ(ComputeThreads(), before) << "the count is the running thread's own";
}

}  // namespace
}  // namespace ferry
