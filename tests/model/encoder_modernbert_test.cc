// ModernBERT (tests/fixtures/architectures/modernbert-tiny, made by
// tools/fixtures/architectures.py with transformers and float64 references; its vocabulary
// trimmed by tools/fixtures/trim_vocab.py): the WordPiece ids, the last hidden states and the
// mean-pooled classifier's logits per input and as a padded batch, with inputs longer than
// the local layers' window, and engine files in several precisions.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "engine/encoder_runner.h"
#include "engine/engine.h"
#include "engine/engine_builder.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace ferry {
namespace {

using testing::MaxAbs;
using testing::MaxDiff;
using testing::ToFloats;
using testing::ToIds;

class ModernBertTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::SourcePath("tests/fixtures/architectures/modernbert-tiny");
    auto e = engine::Engine::Load(dir_);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = *e;
    auto ref = io::SafetensorsFile::Open(dir_ + "/reference.safetensors");
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    ref_ = *ref;
    std::ifstream in(dir_ + "/reference.json");
    json_ = nlohmann::json::parse(in);
  }

  // The tokenizer's encoding of reference input `input` (text and optional pair).
  engine::EncodedInput Encode(const nlohmann::json& input) {
    std::optional<std::string_view> pair;
    std::string pair_text;
    if (!input["text_pair"].is_null()) {
      pair_text = input["text_pair"].get<std::string>();
      pair = pair_text;
    }
    auto enc = engine_->tokenizer()->EncodeWithSpecial(input["text"].get<std::string>(), pair);
    EXPECT_TRUE(enc.ok()) << enc.status().ToString();
    return enc.ok() ? engine::EncodedInput{enc->ids, enc->type_ids} : engine::EncodedInput{};
  }

  // The reference inputs as the padded batch gives them (its rows without the padding).
  std::vector<engine::EncodedInput> BatchInputs() {
    const Tensor ids = ref_->Get("batch.input_ids").value();
    const std::vector<int32_t> all_ids = ToIds(ids);
    const std::vector<int32_t> keep = ToIds(ref_->Get("batch.attention_mask").value());
    const int64_t rows = ids.dim(0), cols = ids.dim(1);
    std::vector<engine::EncodedInput> inputs(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        if (keep[r * cols + c] != 0) inputs[r].ids.push_back(all_ids[r * cols + c]);
      }
    }
    return inputs;
  }

  std::string dir_;
  std::shared_ptr<engine::Engine> engine_;
  std::shared_ptr<io::SafetensorsFile> ref_;
  nlohmann::json json_;
};

TEST_F(ModernBertTest, ConfigHasGlobalAndLocalLayers) {
  const io::ModelConfig& c = engine_->config();
  EXPECT_EQ(c.model_type, "modernbert");
  EXPECT_EQ(c.layer_windows, (std::vector<int>{0, 4, 4}));
  EXPECT_EQ(c.layer_rope_thetas, (std::vector<float>{160000.0f, 10000.0f, 10000.0f}));
  EXPECT_EQ(c.classifier_pooling, "mean");
  EXPECT_TRUE(engine_->encoder()->has_classifier());
  EXPECT_FALSE(engine_->encoder()->has_pooler());
}

// Per input: the tokenizer's ids, the hidden states after final_norm, and the logits (with the
// tokenizer's own type ids, 1 on a pair's second text: ModernBERT ignores them).
TEST_F(ModernBertTest, TokensHiddenStatesAndLogitsMatch) {
  bool longer_than_window = false;
  for (const auto& input : json_["inputs"]) {
    const std::string key = "i" + std::to_string(input["index"].get<int>());
    const std::vector<int32_t> ids = ToIds(ref_->Get(key + ".input_ids").value());
    const engine::EncodedInput enc = Encode(input);
    EXPECT_EQ(enc.ids, ids) << key;
    longer_than_window |= ids.size() > 9;

    model::EncoderBatch b;
    b.token_ids = ids;
    b.type_ids = enc.type_ids.empty() ? std::vector<int32_t>(ids.size(), 0) : enc.type_ids;
    for (size_t i = 0; i < ids.size(); ++i) b.positions.push_back(static_cast<int32_t>(i));
    backend::SeqSpan span;
    span.q_len = static_cast<int32_t>(ids.size());
    span.context_len = span.q_len;
    b.spans.push_back(span);
    model::EncoderOutput out;
    ASSERT_TRUE(engine_->encoder()->Forward(b, out).ok());
    const std::vector<float> hidden = ToFloats(ref_->Get(key + ".last_hidden_state").value());
    ASSERT_EQ(out.hidden.numel(), static_cast<int64_t>(hidden.size()));
    EXPECT_LE(MaxDiff(out.hidden.data<float>(), hidden.data(), hidden.size()), 1e-4 * MaxAbs(hidden)) << key;

    const std::vector<float> logits = ToFloats(ref_->Get(key + ".logits").value());
    auto got = engine::Classify(*engine_, {enc});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->numel(), static_cast<int64_t>(logits.size()));
    EXPECT_LE(MaxDiff(got->data<float>(), logits.data(), logits.size()), 1e-4 * MaxAbs(logits) + 1e-5) << key;
  }
  EXPECT_TRUE(longer_than_window) << "the references should exercise the local window";
}

