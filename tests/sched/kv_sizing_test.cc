// The KV cache of a real engine core on the CPU sized from a host memory budget: the
// default without one, fewer sequences when the budget is tight, a refusal naming the
// sizes when it cannot hold one sequence.
#include "sched/kv_sizing.h"

#include <gtest/gtest.h>

#include "sched/engine_core.h"
#include "test_util.h"

namespace ferry::sched {
namespace {

class KvSizingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto e = engine::Engine::Load(testing::SourcePath("models/demo/kjv-decoder"), engine::EngineOptions{2, true});
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = e.value();
  }
  static void TearDownTestSuite() { engine_.reset(); }

  static EngineCoreOptions Options(int64_t budget) {
    EngineCoreOptions o;
    o.batching.max_num_seqs = 4;
    o.batching.max_num_batched_tokens = 64;
    o.batching.max_seq_len = 128;
    o.host_memory_budget_bytes = budget;
    return o;
  }
  // One block of the demo model's f32 cache: K and V, every layer.
  static int64_t BlockBytes() {
    const io::ModelConfig& c = engine_->config();
    return 2ll * c.num_layers * c.num_kv_heads * 16 * c.head_dim * 4;
  }
  static int64_t Fixed(const EngineCoreOptions& o) {
    return static_cast<int64_t>(engine_->load_stats().weight_bytes) +
           EstimateActivationBytes(engine_->config(), o.batching, 4);
  }

  static std::shared_ptr<engine::Engine> engine_;
};

std::shared_ptr<engine::Engine> KvSizingTest::engine_;

TEST_F(KvSizingTest, WeightBytesAreCountedAtLoad) {
  // Every tensor the model read, once: about the size of the checkpoint file.
  EXPECT_GT(engine_->load_stats().weight_bytes, 13'000'000u);
}

TEST_F(KvSizingTest, NoBudgetHoldsMaxNumSeqsSequences) {
  auto core = EngineCore::Create("kjv", engine_, Options(0));
  ASSERT_TRUE(core.ok()) << core.status().ToString();
  EXPECT_EQ((*core)->cache().num_blocks(), 4 * (128 / 16));
}

TEST_F(KvSizingTest, AmpleBudgetStillHoldsMaxNumSeqsSequences) {
  auto core = EngineCore::Create("kjv", engine_, Options(int64_t{64} << 30));
  ASSERT_TRUE(core.ok()) << core.status().ToString();
  EXPECT_EQ((*core)->cache().num_blocks(), 4 * (128 / 16));
}

TEST_F(KvSizingTest, TightBudgetGetsTheBlocksItLeaves) {
  EngineCoreOptions o = Options(0);
  o.host_memory_budget_bytes = Fixed(o) + 11 * BlockBytes() + 100;  // one sequence and 3 blocks
  auto core = EngineCore::Create("kjv", engine_, o);
  ASSERT_TRUE(core.ok()) << core.status().ToString();
  EXPECT_EQ((*core)->cache().num_blocks(), 11);
  // The smaller cache still serves a full-length request.
  GenerationRequest r;
  r.prompt = std::vector<int32_t>(100, 5);
  r.max_tokens = 20;
  r.ignore_eos = true;
  auto out = GenerateAll(**core, {r});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE((*out)[0].error.ok());
  EXPECT_EQ((*out)[0].tokens.size(), 20u);
}

TEST_F(KvSizingTest, BudgetBelowOneSequenceIsRefusedBeforeAllocating) {
  EngineCoreOptions o = Options(0);
  o.host_memory_budget_bytes = Fixed(o) + 7 * BlockBytes();  // a sequence needs 8 blocks
  auto core = EngineCore::Create("kjv", engine_, o);
  ASSERT_EQ(core.status().code(), StatusCode::kResourceExhausted) << core.status().ToString();
  const std::string m = core.status().message();
  EXPECT_NE(m.find("model 'kjv' on cpu does not fit"), std::string::npos) << m;
  EXPECT_NE(m.find("host_memory_budget_bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("one sequence of 128 tokens needs"), std::string::npos) << m;
  EXPECT_NE(m.find("(8 blocks of 64 KiB)"), std::string::npos) << m;
}

}  // namespace
}  // namespace ferry::sched

namespace ferry::sched {
namespace {

TEST(KvPrecheckTest, HostWeightsOverTheBudgetAreRefusedBeforeLoading) {
  KvSizingOptions o;
  o.host_memory_budget_bytes = 1 << 20;  // the demo checkpoint is 13 MB
  const Status s =
      PrecheckMemoryBudget("kjv", testing::SourcePath("models/demo/kjv-decoder"), DeviceSpec::Cpu(), o);
  ASSERT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("exceed its host_memory_budget_bytes of 1.0 MiB"), std::string::npos) << s.message();
  o.host_memory_budget_bytes = int64_t{1} << 30;
  EXPECT_TRUE(PrecheckMemoryBudget("kjv", testing::SourcePath("models/demo/kjv-decoder"), DeviceSpec::Cpu(), o).ok());
  // No budget: nothing to check.
  EXPECT_TRUE(PrecheckMemoryBudget("kjv", "/nonexistent", DeviceSpec::Cpu(), KvSizingOptions{}).ok());
}

}  // namespace
}  // namespace ferry::sched
