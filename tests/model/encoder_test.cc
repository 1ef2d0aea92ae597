// bert-tiny against Hugging Face's references: logits, hidden states, pooler, and the
// padded batch (padding removed by packing sequences back to back).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/precision.h"
#include "engine/engine.h"
#include "engine/encoder_runner.h"
#include "engine/engine_builder.h"
#include "io/safetensors.h"
#include "kernels/cpu/amx_gemm.h"
#include "kernels/cpu/gemv.h"
#include "test_util.h"

namespace ferry {
namespace {

using testing::MaxAbs;
using testing::MaxDiff;
using testing::ToFloats;
using testing::ToIds;

class BertTinyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FixturePath("models/bert-tiny");
    auto e = engine::Engine::Load(dir_);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = *e;
    auto ref = io::SafetensorsFile::Open(dir_ + "/reference.safetensors");
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    ref_ = *ref;
    std::ifstream in(dir_ + "/reference.json");
    json_ = nlohmann::json::parse(in);
  }
  std::string dir_;
  std::shared_ptr<engine::Engine> engine_;
  std::shared_ptr<io::SafetensorsFile> ref_;
  nlohmann::json json_;
};

TEST_F(BertTinyTest, PerInputLogitsHiddenAndPoolerMatch) {
  const int64_t H = engine_->config().hidden_size;
  for (const auto& input : json_["inputs"]) {
    const std::string key = "i" + std::to_string(input["index"].get<int>());
    engine::EncodedInput in{ToIds(ref_->Get(key + ".input_ids").value()),
                            ToIds(ref_->Get(key + ".token_type_ids").value())};
    // The tokenizer must produce exactly the reference ids (with [CLS]/[SEP] and type ids).
    std::optional<std::string_view> pair;
    std::string pair_text;
    if (!input["text_pair"].is_null()) {
      pair_text = input["text_pair"].get<std::string>();
      pair = pair_text;
    }
    auto enc = engine_->tokenizer()->EncodeWithSpecial(input["text"].get<std::string>(), pair);
    ASSERT_TRUE(enc.ok());
    EXPECT_EQ(enc->ids, in.ids) << key;
    EXPECT_EQ(enc->type_ids, in.type_ids) << key;

    auto logits = engine::Classify(*engine_, {in});
    ASSERT_TRUE(logits.ok()) << logits.status().ToString();
    const std::vector<float> ref_logits = ToFloats(ref_->Get(key + ".logits").value());
    EXPECT_LE(MaxDiff(logits->data<float>(), ref_logits.data(), ref_logits.size()), 1e-3 * MaxAbs(ref_logits)) << key;

    const std::vector<float> ref_hidden = ToFloats(ref_->Get(key + ".last_hidden_state").value());
    auto cls = engine::Embed(*engine_, {in}, engine::Pooling::kCls, false);
    ASSERT_TRUE(cls.ok());
    EXPECT_LE(MaxDiff(cls->data<float>(), ref_hidden.data(), H), 1e-3 * MaxAbs(ref_hidden)) << key;
    // Mean pooling of the hidden states, computed from the reference.
    std::vector<float> mean(H, 0.0f);
    const int64_t len = static_cast<int64_t>(in.ids.size());
    for (int64_t t = 0; t < len; ++t)
      for (int64_t j = 0; j < H; ++j) mean[j] += ref_hidden[t * H + j] / static_cast<float>(len);
    auto mean_got = engine::Embed(*engine_, {in}, engine::Pooling::kMean, false);
    ASSERT_TRUE(mean_got.ok());
    EXPECT_LE(MaxDiff(mean_got->data<float>(), mean.data(), H), 1e-3 * MaxAbs(ref_hidden)) << key;
  }
}

