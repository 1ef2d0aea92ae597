// Sampler statistics with fixed seeds: the empirical distribution follows the processed
// probabilities, and each processor restricts the support as specified.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

namespace ferry::engine {
namespace {

const std::vector<float> kLogits = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f};

std::vector<double> Softmax(const std::vector<float>& l, float t) {
  std::vector<double> p(l.size());
  double sum = 0;
  for (size_t i = 0; i < l.size(); ++i) sum += p[i] = std::exp(l[i] / t);
  for (double& x : p) x /= sum;
  return p;
}

std::map<int32_t, int> Histogram(const SamplingParams& params, int n, uint64_t seed,
                                 const std::vector<int32_t>& history = {}) {
  Sampler s;
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) ++h[s.Sample(kLogits, params, history, seed, static_cast<uint64_t>(i))];
  return h;
}

TEST(SamplerTest, GreedyIsArgmax) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(s.Sample(kLogits, p, {}, 1, 0), 0);
  EXPECT_EQ(Argmax(std::vector<float>{1, 3, 3, 2}), 1);  // ties go to the lowest id
}

TEST(SamplerTest, EmpiricalFrequenciesFollowSoftmax) {
  for (float t : {0.7f, 1.0f, 1.5f}) {
    SamplingParams p;
    p.temperature = t;
    const int n = 40000;
    auto h = Histogram(p, n, 42);
    const auto probs = Softmax(kLogits, t);
    for (size_t i = 0; i < probs.size(); ++i) {
      const double freq = static_cast<double>(h[static_cast<int32_t>(i)]) / n;
      const double sigma = std::sqrt(probs[i] * (1 - probs[i]) / n);
      EXPECT_NEAR(freq, probs[i], 5 * sigma + 1e-4) << "temperature " << t << " token " << i;
    }
  }
}

TEST(SamplerTest, TopKRestrictsSupportAndRenormalises) {
  SamplingParams p;
  p.top_k = 2;
  const int n = 20000;
  auto h = Histogram(p, n, 7);
  EXPECT_EQ(h.size(), 2u);
  const double expected = std::exp(2.0) / (std::exp(2.0) + std::exp(1.0));
  EXPECT_NEAR(static_cast<double>(h[0]) / n, expected, 0.015);
}

TEST(SamplerTest, TopPKeepsSmallestPrefixReachingMass) {
  const auto probs = Softmax(kLogits, 1.0f);
  SamplingParams p;
  p.top_p = static_cast<float>(probs[0] + probs[1] * 0.5);  // needs tokens 0 and 1
  auto h = Histogram(p, 5000, 9);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_TRUE(h.count(0) && h.count(1));
  p.top_p = static_cast<float>(probs[0] * 0.9);  // token 0 alone suffices
  h = Histogram(p, 1000, 9);
  EXPECT_EQ(h.size(), 1u);
}

TEST(SamplerTest, MinPDropsUnlikelyTokens) {
  const auto probs = Softmax(kLogits, 1.0f);
  SamplingParams p;
  p.min_p = static_cast<float>(probs[2] / probs[0] * 0.99);  // keeps 0, 1, 2
  auto h = Histogram(p, 20000, 11);
  std::set<int32_t> support;
  for (auto& [id, c] : h) support.insert(id);
  EXPECT_EQ(support, (std::set<int32_t>{0, 1, 2}));
}

