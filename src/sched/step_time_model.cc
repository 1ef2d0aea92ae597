#include "sched/step_time_model.h"

#include <algorithm>
#include <cmath>

namespace ferry::sched {

namespace {

// Uncalibrated (one step size seen so far), a prefill chunk is capped at this many tokens
// while sequences decode, so that the first mixed step measures the slope without a stall.
constexpr int kProbeTokens = 64;

}  // namespace

void StepTimeModel::Add(int tokens, double seconds) {
  if (tokens <= 0 || !(seconds >= 0) || !std::isfinite(seconds)) return;
  const double x = tokens;
  w_ = forget_ * w_ + 1;
  wx_ = forget_ * wx_ + x;
  wxx_ = forget_ * wxx_ + x * x;
  wy_ = forget_ * wy_ + seconds;
  wxy_ = forget_ * wxy_ + x * seconds;
  ++samples_;
}

bool StepTimeModel::calibrated() const {
  if (w_ <= 0) return false;
  // The weighted variance of the step sizes: at least about one token² of spread.
  const double mean = wx_ / w_;
  return wxx_ / w_ - mean * mean > 0.25;
}

double StepTimeModel::seconds_per_token() const {
  if (w_ <= 0) return 0;
  if (!calibrated()) return wx_ > 0 ? wy_ / wx_ : 0;  // all steps one size: time per token of that size
  const double det = w_ * wxx_ - wx_ * wx_;
  return std::max(0.0, (w_ * wxy_ - wx_ * wy_) / det);
}

double StepTimeModel::intercept() const {
  if (w_ <= 0 || !calibrated()) return 0;
  // Never negative: a line through the measured steps with a fixed cost of at least zero.
  return std::max(0.0, (wy_ - seconds_per_token() * wx_) / w_);
}

double StepTimeModel::Predict(int tokens) const {
  if (w_ <= 0) return 0;
  return intercept() + seconds_per_token() * std::max(tokens, 0);
}

int StepTokenBudget(const StepTimeModel& model, const StepBudgetInput& in) {
  const int full = in.max_num_batched_tokens;
  // Nothing to protect (no sequence waits for its next token) or nothing to limit.
  if (in.max_step_ms == kMaxStepOff || in.decodes == 0 || !in.prefill_pending) return full;
  const int floor = std::min(full, in.decodes + std::max(in.block_tokens, 1));
  const int probe = std::min(full, std::max(floor, in.decodes + kProbeTokens));
  // Unknown line, or a slope the noise made zero: a probe chunk, whose step measures it.
  const double per_token = model.seconds_per_token();
  if (!model.calibrated() || !(per_token > 0)) return probe;
  const double decode_only = model.Predict(in.decodes);
  const double target =
      in.max_step_ms == kMaxStepAuto ? in.auto_factor * decode_only : in.max_step_ms / 1000.0;
  const double extra = (target - decode_only) / per_token;
  if (!(extra > 0)) return floor;
  const double budget = in.decodes + std::floor(extra);
  return static_cast<int>(std::clamp<double>(budget, floor, full));
}

}  // namespace ferry::sched