TEST_F(BertTinyTest, PoolerOutputMatches) {
  const std::string key = "i0";
  engine::EncodedInput in{ToIds(ref_->Get(key + ".input_ids").value()),
                          ToIds(ref_->Get(key + ".token_type_ids").value())};
  model::EncoderBatch b;
  b.token_ids = in.ids;
  b.type_ids = in.type_ids;
  for (size_t i = 0; i < in.ids.size(); ++i) b.positions.push_back(static_cast<int32_t>(i));
  backend::SeqSpan span;
  span.q_len = static_cast<int32_t>(in.ids.size());
  span.context_len = span.q_len;
  b.spans.push_back(span);
  model::EncoderOutput out;
  ASSERT_TRUE(engine_->encoder()->Forward(b, out).ok());
  const std::vector<float> ref_pooler = ToFloats(ref_->Get(key + ".pooler_output").value());
  EXPECT_LE(MaxDiff(out.pooled.data<float>(), ref_pooler.data(), ref_pooler.size()), 1e-3 * MaxAbs(ref_pooler));
  const std::vector<float> ref_hidden = ToFloats(ref_->Get(key + ".last_hidden_state").value());
  EXPECT_LE(MaxDiff(out.hidden.data<float>(), ref_hidden.data(), ref_hidden.size()), 1e-3 * MaxAbs(ref_hidden));
}

TEST_F(BertTinyTest, PaddedBatchMatches) {
  const Tensor ids = ref_->Get("batch.input_ids").value();
  const Tensor mask = ref_->Get("batch.attention_mask").value();
  const std::vector<float> ref_logits = ToFloats(ref_->Get("batch.logits").value());
  const int64_t rows = ids.dim(0), cols = ids.dim(1);
  std::vector<engine::EncodedInput> inputs(rows);
  const std::vector<int32_t> all_ids = ToIds(ids);
  const Tensor mask32 = mask.dtype() == DType::kI32 ? mask : mask.ToF32();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const bool keep = mask.dtype() == DType::kI32 ? mask.data<int32_t>()[r * cols + c] != 0
                                                     : mask32.data<float>()[r * cols + c] != 0.0f;
      if (keep) inputs[r].ids.push_back(all_ids[r * cols + c]);
    }
    inputs[r].type_ids.assign(inputs[r].ids.size(), 0);
  }
  auto logits = engine::Classify(*engine_, inputs);
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  EXPECT_LE(MaxDiff(logits->data<float>(), ref_logits.data(), ref_logits.size()), 1e-3 * MaxAbs(ref_logits));
}

// A bf16 engine of bert-tiny loaded with bf16 CPU activations (EngineOptions::cpu_activations):
// its GEMMs past the decode rows round x to bf16 on vdpbf16ps where the CPU has AVX512-BF16,
// and its attention may multiply in bf16 (Backend::RoundsInputToBf16; bert-tiny's 16-wide
// heads keep f32). The padded batch's logits stay within the bf16 engine's bound of the
// float64 reference, and differ from the f32-activation ones where the route ran.
TEST_F(BertTinyTest, Bf16EngineWithBf16ActivationsStaysNearTheReference) {
  const std::string path = ::testing::TempDir() + "/bert-bf16-" + std::to_string(::getpid()) + ".ferry";
  engine::BuildOptions bo;
  bo.tune = false;
  bo.precision = *ParsePrecision("bf16");
  ASSERT_TRUE(engine::BuildEngine(dir_, path, bo).ok());
  auto f32 = engine::Engine::Load(path);
  engine::EngineOptions eo;
  eo.cpu_activations = DType::kBF16;
  auto bf16 = engine::Engine::Load(path, eo);
  std::filesystem::remove(path);
  ASSERT_TRUE(f32.ok() && bf16.ok());
  const Tensor ids = ref_->Get("batch.input_ids").value();
  const std::vector<int32_t> all_ids = ToIds(ids);
  const std::vector<int32_t> keep = ToIds(ref_->Get("batch.attention_mask").value());
  const int64_t rows = ids.dim(0), cols = ids.dim(1);
  std::vector<engine::EncodedInput> inputs(rows);
  int64_t tokens = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      if (keep[r * cols + c] != 0) inputs[r].ids.push_back(all_ids[r * cols + c]);
    }
    inputs[r].type_ids.assign(inputs[r].ids.size(), 0);
    tokens += static_cast<int64_t>(inputs[r].ids.size());
  }
  const std::vector<float> ref_logits = ToFloats(ref_->Get("batch.logits").value());
  auto got = engine::Classify(**bf16, inputs);
  auto f32_got = engine::Classify(**f32, inputs);
  ASSERT_TRUE(got.ok() && f32_got.ok());
  const size_t n = ref_logits.size();
  EXPECT_LE(MaxDiff(got->data<float>(), ref_logits.data(), n), 4e-2 * MaxAbs(ref_logits));
  if (kernels::cpu::Bf16DotSupported() && !kernels::cpu::AmxEnabled() && tokens > kernels::cpu::kGemvMaxRows) {
    EXPECT_NE(0, std::memcmp(got->raw(), f32_got->raw(), n * sizeof(float))) << "the vdpbf16ps route did not run";
  }
}

