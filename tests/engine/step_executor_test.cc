// The step executor's graph policy on a backend without graphs (the CPU): the batch buckets
// that get recordings, and that asking for graphs changes nothing where there are none.
#include "engine/step_executor.h"

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "engine/generator.h"
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
  RunnerOptions ro;
  ro.max_batch_seqs = 4;
  ro.max_seq_len = 64;
  auto r = DecoderRunner::Create(*e, ro);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  StepExecutor& ex = (*r)->executor();
  EXPECT_EQ(ex.graph_options().max_batch, 0);
  const std::vector<int32_t> ids = {5, 6, 7, 8};
  ASSERT_TRUE(ex.Step({{1, ids, 0, false}}).ok());
  auto decode = ex.Step({{1, std::span<const int32_t>(ids.data(), 1), 4, false}});
  ASSERT_TRUE(decode.ok()) << decode.status().ToString();
  EXPECT_EQ(decode->dim(0), 1);
  EXPECT_EQ(ex.graphed_steps(), 0);
  EXPECT_EQ((*e)->backend().graph_count(), 0);
  // Sampling on the device is the GPU's: the CPU backend says so instead of guessing.
  std::vector<backend::TokenSampling> greedy(1);
  greedy[0].temperature = 0.0f;
  auto sampled = ex.StepAndSample({{1, std::span<const int32_t>(ids.data() + 1, 1), 5, false}}, greedy);
  EXPECT_EQ(sampled.status().code(), StatusCode::kUnimplemented) << sampled.status().ToString();
  EXPECT_EQ(ex.StepAndSample({{1, std::span<const int32_t>(ids.data() + 2, 1), 6, true}}, greedy).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ferry::engine
