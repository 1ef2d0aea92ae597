// The step-time model behind max_step_ms: the line it learns from measured steps, how it
// forgets, and the token budget it gives for each target (auto, off, milliseconds).
#include "sched/step_time_model.h"

#include <gtest/gtest.h>

#include <limits>

namespace ferry::sched {
namespace {

// Steps of a device where a step costs `fixed` seconds plus `per_token` per token.
void Feed(StepTimeModel& m, double fixed, double per_token, std::initializer_list<int> sizes, int rounds = 4) {
  for (int r = 0; r < rounds; ++r) {
    for (int x : sizes) m.Add(x, fixed + per_token * x);
  }
}

TEST(StepTimeModelTest, LearnsTheFixedAndPerTokenCostOfAStep) {
  StepTimeModel m;
  EXPECT_FALSE(m.calibrated());
  EXPECT_EQ(m.Predict(10), 0.0);
  Feed(m, 0.2, 0.008, {8, 8, 8, 40, 8, 136});
  ASSERT_TRUE(m.calibrated());
  EXPECT_NEAR(m.intercept(), 0.2, 1e-9);
  EXPECT_NEAR(m.seconds_per_token(), 0.008, 1e-12);
  EXPECT_NEAR(m.Predict(100), 1.0, 1e-9);
}

TEST(StepTimeModelTest, StepsOfOneSizeGiveTimePerTokenButNoLine) {
  StepTimeModel m;
  Feed(m, 0.2, 0.0, {8});
  EXPECT_FALSE(m.calibrated());
  EXPECT_NEAR(m.seconds_per_token(), 0.2 / 8, 1e-12);
  EXPECT_NEAR(m.Predict(8), 0.2, 1e-12);
}

TEST(StepTimeModelTest, ForgetsOldStepsSoItFollowsTheDevice) {
  StepTimeModel m(0.9);
  Feed(m, 0.1, 0.01, {4, 64}, 20);
  Feed(m, 0.3, 0.02, {4, 64}, 40);  // the device got slower (longer contexts, other load)
  EXPECT_NEAR(m.intercept(), 0.3, 1e-3);
  EXPECT_NEAR(m.seconds_per_token(), 0.02, 1e-4);
}

TEST(StepTimeModelTest, IgnoresMeaninglessSamples) {
  StepTimeModel m;
  m.Add(0, 1.0);
  m.Add(8, -1.0);
  m.Add(8, std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(m.samples(), 0);
}

TEST(StepTokenBudgetTest, FullBudgetWhenNothingDecodesNothingPrefillsOrTheTargetIsOff) {
  StepTimeModel m;
  Feed(m, 0.2, 0.008, {8, 136});
  StepBudgetInput in;
  in.max_num_batched_tokens = 512;
  in.decodes = 8;
  in.prefill_pending = true;
  in.max_step_ms = kMaxStepOff;
  EXPECT_EQ(StepTokenBudget(m, in), 512);
  in.max_step_ms = kMaxStepAuto;
  in.decodes = 0;  // only prefills: nobody waits for a next token, a big chunk is fastest
  EXPECT_EQ(StepTokenBudget(m, in), 512);
  in.decodes = 8;
  in.prefill_pending = false;
  EXPECT_EQ(StepTokenBudget(m, in), 512);
}

TEST(StepTokenBudgetTest, AutoAllowsTwoAndAHalfDecodeStepsAndMillisecondsAreATarget) {
  StepTimeModel m;
  Feed(m, 0.2, 0.008, {8, 8, 40, 136});
  StepBudgetInput in;
  in.max_num_batched_tokens = 512;
  in.decodes = 8;
  in.prefill_pending = true;
  // Decodes alone: 0.2 + 8 * 0.008 = 0.264 s; the target 2.5x = 0.66 s leaves 0.396 s = 49 tokens.
  EXPECT_EQ(StepTokenBudget(m, in), 8 + 49);
  in.auto_factor = 3.0;  // 0.792 s leaves 0.528 s = 66 tokens
  EXPECT_EQ(StepTokenBudget(m, in), 8 + 66);
  in.auto_factor = 1.0;  // the decodes alone: prefills still get a block per step
  EXPECT_EQ(StepTokenBudget(m, in), 8 + 16);
  in.max_step_ms = 1000;  // (1 - 0.264) / 0.008 = 92 tokens; the factor is for auto only
  EXPECT_EQ(StepTokenBudget(m, in), 8 + 92);
  in.max_step_ms = 100000;  // never above max_num_batched_tokens
  EXPECT_EQ(StepTokenBudget(m, in), 512);
  in.max_step_ms = 100;  // below what the decodes take: prefills still get a block per step
  EXPECT_EQ(StepTokenBudget(m, in), 8 + 16);
  in.block_tokens = 32;
  EXPECT_EQ(StepTokenBudget(m, in), 8 + 32);
}

TEST(StepTokenBudgetTest, BeforeTheLineIsKnownAProbeChunkMeasuresIt) {
  StepTimeModel m;
  StepBudgetInput in;
  in.max_num_batched_tokens = 512;
  in.decodes = 4;
  in.prefill_pending = true;
  EXPECT_EQ(StepTokenBudget(m, in), 4 + 64);
  Feed(m, 0.2, 0.0, {4});  // decode steps only so far
  EXPECT_EQ(StepTokenBudget(m, in), 4 + 64);
  in.max_num_batched_tokens = 32;
  EXPECT_EQ(StepTokenBudget(m, in), 32);
}

}  // namespace
}  // namespace ferry::sched