// Max and last-token pooling against the reference hidden states.
TEST_F(BertTinyTest, MaxAndLastTokenPoolingMatch) {
  const int64_t H = engine_->config().hidden_size;
  engine::EncodedInput in{ToIds(ref_->Get("i0.input_ids").value()), ToIds(ref_->Get("i0.token_type_ids").value())};
  const std::vector<float> hidden = ToFloats(ref_->Get("i0.last_hidden_state").value());
  const int64_t len = static_cast<int64_t>(in.ids.size());
  std::vector<float> max(hidden.begin(), hidden.begin() + H);
  for (int64_t t = 1; t < len; ++t)
    for (int64_t j = 0; j < H; ++j) max[j] = std::max(max[j], hidden[t * H + j]);
  auto got_max = engine::Embed(*engine_, {in}, engine::Pooling::kMax, false);
  auto got_last = engine::Embed(*engine_, {in, in}, engine::Pooling::kLast, false);
  ASSERT_TRUE(got_max.ok() && got_last.ok());
  EXPECT_LE(MaxDiff(got_max->data<float>(), max.data(), H), 1e-3 * MaxAbs(hidden));
  EXPECT_LE(MaxDiff(got_last->data<float>() + H, hidden.data() + (len - 1) * H, H), 1e-3 * MaxAbs(hidden));
}

// bert-tiny's weights as a BertForTokenClassification: the same classifier on every row of
// the reference hidden states. From the checkpoint and from an engine file built from it.
TEST_F(BertTinyTest, TokenClassificationHeadScoresEveryToken) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ferry_token_head_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const char* name : {"model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt"}) {
    fs::copy_file(fs::path(dir_) / name, dir / name, fs::copy_options::overwrite_existing);
  }
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir_ + "/config.json"));
  config["architectures"] = {"BertForTokenClassification"};
  std::ofstream(dir / "config.json") << config.dump();
  auto weights = io::SafetensorsFile::Open(dir_ + "/model.safetensors");
  ASSERT_TRUE(weights.ok());
  const std::vector<float> w = ToFloats((*weights)->Get("classifier.weight").value());
  const std::vector<float> bias = ToFloats((*weights)->Get("classifier.bias").value());
  const int64_t H = engine_->config().hidden_size;
  const int64_t L = static_cast<int64_t>(bias.size());

  engine::EncodedInput in{ToIds(ref_->Get("i1.input_ids").value()), ToIds(ref_->Get("i1.token_type_ids").value())};
  const std::vector<float> hidden = ToFloats(ref_->Get("i1.last_hidden_state").value());
  const int64_t len = static_cast<int64_t>(in.ids.size());
  std::vector<float> want(static_cast<size_t>(len * L));
  for (int64_t t = 0; t < len; ++t) {
    for (int64_t k = 0; k < L; ++k) {
      double v = bias[k];
      for (int64_t j = 0; j < H; ++j) v += static_cast<double>(hidden[t * H + j]) * w[k * H + j];
      want[static_cast<size_t>(t * L + k)] = static_cast<float>(v);
    }
  }
  const std::string engine_path = (dir / "token.ferry").string();
  engine::BuildOptions options;
  options.tune = false;
  ASSERT_TRUE(engine::BuildEngine(dir.string(), engine_path, options).ok());
  for (const std::string& path : {dir.string(), engine_path}) {
    auto e = engine::Engine::Load(path);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    ASSERT_TRUE((*e)->encoder()->has_token_classifier()) << path;
    EXPECT_FALSE((*e)->encoder()->has_classifier());
    // Two inputs in one pass: each input's rows in order.
    auto logits = engine::ClassifyTokens(**e, {in, in});
    ASSERT_TRUE(logits.ok()) << logits.status().ToString();
    ASSERT_EQ(logits->dim(0), 2 * len);
    ASSERT_EQ(logits->dim(1), L);
    EXPECT_LE(MaxDiff(logits->data<float>(), want.data(), want.size()), 1e-3 * MaxAbs(want)) << path;
    EXPECT_LE(MaxDiff(logits->data<float>() + len * L, want.data(), want.size()), 1e-3 * MaxAbs(want)) << path;
    EXPECT_FALSE(engine::Classify(**e, {in}).ok());  // no sequence head
  }
  EXPECT_FALSE(engine::ClassifyTokens(*engine_, {in}).ok());  // the sequence classifier has no token head
  fs::remove_all(dir);
}


