// Quality tools through the engine core: perplexity equals the one computed from the
// logits directly, and comparing a model with itself shows perfect agreement.
#include "tools/evaluation.h"

#include <gtest/gtest.h>

#include <cmath>

#include "decoder_test_util.h"
#include "engine/sampler.h"
#include "test_util.h"

namespace ferry::tools {
namespace {

TEST(EvaluationTest, PerplexityEqualsTheLogitsOwn) {
  auto e = engine::Engine::Load(testing::FixturePath("models/llama3-tiny"));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const int vocab = (*e)->config().vocab_size;
  std::vector<std::vector<int32_t>> docs;
  for (int d = 0; d < 3; ++d) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 23 + 9 * d; ++i) ids.push_back((i * 131 + d * 17 + 5) % vocab);
    docs.push_back(ids);
  }
  const int window = 10;
  auto got = Perplexity(*e, docs, window);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  // The same windows scored from raw logits.
  auto h = testing::DecoderHarness::Create(*e, 1, 64);
  double nll = 0;
  int64_t tokens = 0, windows = 0;
  std::vector<float> lp;
  for (const auto& ids : docs) {
    for (size_t start = 0; start + 1 < ids.size(); start += window) {
      const size_t len = std::min<size_t>(window, ids.size() - 1 - start);
      auto logits = h->Step({{1, std::span<const int32_t>(ids.data() + start, len), 0, true}});
      ASSERT_TRUE(logits.ok());
      h->cache().Free(1);
      for (size_t t = 0; t < len; ++t) {
        engine::Sampler::LogSoftmax(std::span<const float>(logits->data<float>() + t * vocab, vocab), lp);
        nll -= lp[ids[start + t + 1]];
        ++tokens;
      }
      ++windows;
    }
  }
  EXPECT_EQ(got->tokens, tokens);
  EXPECT_EQ(got->windows, windows);
  EXPECT_NEAR(got->nll, nll, 1e-3 * nll);
  EXPECT_NEAR(got->perplexity, std::exp(nll / tokens), 1e-3 * got->perplexity);
}

TEST(EvaluationTest, AModelAgreesWithItself) {
  auto e = engine::Engine::Load(testing::FixturePath("models/qwen2-tiny"));
  ASSERT_TRUE(e.ok());
  const std::vector<std::vector<int32_t>> prompts = {{5, 17, 300, 41}, {9, 8, 7}};
  auto r = CompareDecoders(*e, *e, prompts, 6);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->prompts, 2);
  EXPECT_EQ(r->positions, 2 * 6);
  EXPECT_LE(r->max_abs_error, 1e-5 * r->max_abs_reference);
  EXPECT_EQ(r->teacher_forced_agreement, 1.0);
  EXPECT_EQ(r->mean_prefix_match, 6.0);
}

}  // namespace
}  // namespace ferry::tools
