// `ferry bench model` through the engine core: every measurement is taken and positive, and
// the decode batch really ran as one batch.
#include "tools/model_bench.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace ferry::tools {
namespace {

TEST(ModelBenchTest, MeasuresPrefillAndEveryDecodeBatch) {
  auto e = engine::Engine::Load(testing::FixturePath("models/llama3-tiny"));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ModelBenchOptions o;
  o.prompt_len = 48;
  o.decode_batches = {1, 3};
  o.decode_context = 12;
  o.decode_steps = 5;
  o.repeats = 2;
  auto r = BenchModel(*e, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->prefill_ms, 0);
  EXPECT_NEAR(r->prefill_tokens_per_s, 48 / (r->prefill_ms / 1e3), 1e-6 * r->prefill_tokens_per_s);
  ASSERT_EQ(r->decode_step_ms.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(r->decode_step_ms[i].first, o.decode_batches[i]);
    EXPECT_GT(r->decode_step_ms[i].second, 0);
    EXPECT_NEAR(r->decode_tokens_per_s[i].second, o.decode_batches[i] / (r->decode_step_ms[i].second / 1e3),
                1e-6 * r->decode_tokens_per_s[i].second);
  }
  EXPECT_FALSE(r->device_sampling);
  EXPECT_GT(r->weight_gb, 0);
}

TEST(ModelBenchTest, RefusesEmptyShapes) {
  auto e = engine::Engine::Load(testing::FixturePath("models/llama3-tiny"));
  ASSERT_TRUE(e.ok());
  ModelBenchOptions o;
  o.decode_steps = 0;
  EXPECT_FALSE(BenchModel(*e, o).ok());
  o = {};
  o.decode_batches.clear();
  EXPECT_FALSE(BenchModel(*e, o).ok());
}

}  // namespace
}  // namespace ferry::tools
