#include "qos/qos_options.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace ferry::qos {

namespace {

constexpr std::pair<Signal, std::string_view> kSignalNames[] = {
    {Signal::kQueueWait, "queue_wait"}, {Signal::kTtft, "ttft"},       {Signal::kTpot, "tpot"},
    {Signal::kKvUsage, "kv_usage"},     {Signal::kWaiting, "waiting"}, {Signal::kWaitingTokens, "waiting_tokens"},
    {Signal::kUtilization, "utilization"}};

std::string Num(double v) {
  std::string s = std::to_string(v);
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

Status CheckSlo(const SloTargets& slo, const std::string& path) {
  for (const auto& [name, v] : {std::pair{"ttft_ms", slo.ttft_ms}, std::pair{"tpot_ms", slo.tpot_ms},
                                std::pair{"queue_ms", slo.queue_ms}}) {
    if (v && !(*v > 0 && std::isfinite(*v))) {
      return InvalidArgument(path + "." + name + ": must be a positive number of milliseconds, got " + Num(*v));
    }
  }
  return Status::Ok();
}

}  // namespace

std::string_view SignalName(Signal signal) {
  for (const auto& [s, name] : kSignalNames) {
    if (s == signal) return name;
  }
  return "unknown";
}

Result<Signal> ParseSignal(std::string_view name) {
  std::string known;
  for (const auto& [s, n] : kSignalNames) {
    if (n == name) return s;
    known += (known.empty() ? "" : ", ") + std::string(n);
  }
  return InvalidArgument("unknown signal '" + std::string(name) + "' (signals: " + known + ")");
}

Status QosOptions::Validate() const {
  if (!(window_s > 0 && std::isfinite(window_s))) return InvalidArgument("window_s: must be > 0, got " + Num(window_s));
  if (!(downgrade_above > 0 && std::isfinite(downgrade_above))) {
    return InvalidArgument("downgrade_above: must be > 0, got " + Num(downgrade_above));
  }
  if (!(upgrade_below > 0 && upgrade_below < downgrade_above)) {
    return InvalidArgument("upgrade_below: must be > 0 and below downgrade_above (" + Num(downgrade_above) +
                           ") so that the two thresholds leave a band of hysteresis, got " + Num(upgrade_below));
  }
  if (!(min_dwell_s >= 0 && std::isfinite(min_dwell_s))) {
    return InvalidArgument("min_dwell_s: must be >= 0, got " + Num(min_dwell_s));
  }
  if (tick_ms < 10 || tick_ms > 60000) return InvalidArgument("tick_ms: must be in [10, 60000], got " + std::to_string(tick_ms));
  if (min_samples < 1) return InvalidArgument("min_samples: must be >= 1, got " + std::to_string(min_samples));
  if (signals.empty()) return InvalidArgument("signals: name at least one signal");
  FERRY_RETURN_IF_ERROR(CheckSlo(slo, "slo"));
  const RollbackOptions& r = rollback;
  if (!(r.error_rate > 0 && r.error_rate <= 1)) {
    return InvalidArgument("rollback.error_rate: must be in (0, 1], got " + Num(r.error_rate));
  }
  if (r.min_errors < 1) return InvalidArgument("rollback.min_errors: must be >= 1, got " + std::to_string(r.min_errors));
  if (r.canary_tokens < 1 || r.canary_tokens > 1024) {
    return InvalidArgument("rollback.canary_tokens: must be in [1, 1024], got " + std::to_string(r.canary_tokens));
  }
  if (!(r.canary_min_agreement >= 0 && r.canary_min_agreement <= 1)) {
    return InvalidArgument("rollback.canary_min_agreement: must be in [0, 1], got " + Num(r.canary_min_agreement));
  }
  if (!(r.canary_min_cosine >= -1 && r.canary_min_cosine <= 1)) {
    return InvalidArgument("rollback.canary_min_cosine: must be in [-1, 1], got " + Num(r.canary_min_cosine));
  }
  if (!(r.canary_interval_s >= 0 && std::isfinite(r.canary_interval_s))) {
    return InvalidArgument("rollback.canary_interval_s: must be >= 0, got " + Num(r.canary_interval_s));
  }
  for (const auto& [tier, rule] : tiers) FERRY_RETURN_IF_ERROR(CheckSlo(rule.slo, "tiers." + tier + ".slo"));
  if (inactive_step.mode == InactivePacing::Mode::kFixed &&
      !(inactive_step.ms > 0 && inactive_step.ms <= kMaxInactiveStepMs)) {
    return InvalidArgument("inactive_step_ms: must be auto, off, or a number of milliseconds in (0, " +
                           Num(kMaxInactiveStepMs) + "], got " + Num(inactive_step.ms));
  }
  return Status::Ok();
}

double InactiveStepMs(const QosOptions& options, const std::vector<double>& tpot_targets_ms, double max_upgrade_cost) {
  switch (options.inactive_step.mode) {
    case InactivePacing::Mode::kOff: return 0;
    case InactivePacing::Mode::kFixed: return options.inactive_step.ms;
    case InactivePacing::Mode::kAuto: break;
  }
  double target = 0;
  for (double t : tpot_targets_ms) {
    if (t > 0 && (target == 0 || t < target)) target = t;
  }
  if (target == 0) return 0;
  const double cost = std::max(1.0, std::isfinite(max_upgrade_cost) ? max_upgrade_cost : 1.0);
  const double fraction = std::min(kAutoPaceFraction, kPaceProjectedShare * options.upgrade_below / cost);
  return target * fraction;
}

ResolvedSlo EffectiveSlo(const SloTargets& group, const SloTargets& tier) {
  ResolvedSlo r;
  r.ttft_ms = tier.ttft_ms.value_or(group.ttft_ms.value_or(kDefaultTtftMs));
  r.tpot_ms = tier.tpot_ms.value_or(group.tpot_ms.value_or(kDefaultTpotMs));
  r.queue_ms = tier.queue_ms.value_or(group.queue_ms.value_or(r.ttft_ms));
  return r;
}

}  // namespace ferry::qos
