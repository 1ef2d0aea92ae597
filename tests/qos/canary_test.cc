#include "qos/canary.h"

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "test_util.h"

namespace ferry::qos {
namespace {

using namespace std::chrono_literals;

TEST(CanaryTest, TokenAgreementAndCosine) {
  const std::vector<int32_t> ref = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(TokenAgreement(ref, std::vector<int32_t>{1, 2, 3, 4}), 1.0);
  EXPECT_DOUBLE_EQ(TokenAgreement(ref, std::vector<int32_t>{1, 9, 3, 9}), 0.5);
  EXPECT_DOUBLE_EQ(TokenAgreement(ref, std::vector<int32_t>{1, 2}), 1.0);  // the shorter length
  EXPECT_DOUBLE_EQ(TokenAgreement(ref, {}), 0.0);
  const std::vector<float> a = {1, 0, 0}, b = {0, 1, 0}, c = {2, 0, 0}, zero = {0, 0, 0};
  EXPECT_NEAR(CosineSimilarity(a, c), 1.0, 1e-12);
  EXPECT_NEAR(CosineSimilarity(a, b), 0.0, 1e-12);
  EXPECT_EQ(CosineSimilarity(a, zero), 0.0);
  EXPECT_EQ(CosineSimilarity(a, std::vector<float>{1, 0}), 0.0);
}

// Through a real batcher on the demo decoder: the model agrees with its own greedy output
// everywhere, and not with a made-up continuation; the probe times real work.
class CanaryBatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto e = engine::Engine::Load(testing::SourcePath("models/demo/kjv-decoder"), engine::EngineOptions{2, true});
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = *e;
    sched::EngineCoreOptions o;
    o.batching.max_num_seqs = 4;
    o.batching.max_num_batched_tokens = 64;  // the scoring pass is prefilled in chunks
    o.batching.max_seq_len = 128;
    auto core = sched::EngineCore::Create("canary", engine_, o);
    ASSERT_TRUE(core.ok()) << core.status().ToString();
    core_ = std::move(core).value();
    batcher_ = std::make_unique<sched::ContinuousBatcher>(*core_);
    ASSERT_TRUE(batcher_->Start().ok());
  }
  void TearDown() override {
    if (batcher_) batcher_->Stop(0ms);
  }
  std::shared_ptr<engine::Engine> engine_;
  std::unique_ptr<sched::EngineCore> core_;
  std::unique_ptr<sched::ContinuousBatcher> batcher_;
};

TEST_F(CanaryBatcherTest, AVariantAgreesWithItsOwnGreedyOutput) {
  auto prompt = engine_->EncodePrompt("And God said, Let there be light: and there was light. And God saw the light,");
  ASSERT_TRUE(prompt.ok());
  Result<std::vector<int32_t>> ref = GreedyReference(*batcher_, *prompt, 24, 60s);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  ASSERT_EQ(ref->size(), 24u);
  Result<double> self = TeacherForcedAgreement(*batcher_, *prompt, *ref, 60s);
  ASSERT_TRUE(self.ok()) << self.status().ToString();
  EXPECT_DOUBLE_EQ(*self, 1.0);
  // A continuation the model would not produce: ids that are never its greedy choice
  // (each is shifted away from what it predicted).
  std::vector<int32_t> wrong = *ref;
  for (int32_t& t : wrong) t = (t + 17) % engine_->config().vocab_size;
  Result<double> other = TeacherForcedAgreement(*batcher_, *prompt, wrong, 60s);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_LT(*other, 0.5);
  EXPECT_FALSE(GreedyReference(*batcher_, {}, 4, 60s).ok());
}

TEST_F(CanaryBatcherTest, ProbeTimesRealWork) {
  Result<double> small = ProbeSeconds(*batcher_, engine_->config().vocab_size, 1, 8, 2, 60s);
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  Result<double> big = ProbeSeconds(*batcher_, engine_->config().vocab_size, 4, 32, 24, 60s);
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_GT(*small, 0.0);
  EXPECT_GT(*big, *small);  // 48x the decode tokens
  EXPECT_FALSE(ProbeSeconds(*batcher_, 0, 1, 1, 1, 60s).ok());
}

}  // namespace
}  // namespace ferry::qos