TEST(SamplerTest, RepetitionPenaltyIsAppliedOncePerDistinctToken) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.5f;  // 2.0 / 2.5 = 0.8 < 1.0: token 1 wins
  Sampler s;
  EXPECT_EQ(s.Sample(kLogits, p, std::vector<int32_t>{0, 0, 0}, 3, 0), 1);
  p.repetition_penalty = 1.5f;  // 2.0 / 1.5 = 1.33 > 1.0 even though 0 repeats (penalised once)
  EXPECT_EQ(s.Sample(kLogits, p, std::vector<int32_t>{0, 0, 0, 0}, 3, 1), 0);
  // Negative logits are multiplied: token 4 (-1) becomes -1.5 and stays below token 3.
  std::vector<float> l = {-1.0f, -1.2f};
  p.repetition_penalty = 1.5f;
  EXPECT_EQ(s.Sample(l, p, std::vector<int32_t>{0}, 3, 2), 1);
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedDiffers) {
  SamplingParams p;
  p.temperature = 1.0f;
  Sampler a, b, c;
  std::vector<int32_t> sa, sb, sc;
  for (uint64_t i = 0; i < 64; ++i) {
    sa.push_back(a.Sample(kLogits, p, {}, 123, i));
    sb.push_back(b.Sample(kLogits, p, {}, 123, i));
    sc.push_back(c.Sample(kLogits, p, {}, 124, i));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
  // The n-th draw is a function of (seed, n) alone: drawing out of order gives the same tokens.
  for (uint64_t i = 64; i-- > 0;) EXPECT_EQ(b.Sample(kLogits, p, {}, 123, i), sa[i]) << i;
}

// Temperatures too small to divide by sample greedily instead of producing NaN (which picked
// the least likely tokens).
TEST(SamplerTest, TinyTemperaturesAreGreedy) {
  Sampler s;
  for (float t : {1e-6f, 1e-9f, 1e-30f, 1e-45f}) {
    SamplingParams p;
    p.temperature = t;
    EXPECT_TRUE(p.greedy()) << t;
    for (uint64_t i = 0; i < 32; ++i) EXPECT_EQ(s.Sample(kLogits, p, {}, 5, i), 0) << t;
  }
  SamplingParams warm;
  warm.temperature = 1e-4f;  // still sampling, and still finite
  EXPECT_FALSE(warm.greedy());
  for (uint64_t i = 0; i < 32; ++i) EXPECT_EQ(s.Sample(kLogits, warm, {}, 5, i), 0);
}

TEST(SamplerTest, UniformDrawsAreUniform) {
  constexpr int kBins = 16, kDraws = 64000;
  std::vector<int> bins(kBins);
  for (uint64_t i = 0; i < kDraws; ++i) {
    const double u = UniformDraw(77, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    ++bins[static_cast<int>(u * kBins)];
  }
  const double expected = static_cast<double>(kDraws) / kBins;
  for (int b = 0; b < kBins; ++b) EXPECT_NEAR(bins[b], expected, 5 * std::sqrt(expected)) << b;
}

TEST(SamplerTest, LogitBiasMovesTheArgmaxAndTheDistribution) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0;
  p.logit_bias = {{4, 100.0f}};
  EXPECT_EQ(s.Sample(kLogits, p, {}, 1, 0), 4);
  p.logit_bias = {{0, -100.0f}};
  EXPECT_EQ(s.Sample(kLogits, p, {}, 1, 0), 1);
  // Sampled: a bias of log(2) on token 1 doubles its weight.
  p = {};
  p.logit_bias = {{1, static_cast<float>(std::log(2.0))}};
  std::vector<float> biased = kLogits;
  biased[1] += static_cast<float>(std::log(2.0));
  const std::vector<double> want = Softmax(biased, 1.0f);
  auto h = Histogram(p, 20000, 7);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(h[i] / 20000.0, want[i], 0.015) << i;
}

TEST(SamplerTest, BannedIdsAreNeverDrawn) {
  Sampler s;
  SamplingParams p;
  const std::vector<int32_t> banned = {0, 2};
  for (uint64_t i = 0; i < 2000; ++i) {
    const int32_t t = s.Sample(kLogits, p, {}, 3, i, banned);
    ASSERT_NE(t, 0);
    ASSERT_NE(t, 2);
  }
  p.temperature = 0;
  EXPECT_EQ(s.Sample(kLogits, p, {}, 3, 0, banned), 1);
}

TEST(SamplerTest, PresenceAndFrequencyPenaltiesCountOnlyTheOutput) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0;
  // Prompt [1, 1, 1], output [0, 0]: token 0 (logit 2.0) loses 2 * 0.6 + 0.3 = 1.5 and falls
  // below token 1 (1.0)? No: 0.5 < 1.0, so token 1 wins; the prompt's 1s are not penalized.
  const std::vector<int32_t> history = {1, 1, 1, 0, 0};
  p.frequency_penalty = 0.6f;
  p.presence_penalty = 0.3f;
  EXPECT_EQ(s.Sample(kLogits, p, history, 0, 2), 1);
  // Negative penalties favour repetition: token 3 (0.0) once in the output, -2 presence.
  p = {};
  p.temperature = 0;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = -0.5f;
  EXPECT_EQ(s.Sample(kLogits, p, std::vector<int32_t>{5, 3}, 0, 1), 3);
  // The same tokens in the prompt only: no effect.
  EXPECT_EQ(s.Sample(kLogits, p, std::vector<int32_t>{5, 3}, 0, 0), 0);
}

TEST(SamplerTest, ValidateRejectsBadParameters) {
  SamplingParams p;
  p.temperature = -0.5f;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.top_p = 0.0f;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.top_k = -1;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.min_p = 1.5f;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.repetition_penalty = 0.0f;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.presence_penalty = 2.5f;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.frequency_penalty = -3.0f;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.logit_bias = {{3, 101.0f}};
  EXPECT_FALSE(p.Validate().ok());
  EXPECT_TRUE(SamplingParams{}.Validate().ok());
}

}  // namespace
}  // namespace ferry::engine

namespace ferry::engine {
namespace {

std::vector<uint64_t> MaskOf(std::initializer_list<int32_t> ids, int32_t vocab) {
  std::vector<uint64_t> m(static_cast<size_t>((vocab + 63) / 64), 0);
  for (int32_t id : ids) m[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
  return m;
}

// A structured-output mask: only its ids are drawn, with their renormalized probabilities;
// greedy picks the best allowed id.
TEST(SamplerTest, AllowedMaskRestrictsTheDraw) {
  const int32_t vocab = static_cast<int32_t>(kLogits.size());
  const std::vector<uint64_t> mask = MaskOf({2, 4}, vocab);
  Sampler s;
  SamplingParams greedy;
  greedy.temperature = 0;
  EXPECT_EQ(s.Sample(kLogits, greedy, {}, 1, 0, {}, mask), 2);
  SamplingParams p;
  const int n = 20000;
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) ++h[s.Sample(kLogits, p, {}, 3, static_cast<uint64_t>(i), {}, mask)];
  ASSERT_EQ(h.size(), 2u);
  const double p2 = std::exp(0.5) / (std::exp(0.5) + std::exp(-1.0));
  EXPECT_NEAR(static_cast<double>(h[2]) / n, p2, 0.02);
  // A bias cannot lift a masked token; a ban still removes an allowed one.
  SamplingParams biased = greedy;
  biased.logit_bias = {{0, 50.0f}};
  EXPECT_EQ(s.Sample(kLogits, biased, {}, 1, 0, {}, mask), 2);
  const std::vector<int32_t> banned = {2};
  EXPECT_EQ(s.Sample(kLogits, greedy, {}, 1, 0, banned, mask), 4);
  // With top-k, the k best allowed ids.
  SamplingParams top1;
  top1.top_k = 1;
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.Sample(kLogits, top1, {}, 5, static_cast<uint64_t>(i), {}, mask), 2);
}

}  // namespace
}  // namespace ferry::engine
