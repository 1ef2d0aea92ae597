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
  // Medians of the timed runs, with their spread.
  EXPECT_EQ(r->prefill_tokens_per_s_runs.runs, 2);
  EXPECT_LE(r->prefill_tokens_per_s_runs.min, r->prefill_tokens_per_s);
  EXPECT_GE(r->prefill_tokens_per_s_runs.max, r->prefill_tokens_per_s);
  ASSERT_EQ(r->decode_tokens_per_s_runs.size(), 2u);
  EXPECT_EQ(r->decode_tokens_per_s_runs[1].median, r->decode_tokens_per_s[1].second);
}

// The serving mix keeps every slot busy: each step carries all `batch` sequences (finished
// ones replaced at once), each of them yields a token (a decode row, or a prompt's first
// token), and the prompts that arrived are computed alongside the decode rows.
TEST(ModelBenchTest, ServingMixKeepsTheBatchFullAndPrefillsTheArrivals) {
  auto e = engine::Engine::Load(testing::FixturePath("models/llama3-tiny"));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ModelBenchOptions o;
  o.prompt_len = 16;
  o.decode_batches = {4};
  o.decode_context = 8;
  o.decode_steps = 2;
  o.repeats = 1;
  o.mix_prompt_len = 10;
  o.mix_output_len = 5;
  auto r = BenchModel(*e, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->mix.size(), 1u);
  const MixResult& m = r->mix[0];
  EXPECT_EQ(m.batch, 4);
  EXPECT_DOUBLE_EQ(m.seqs_per_step, 4.0);
  // Over 5 steps each of the 4 slots finishes about once: about 4 prompts of 10 tokens join
  // 5 steps of 4 rows each, so a step computes well over its 4 decode rows.
  EXPECT_GT(m.tokens_per_step, 4.0 + 4.0 * 10 / 5 / 2);
  EXPECT_LE(m.tokens_per_step, 4.0 * 10);
  EXPECT_GT(m.step_ms, 0);
  EXPECT_NEAR(m.output_tokens_per_s.median, 4 * 1e3 / m.step_ms, 1e-6 * m.output_tokens_per_s.median);
  o.mix_output_len = 0;
  EXPECT_FALSE(BenchModel(*e, o).ok());
}

TEST(ModelBenchTest, EncodersTakeTheirBatchAndSequenceLength) {
  auto e = engine::Engine::Load(testing::FixturePath("models/bert-tiny"));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ModelBenchOptions o;
  o.encoder_batch = 3;
  o.encoder_seq_len = 20;
  o.repeats = 3;
  auto r = BenchModel(*e, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->encoder_sequences_per_s_runs.runs, 3);
  EXPECT_GT(r->encoder_sequences_per_s, 0);
  EXPECT_LE(r->encoder_sequences_per_s_runs.min, r->encoder_sequences_per_s);
  o.encoder_seq_len = 0;
  EXPECT_FALSE(BenchModel(*e, o).ok());
}

TEST(ModelBenchTest, SpreadIsMedianAndRange) {
  const Spread odd = SpreadOf({5, 1, 3});
  EXPECT_EQ(odd.median, 3);
  EXPECT_EQ(odd.min, 1);
  EXPECT_EQ(odd.max, 5);
  EXPECT_EQ(odd.runs, 3);
  EXPECT_EQ(SpreadOf({4, 1, 2, 3}).median, 2.5);
  EXPECT_EQ(SpreadOf({}).runs, 0);
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