// XLM-RoBERTa (tests/fixtures/architectures, when there): the Unigram tokenizer's ids with
// <s> A </s></s> B </s>, hidden states and pooler (embedding model) or reranker logits per
// input, positions offset by padding_idx + 1, and the padded batch.
class XlmrFixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = testing::SourcePath("tests/fixtures/architectures/" + GetParam());
    if (!std::filesystem::exists(dir_ + "/reference.safetensors")) {
      GTEST_SKIP() << dir_ << " is not there yet (made by tools/fixtures/architectures.py)";
    }
    auto e = engine::Engine::Load(dir_);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = *e;
    auto ref = io::SafetensorsFile::Open(dir_ + "/reference.safetensors");
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    ref_ = *ref;
    std::ifstream in(dir_ + "/reference.json");
    json_ = nlohmann::json::parse(in);
  }
  std::string dir_;
  std::shared_ptr<engine::Engine> engine_;
  std::shared_ptr<io::SafetensorsFile> ref_;
  nlohmann::json json_;
};

TEST_P(XlmrFixtureTest, TokensHiddenStatesAndHeadsMatch) {
  EXPECT_EQ(engine_->config().position_offset, 2);
  for (const auto& input : json_["inputs"]) {
    const std::string key = "i" + std::to_string(input["index"].get<int>());
    const std::vector<int32_t> ids = ToIds(ref_->Get(key + ".input_ids").value());
    std::optional<std::string_view> pair;
    std::string pair_text;
    if (!input["text_pair"].is_null()) {
      pair_text = input["text_pair"].get<std::string>();
      pair = pair_text;
    }
    auto enc = engine_->tokenizer()->EncodeWithSpecial(input["text"].get<std::string>(), pair);
    ASSERT_TRUE(enc.ok()) << enc.status().ToString();
    EXPECT_EQ(enc->ids, ids) << key;
    EXPECT_EQ(enc->type_ids, std::vector<int32_t>(ids.size(), 0)) << key;

    model::EncoderBatch b;
    b.token_ids = ids;
    b.type_ids.assign(ids.size(), 0);
    for (size_t i = 0; i < ids.size(); ++i) b.positions.push_back(static_cast<int32_t>(i));
    backend::SeqSpan span;
    span.q_len = static_cast<int32_t>(ids.size());
    span.context_len = span.q_len;
    b.spans.push_back(span);
    model::EncoderOutput out;
    ASSERT_TRUE(engine_->encoder()->Forward(b, out).ok());
    const std::vector<float> hidden = ToFloats(ref_->Get(key + ".last_hidden_state").value());
    EXPECT_LE(MaxDiff(out.hidden.data<float>(), hidden.data(), hidden.size()), 1e-3 * MaxAbs(hidden)) << key;
    if (ref_->Has(key + ".pooler_output")) {
      const std::vector<float> pooled = ToFloats(ref_->Get(key + ".pooler_output").value());
      ASSERT_TRUE(out.pooled.defined());
      EXPECT_LE(MaxDiff(out.pooled.data<float>(), pooled.data(), pooled.size()), 1e-3 * MaxAbs(pooled)) << key;
    }
    if (ref_->Has(key + ".logits")) {
      const std::vector<float> logits = ToFloats(ref_->Get(key + ".logits").value());
      auto got = engine::Classify(*engine_, {engine::EncodedInput{ids, std::vector<int32_t>(ids.size(), 0)}});
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_LE(MaxDiff(got->data<float>(), logits.data(), logits.size()), 1e-3 * MaxAbs(logits) + 1e-4) << key;
    }
  }
}