// The padded batch packed back to back: the batch's logits, and mean pooling of its hidden
// states.
TEST_F(ModernBertTest, PaddedBatchMatches) {
  const std::vector<engine::EncodedInput> inputs = BatchInputs();
  const std::vector<float> ref_logits = ToFloats(ref_->Get("batch.logits").value());
  auto logits = engine::Classify(*engine_, inputs);
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  EXPECT_LE(MaxDiff(logits->data<float>(), ref_logits.data(), ref_logits.size()), 1e-4 * MaxAbs(ref_logits) + 1e-5);

  const Tensor hidden_t = ref_->Get("batch.last_hidden_state").value();
  const std::vector<float> hidden = ToFloats(hidden_t);
  const int64_t cols = hidden_t.dim(1), H = engine_->config().hidden_size;
  auto mean = engine::Embed(*engine_, inputs, engine::Pooling::kMean, false);
  ASSERT_TRUE(mean.ok()) << mean.status().ToString();
  for (size_t r = 0; r < inputs.size(); ++r) {
    const size_t n = inputs[r].ids.size();
    std::vector<float> want(static_cast<size_t>(H), 0.0f);
    for (size_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < H; ++j) want[j] += hidden[(r * cols + t) * H + j] / static_cast<float>(n);
    }
    EXPECT_LE(MaxDiff(mean->data<float>() + r * H, want.data(), want.size()), 1e-4 * MaxAbs(hidden)) << r;
  }
}

TEST_F(ModernBertTest, RejectsTokensOutsideTheVocabulary) {
  const engine::EncodedInput bad{{2, engine_->config().vocab_size, 3}, {}};
  auto r = engine::Classify(*engine_, {bad});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("outside the vocabulary"), std::string::npos) << r.status().ToString();
}

// Engine files: fp32 reproduces the checkpoint exactly; the 16-bit and int8 precisions stay
// within their bounds of the float64 reference logits of the padded batch.
TEST_F(ModernBertTest, EngineFilesInEveryPrecision) {
  const std::vector<engine::EncodedInput> inputs = BatchInputs();
  const std::vector<float> ref_logits = ToFloats(ref_->Get("batch.logits").value());
  auto ckpt = engine::Classify(*engine_, inputs);
  ASSERT_TRUE(ckpt.ok());
  const std::vector<std::pair<std::string, double>> precisions = {
      {"fp32", 1e-4}, {"bf16", 4e-2}, {"fp16", 1e-2}, {"int8-wo", 6e-2}, {"int8", 1.5e-1}};
  for (const auto& [precision, rel] : precisions) {
    const std::string path = ::testing::TempDir() + "/modernbert-" + precision + "-" +
                             std::to_string(::getpid()) + ".ferry";
    engine::BuildOptions bo;
    bo.tune = false;
    bo.precision = *ParsePrecision(precision);
    auto built = engine::BuildEngine(dir_, path, bo);
    ASSERT_TRUE(built.ok()) << precision << ": " << built.status().ToString();
    auto e = engine::Engine::Load(path);
    ASSERT_TRUE(e.ok()) << precision << ": " << e.status().ToString();
    EXPECT_EQ((*e)->config().layer_windows, engine_->config().layer_windows);
    auto got = engine::Classify(**e, inputs);
    ASSERT_TRUE(got.ok()) << precision << ": " << got.status().ToString();
    if (precision == "fp32") {
      for (int64_t i = 0; i < got->numel(); ++i) EXPECT_EQ(got->data<float>()[i], ckpt->data<float>()[i]) << i;
    }
    EXPECT_LE(MaxDiff(got->data<float>(), ref_logits.data(), ref_logits.size()), rel * MaxAbs(ref_logits) + 1e-5)
        << precision;
    std::filesystem::remove(path);
  }
}

}  // namespace
}  // namespace ferry
