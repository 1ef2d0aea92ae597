#include "qos/load_monitor.h"

#include <algorithm>

namespace ferry::qos {

LoadMonitor::LoadMonitor(LoadMonitorOptions options) : options_(std::move(options)) {
  for (const auto& [name, slo] : options_.tiers) {
    if (tier_index_.count(name) != 0) continue;
    tiers_.push_back(std::make_unique<TierWindows>(name, slo, options_.window));
    tier_index_.emplace(name, tiers_.back().get());
  }
  for (size_t i = 0; i < options_.variants.size(); ++i) {
    variants_.push_back(std::make_unique<VariantWindows>(options_.window));
  }
}

LoadMonitor::TierWindows* LoadMonitor::FindTier(std::string_view tier) {
  auto it = tier_index_.find(std::string(tier));
  return it == tier_index_.end() ? nullptr : it->second;
}

bool LoadMonitor::Drives(Signal s) const {
  return std::find(options_.drive.begin(), options_.drive.end(), s) != options_.drive.end();
}

void LoadMonitor::RecordQueueWait(std::string_view tier, double seconds, Clock::time_point now) {
  if (TierWindows* t = FindTier(tier)) t->queue_wait.Add(now, seconds);
}

void LoadMonitor::RecordTtft(std::string_view tier, double seconds, Clock::time_point now) {
  if (TierWindows* t = FindTier(tier)) t->ttft.Add(now, seconds);
}

void LoadMonitor::RecordTpot(std::string_view tier, double seconds, Clock::time_point now) {
  if (TierWindows* t = FindTier(tier)) t->tpot.Add(now, seconds);
}

void LoadMonitor::RecordOutcome(int variant, bool engine_error, Clock::time_point now) {
  if (variant < 0 || variant >= num_variants()) return;
  variants_[static_cast<size_t>(variant)]->outcomes.Add(now, engine_error ? 1.0 : 0.0);
}

void LoadMonitor::RecordBusy(int variant, double seconds, Clock::time_point now) {
  if (variant < 0 || variant >= num_variants()) return;
  variants_[static_cast<size_t>(variant)]->busy.Add(now, seconds);
}

void LoadMonitor::RecordLoad(int variant, double running, double waiting, double waiting_tokens, double kv_usage,
                             Clock::time_point now) {
  if (variant < 0 || variant >= num_variants()) return;
  VariantWindows& v = *variants_[static_cast<size_t>(variant)];
  v.running.Add(now, running);
  v.waiting.Add(now, waiting);
  v.waiting_tokens.Add(now, waiting_tokens);
  v.kv_usage.Add(now, kv_usage);
}

void LoadMonitor::ClearOutcomes(int variant) {
  if (variant < 0 || variant >= num_variants()) return;
  variants_[static_cast<size_t>(variant)]->outcomes.Clear();
}

Signals LoadMonitor::Snapshot(Clock::time_point now) const {
  Signals out;
  const double window_s = std::chrono::duration<double>(options_.window).count();
  out.window_s = window_s;
  auto add = [&out](std::string signal, double value, int64_t samples, bool drives) {
    if (drives && value > out.pressure) {
      out.pressure = value;
      out.pressure_signal = signal;
    }
    out.pressures.push_back(Pressure{std::move(signal), value, samples, drives});
  };
  const int64_t min_samples = options_.min_samples;
  for (const auto& t : tiers_) {
    TierSignals ts;
    ts.tier = t->name;
    ts.slo = t->slo;
    ts.queue_wait_s = t->queue_wait.Read(now);
    ts.ttft_s = t->ttft.Read(now);
    ts.tpot_s = t->tpot.Read(now);
    auto latency = [&](Signal s, const WindowedQuantiles::Summary& q, double target_ms) {
      const double value = q.count > 0 ? q.p95 * 1000.0 / target_ms : 0.0;
      add(std::string(SignalName(s)) + ":" + t->name, value, q.count, Drives(s) && q.count >= min_samples);
    };
    latency(Signal::kQueueWait, ts.queue_wait_s, t->slo.queue_ms);
    latency(Signal::kTtft, ts.ttft_s, t->slo.ttft_ms);
    latency(Signal::kTpot, ts.tpot_s, t->slo.tpot_ms);
    out.tiers.push_back(std::move(ts));
  }
  double kv = 0, waiting = 0, waiting_tokens = 0, busy = 0;
  for (size_t i = 0; i < variants_.size(); ++i) {
    const VariantWindows& w = *variants_[i];
    VariantSignals vs;
    vs.name = options_.variants[i];
    const WindowedStats::Summary o = w.outcomes.Read(now);
    vs.sequences = o.count;
    vs.errors = static_cast<int64_t>(o.sum + 0.5);
    vs.error_rate = o.count > 0 ? o.sum / static_cast<double>(o.count) : 0.0;
    vs.busy_s = w.busy.Read(now).sum;
    vs.kv_usage = w.kv_usage.Read(now).mean();
    vs.running = w.running.Read(now).mean();
    vs.waiting = w.waiting.Read(now).mean();
    vs.waiting_tokens = w.waiting_tokens.Read(now).mean();
    kv = std::max(kv, vs.kv_usage);
    waiting += vs.waiting;
    waiting_tokens += vs.waiting_tokens;
    busy += vs.busy_s;
    out.variants.push_back(std::move(vs));
  }
  add(std::string(SignalName(Signal::kKvUsage)), kv, 0, Drives(Signal::kKvUsage));
  add(std::string(SignalName(Signal::kWaiting)), waiting / std::max(1.0, options_.waiting_capacity), 0,
      Drives(Signal::kWaiting));
  add(std::string(SignalName(Signal::kWaitingTokens)), waiting_tokens / std::max(1.0, options_.waiting_tokens_capacity),
      0, Drives(Signal::kWaitingTokens));
  add(std::string(SignalName(Signal::kUtilization)), window_s > 0 ? busy / window_s : 0.0, 0,
      Drives(Signal::kUtilization));
  return out;
}

}  // namespace ferry::qos