TEST_P(XlmrFixtureTest, PaddedBatchMatches) {
  const Tensor ids = ref_->Get("batch.input_ids").value();
  const Tensor mask = ref_->Get("batch.attention_mask").value();
  const int64_t rows = ids.dim(0), cols = ids.dim(1);
  const std::vector<int32_t> all_ids = ToIds(ids);
  const std::vector<int32_t> keep = ToIds(mask);
  std::vector<engine::EncodedInput> inputs(rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      if (keep[r * cols + c] != 0) inputs[r].ids.push_back(all_ids[r * cols + c]);
    }
    inputs[r].type_ids.assign(inputs[r].ids.size(), 0);
  }
  if (ref_->Has("batch.logits")) {
    const std::vector<float> ref_logits = ToFloats(ref_->Get("batch.logits").value());
    auto logits = engine::Classify(*engine_, inputs);
    ASSERT_TRUE(logits.ok()) << logits.status().ToString();
    EXPECT_LE(MaxDiff(logits->data<float>(), ref_logits.data(), ref_logits.size()), 1e-3 * MaxAbs(ref_logits) + 1e-4);
  }
  // CLS pooling of the batch against each row's first hidden state.
  const std::vector<float> hidden = ToFloats(ref_->Get("batch.last_hidden_state").value());
  const int64_t H = engine_->config().hidden_size;
  auto cls = engine::Embed(*engine_, inputs, engine::Pooling::kCls, false);
  ASSERT_TRUE(cls.ok()) << cls.status().ToString();
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_LE(MaxDiff(cls->data<float>() + r * H, hidden.data() + r * cols * H, H), 1e-3 * MaxAbs(hidden)) << r;
  }
}

TEST_P(XlmrFixtureTest, EngineFileRoundTrip) {
  const std::string path = ::testing::TempDir() + "/xlmr-" + GetParam() + "-" + std::to_string(::getpid()) + ".ferry";
  engine::BuildOptions bo;
  bo.tune = false;
  ASSERT_TRUE(engine::BuildEngine(dir_, path, bo).ok());
  auto built = engine::Engine::Load(path);
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  const std::vector<int32_t> ids = ToIds(ref_->Get("i0.input_ids").value());
  const engine::EncodedInput in{ids, std::vector<int32_t>(ids.size(), 0)};
  auto a = engine::Embed(*engine_, {in}, engine::Pooling::kMean, false);
  auto b = engine::Embed(**built, {in}, engine::Pooling::kMean, false);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int64_t i = 0; i < engine_->config().hidden_size; ++i) EXPECT_EQ(a->data<float>()[i], b->data<float>()[i]);
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, XlmrFixtureTest, ::testing::Values("xlmr-tiny", "xlmr-reranker-tiny"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "xlmr-tiny" ? std::string("embedding") : std::string("reranker");
                         });

}  // namespace
}  // namespace ferry
