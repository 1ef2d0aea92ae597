// The step executor's graph policy on a backend without graphs (the CPU): the batch buckets
// that get recordings, and that asking for graphs changes nothing where there are none.
#include "engine/step_executor.h"

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "decoder_test_util.h"
#include "test_util.h"

namespace ferry::engine {
namespace {

TEST(GraphBatchBucketsTest, PowersOfTwoThenHalfStepsEndingAtTheLimit) {
  EXPECT_EQ(GraphBatchBuckets(0), (std::vector<int>{}));
  EXPECT_EQ(GraphBatchBuckets(1), (std::vector<int>{1}));
  EXPECT_EQ(GraphBatchBuckets(3), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(GraphBatchBuckets(8), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(GraphBatchBuckets(64), (std::vector<int>{1, 2, 4, 8, 16, 24, 32, 48, 64}));
  EXPECT_EQ(GraphBatchBuckets(100), (std::vector<int>{1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 100}));
  // Sorted and distinct for every limit, so the smallest bucket >= n is a lower_bound.
  for (int max = 1; max <= 600; ++max) {
    const std::vector<int> b = GraphBatchBuckets(max);
    ASSERT_FALSE(b.empty());
    EXPECT_EQ(b.back(), max);
    for (size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]) << max;
  }
}

TEST(StepExecutorTest, GraphsStayOffOnABackendWithoutThem) {
  auto e = Engine::Load(testing::FixturePath("models/llama3-tiny"));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_FALSE((*e)->backend().supports_graphs());
  auto h = testing::DecoderHarness::Create(*e, 4, 64, /*graphs=*/true);
  ASSERT_NE(h, nullptr);
  StepExecutor& ex = h->executor();
  EXPECT_EQ(ex.graph_options().max_batch, 0);
  const std::vector<int32_t> ids = {5, 6, 7, 8};
  ASSERT_TRUE(h->Step({{1, ids, 0, false}}).ok());
  auto decode = h->Step({{1, std::span<const int32_t>(ids.data(), 1), 4, false}});
  ASSERT_TRUE(decode.ok()) << decode.status().ToString();
  EXPECT_EQ(decode->dim(0), 1);
  EXPECT_EQ(ex.graphed_steps(), 0);
  EXPECT_EQ((*e)->backend().graph_count(), 0);
  // The CPU's logits are host memory: it draws on the host, and says it does not on the device.
  EXPECT_FALSE((*e)->backend().samples_on_device());
}

// The KV blocks are the scheduler's to reserve; a step over a sequence without them is
// refused instead of writing outside its blocks.
TEST(StepExecutorTest, UnreservedSequenceIsRefused) {
  auto e = Engine::Load(testing::FixturePath("models/llama3-tiny"));
  ASSERT_TRUE(e.ok());
  auto h = testing::DecoderHarness::Create(*e, 2, 64);
  const std::vector<int32_t> ids = {5, 6, 7, 8};
  SeqStep s;
  s.seq_id = 3;
  s.tokens = ids;
  s.start_pos = 14;  // positions 14..17: two blocks of 16
  s.sample = true;
  EXPECT_EQ(h->executor().Step({s}).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(h->cache().Reserve(3, 16).ok());  // one block: too few
  EXPECT_EQ(h->executor().Step({s}).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(h->cache().Reserve(3, 18).ok());
  EXPECT_TRUE(h->executor().Step({s}).ok());
}

// One step returns what each sequence asked for: a sampled token, its log-probability and
// top k, the prompt targets' log-probabilities, the logits — all equal to what the logits say.
TEST(StepExecutorTest, TokensAndLogprobsFollowTheLogits) {
  auto e = Engine::Load(testing::FixturePath("models/llama3-tiny"));
  ASSERT_TRUE(e.ok());
  const int vocab = (*e)->config().vocab_size;
  auto h = testing::DecoderHarness::Create(*e, 4, 64);
  const std::vector<int32_t> a = {5, 6, 7, 8, 9, 10};
  const std::vector<int32_t> b = {40, 41, 42};
  auto logits = h->Step({{1, a, 0, true}, {2, b, 0, false}});  // reference rows: 6 for a, 1 for b
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  h->cache().Free(1);
  h->cache().Free(2);
  ASSERT_EQ(logits->dim(0), 7);

  std::vector<SeqStep> steps(2);
  steps[0].seq_id = 11;
  steps[0].tokens = a;
  steps[0].targets = std::span<const int32_t>(a.data() + 1, a.size() - 1);  // row q scores a[q + 1]
  steps[0].top_logprobs = 3;
  steps[0].sample = true;
  steps[0].logprobs = 2;
  steps[0].sampling.temperature = 0;
  steps[1].seq_id = 12;
  steps[1].tokens = b;
  steps[1].sample = true;
  steps[1].keep_logits = true;
  steps[1].sampling.temperature = 0;
  ASSERT_TRUE(h->cache().Reserve(11, 6).ok());
  ASSERT_TRUE(h->cache().Reserve(12, 3).ok());
  auto out = h->executor().Step(steps);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), 2u);
  const float* rows = logits->data<float>();
  std::vector<float> lp;
  for (size_t q = 0; q + 1 < a.size(); ++q) {
    Sampler::LogSoftmax(std::span<const float>(rows + q * vocab, vocab), lp);
    const TokenOutput& t = (*out)[0].targets.at(q);
    EXPECT_EQ(t.token, a[q + 1]);
    EXPECT_NEAR(t.logprob, lp[a[q + 1]], 1e-4) << q;
    ASSERT_EQ(t.top_logprobs.size(), 3u);
    EXPECT_EQ(t.top_logprobs[0].first, Argmax(std::span<const float>(rows + q * vocab, vocab)));
  }
  const std::span<const float> last_a(rows + 5 * vocab, vocab);
  EXPECT_EQ((*out)[0].token, Argmax(last_a));
  EXPECT_TRUE((*out)[0].finite);
  ASSERT_EQ((*out)[0].sampled.top_logprobs.size(), 2u);
  EXPECT_EQ((*out)[0].sampled.top_logprobs[0].first, (*out)[0].token);
  EXPECT_TRUE((*out)[0].logits.empty());
  const std::span<const float> last_b(rows + 6 * vocab, vocab);
  EXPECT_EQ((*out)[1].token, Argmax(last_b));
  ASSERT_EQ((*out)[1].logits.size(), static_cast<size_t>(vocab));
  for (int v = 0; v < vocab; ++v) ASSERT_NEAR((*out)[1].logits[v], last_b[v], 1e-4f) << v;
}

}  // namespace
}  // namespace ferry::engine
