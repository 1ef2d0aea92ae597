// The step-time target of a decoder's scheduler: a per-step token budget that keeps the steps
// running sequences decode in (their inter-token latency) near a time bound, on any device.
//
// A prefill chunk shares its step with the running decodes, so a large chunk stalls every one
// of them (on 2 CPU cores a 512-token chunk of a 1B model takes seconds). The model here
// learns online how long a step takes as a function of its token count (a straight line fitted
// by least squares with exponential forgetting, so it follows context growth and device load),
// and the budget is what fits the target: the decodes first, then as many prefill tokens as
// the remaining time allows, at least one KV block so that prefills always progress.
#pragma once

#include <cstdint>

namespace ferry::sched {

// `max_step_ms` values with a meaning of their own (ContinuousBatchingOptions).
inline constexpr int kMaxStepAuto = -1;  // the target follows the device: kAutoStepFactor × a decode-only step
inline constexpr int kMaxStepOff = 0;    // no time target: the budget is max_num_batched_tokens
// With `auto`, a step with prefill work may take this many times what the decodes alone take.
inline constexpr double kAutoStepFactor = 2.5;

class StepTimeModel {
 public:
  // `forget`: each new step's weight relative to the one before (0.97: about 33 steps of memory).
  explicit StepTimeModel(double forget = 0.97) : forget_(forget) {}

  // One finished step of `tokens` tokens that took `seconds`.
  void Add(int tokens, double seconds);
  // Predicted seconds of a step of `tokens` tokens; 0 until a step was seen.
  double Predict(int tokens) const;
  // Whether the line is known: steps of different sizes seen (else the slope is unknown).
  bool calibrated() const;
  double intercept() const;          // seconds per step whatever its size (weights read, launches)
  double seconds_per_token() const;  // >= 0
  int64_t samples() const { return samples_; }

 private:
  double forget_;
  double w_ = 0, wx_ = 0, wxx_ = 0, wy_ = 0, wxy_ = 0;  // forgetting sums
  int64_t samples_ = 0;
};

// The token budget of the next step. `decodes`: running sequences that compute one token;
// `prefill_pending`: whether any sequence (running or waiting) has prompt tokens to compute.
// `max_step_ms`: kMaxStepAuto, kMaxStepOff or a target in milliseconds.
struct StepBudgetInput {
  int max_num_batched_tokens = 512;
  int max_step_ms = kMaxStepAuto;
  double auto_factor = kAutoStepFactor;  // the auto target: this many decode-only steps
  int decodes = 0;
  bool prefill_pending = false;
  int block_tokens = 16;
};
int StepTokenBudget(const StepTimeModel& model, const StepBudgetInput& in);

}  // namespace ferry::sched
