#include "kernels/logit_adjust.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ferry::kernels {
namespace {

TEST(LogitAdjustTest, CollectsOneEntryPerIdWithEveryProcessor) {
  // Prompt [3, 5, 5], output [5, 7, 7, 7].
  const std::vector<int32_t> history = {3, 5, 5, 5, 7, 7, 7};
  const std::vector<std::pair<int32_t, float>> bias = {{9, 2.5f}, {3, -1.0f}, {99, 5.0f}};
  const std::vector<int32_t> banned = {1};
  RowPenalties p{history, 4, 1.5f, 0.5f, 0.25f, bias, banned};
  EXPECT_TRUE(NeedsAdjustments(p));
  std::vector<LogitAdjustment> out;
  CollectLogitAdjustments(p, 2, 10, out);  // 99 is outside the vocabulary: ignored
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].id, 1);
  EXPECT_EQ(out[0].flags, kLogitBanned);
  EXPECT_EQ(out[1].id, 3);  // prompt only: repetition penalty and bias, no output penalties
  EXPECT_EQ(out[1].flags, kLogitRepeated);
  EXPECT_EQ(out[1].bias, -1.0f);
  EXPECT_EQ(out[1].subtract, 0.0f);
  EXPECT_EQ(out[2].id, 5);  // once in the output
  EXPECT_EQ(out[2].subtract, 0.25f * 1 + 0.5f);
  EXPECT_EQ(out[3].id, 7);  // three times in the output
  EXPECT_EQ(out[3].subtract, 0.25f * 3 + 0.5f);
  EXPECT_EQ(out[4].id, 9);
  EXPECT_EQ(out[4].flags, 0u);
  EXPECT_EQ(out[4].bias, 2.5f);
  for (const LogitAdjustment& a : out) EXPECT_EQ(a.row, 2);
}

TEST(LogitAdjustTest, AppliesBiasThenRepetitionThenPenalties) {
  LogitAdjustment a;
  a.bias = 1.0f;
  a.repetition = 2.0f;
  a.flags = kLogitRepeated;
  a.subtract = 0.75f;
  EXPECT_EQ(AdjustLogit(3.0f, a), (3.0f + 1.0f) / 2.0f - 0.75f);
  EXPECT_EQ(AdjustLogit(-3.0f, a), (-3.0f + 1.0f) * 2.0f - 0.75f);
  a.flags |= kLogitBanned;
  EXPECT_EQ(AdjustLogit(3.0f, a), kBannedLogit);
  EXPECT_TRUE(std::isfinite(kBannedLogit));
}

TEST(LogitAdjustTest, RepetitionAloneNeedsNoEntries) {
  const std::vector<int32_t> history = {1, 2};
  RowPenalties p{history, 1, 1.3f, 0.0f, 0.0f, {}, {}};
  EXPECT_FALSE(NeedsAdjustments(p));  // the samplers' own repetition path handles it
}

}  // namespace
}  // namespace ferry::kernels
