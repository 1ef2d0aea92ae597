// bert-tiny against Hugging Face's references: logits, hidden states, pooler, and the
// padded batch (padding removed by packing sequences back to back).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "engine/engine.h"
#include "engine/encoder_runner.h"
#include "io/safetensors.h"
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

}  // namespace
}  // namespace ferry
