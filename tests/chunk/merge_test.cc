#include "chunk/merge.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ferry::chunk {
namespace {

TEST(MergeClassificationTest, OneWindowIsItsOwnResultWhateverTheAggregate) {
  for (ClassifyAggregate a : {ClassifyAggregate::kWeightedMean, ClassifyAggregate::kMeanProbs, ClassifyAggregate::kMax}) {
    const MergedClassification m = MergeClassification({{1.0f, 3.0f}}, {7}, a);
    EXPECT_EQ(m.logits, (std::vector<float>{1.0f, 3.0f}));
    EXPECT_NEAR(m.probs[1], 1.0 / (1.0 + std::exp(-2.0)), 1e-12);
  }
}

TEST(MergeClassificationTest, WeightedMeanWeighsWindowsByTheirContentTokens) {
  // 3 content tokens vote (2, 0), 1 token votes (0, 4): (6 + 0) / 4 = 1.5, (0 + 4) / 4 = 1.
  const MergedClassification m = MergeClassification({{2.0f, 0.0f}, {0.0f, 4.0f}}, {3, 1},
                                                     ClassifyAggregate::kWeightedMean);
  EXPECT_FLOAT_EQ(m.logits[0], 1.5f);
  EXPECT_FLOAT_EQ(m.logits[1], 1.0f);
  EXPECT_NEAR(m.probs[0], 1.0 / (1.0 + std::exp(-0.5)), 1e-7);
}

TEST(MergeClassificationTest, MeanProbsAveragesProbabilitiesAndMaxTakesEachLabelsBest) {
  const std::vector<std::vector<float>> logits = {{0.0f, 0.0f}, {0.0f, std::log(3.0f)}};
  const MergedClassification mean = MergeClassification(logits, {1, 1}, ClassifyAggregate::kMeanProbs);
  EXPECT_NEAR(mean.probs[0], (0.5 + 0.25) / 2, 1e-7);
  EXPECT_NEAR(mean.probs[1], (0.5 + 0.75) / 2, 1e-7);
  const std::vector<double> again = Softmax(mean.logits);  // the logits stand for those probabilities
  EXPECT_NEAR(again[1], mean.probs[1], 1e-7);
  const MergedClassification max = MergeClassification({{1.0f, -2.0f}, {-1.0f, 5.0f}}, {10, 1}, ClassifyAggregate::kMax);
  EXPECT_EQ(max.logits, (std::vector<float>{1.0f, 5.0f}));
}

TEST(MergeEmbeddingsTest, WeightedMeanOrFirst) {
  const std::vector<std::vector<float>> v = {{1.0f, 0.0f}, {0.0f, 1.0f}};
  EXPECT_EQ(MergeEmbeddings(v, {3, 1}, EmbedAggregate::kWeightedMean), (std::vector<float>{0.75f, 0.25f}));
  EXPECT_EQ(MergeEmbeddings(v, {3, 1}, EmbedAggregate::kFirst), (std::vector<float>{1.0f, 0.0f}));
  std::vector<float> u = {3.0f, 4.0f};
  L2Normalize(u);
  EXPECT_FLOAT_EQ(u[0], 0.6f);
  EXPECT_FLOAT_EQ(u[1], 0.8f);
  std::vector<float> zero = {0.0f, 0.0f};
  L2Normalize(zero);
  EXPECT_EQ(zero, (std::vector<float>{0.0f, 0.0f}));
}

}  // namespace
}  // namespace ferry::chunk
