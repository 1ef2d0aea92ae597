#include "tools/checkpoint_maker.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "engine/encoder_runner.h"
#include "engine/engine.h"
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

}  // namespace
}  // namespace ferry::tools
