#include "qos/controller.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ferry::qos {

namespace {

std::string Fixed(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// Pressures round-trip through JSON as finite numbers only.
double Finite(double v) { return std::isfinite(v) ? v : 0.0; }

nlohmann::json QuantilesJson(const WindowedQuantiles::Summary& q) {
  return {{"count", q.count}, {"p50_ms", q.p50 * 1000}, {"p95_ms", q.p95 * 1000}, {"p99_ms", q.p99 * 1000},
          {"max_ms", q.max * 1000}};
}

}  // namespace

Now Now::Current() {
  Now n;
  n.steady = Clock::now();
  n.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  return n;
}

nlohmann::json DecisionRecord::ToJson() const {
  nlohmann::json j = {{"unix_ms", unix_ms}, {"model", model}, {"kind", kind}, {"code", code}, {"reason", reason}};
  if (!action.empty()) j["action"] = action;
  if (!from.empty()) j["from"] = from;
  if (!to.empty()) j["to"] = to;
  if (!signal.empty()) j["signal"] = signal;
  if (kind == "switch" || kind == "hold") j["pressure"] = Finite(pressure);
  return j;
}

Controller::Controller(ControllerOptions options)
    : options_(std::move(options)),
      monitor_(LoadMonitorOptions{
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.qos.window_s)),
          options_.qos.min_samples, options_.qos.signals, options_.variants, options_.tiers,
          options_.waiting_capacity, options_.waiting_tokens_capacity}),
      healthy_(std::make_unique<std::atomic<bool>[]>(options_.variants.size())) {
  for (const auto& [tier, floor] : options_.floors) floors_.emplace(tier, floor);
  for (size_t i = 0; i < options_.variants.size(); ++i) healthy_[i].store(true);
  unhealthy_reason_.assign(options_.variants.size(), "");
  cost_.assign(options_.variants.size(), 0.0);
}

std::optional<int> Controller::FindVariant(std::string_view name) const {
  for (size_t i = 0; i < options_.variants.size(); ++i) {
    if (options_.variants[i] == name) return static_cast<int>(i);
  }
  return std::nullopt;
}

bool Controller::healthy(int variant) const {
  return variant >= 0 && variant < num_variants() && healthy_[static_cast<size_t>(variant)].load();
}

std::optional<int> Controller::Route(std::string_view tier) const {
  const int last = num_variants() - 1;
  auto it = floors_.find(tier);
  const int floor = it == floors_.end() ? last : std::min(it->second, last);
  std::vector<bool> healthy(options_.variants.size());
  for (size_t i = 0; i < healthy.size(); ++i) healthy[i] = healthy_[i].load(std::memory_order_acquire);
  return RouteVariant(active(), floor, healthy);
}

std::vector<bool> Controller::HealthyLocked() const {
  std::vector<bool> healthy(options_.variants.size());
  for (size_t i = 0; i < healthy.size(); ++i) healthy[i] = healthy_[i].load();
  return healthy;
}

double Controller::UpgradeCostLocked(int active) const {
  if (!options_.qos.project_upgrade || active <= 0) return 1.0;
  const double up = cost_[static_cast<size_t>(active - 1)];
  const double here = cost_[static_cast<size_t>(active)];
  if (!(up > 0) || !(here > 0)) return 1.0;
  return up / here;
}

PolicyOptions Controller::Policy() const {
  PolicyOptions p;
  p.downgrade_above = options_.qos.downgrade_above;
  p.upgrade_below = options_.qos.upgrade_below;
  p.min_dwell = std::chrono::duration_cast<PolicyClock::duration>(std::chrono::duration<double>(options_.qos.min_dwell_s));
  return p;
}

DecisionRecord Controller::Record(const Now& now, std::string kind, std::string action, int from, int to,
                                  std::string code, std::string reason) const {
  DecisionRecord r;
  r.unix_ms = now.unix_ms;
  r.model = options_.model;
  r.kind = std::move(kind);
  r.action = std::move(action);
  if (from >= 0 && from < num_variants()) r.from = variant_name(from);
  if (to >= 0 && to < num_variants()) r.to = variant_name(to);
  r.code = std::move(code);
  r.reason = std::move(reason);
  return r;
}

void Controller::AppendLocked(std::vector<DecisionRecord>& out, DecisionRecord r) {
  log_.push_back(r);
  while (log_.size() > kMaxDecisions) log_.pop_front();
  out.push_back(std::move(r));
}

std::vector<DecisionRecord> Controller::ApplyLocked(const Decision& d, const Now& now, const Signals& signals) {
  std::vector<DecisionRecord> out;
  state_ = d.next;
  active_.store(state_.active, std::memory_order_release);
  if (d.switched()) {
    ++switches_;
    last_hold_.clear();
    DecisionRecord r = Record(now, "switch", ActionName(d.action), d.from, d.to, d.code, d.reason);
    r.pressure = signals.pressure;
    r.signal = signals.pressure_signal;
    AppendLocked(out, std::move(r));
  } else if (d.held) {
    // A held move is logged once per episode, not on every tick it stays held.
    const std::string key = d.code + ":" + std::to_string(d.from);
    if (key != last_hold_) {
      last_hold_ = key;
      DecisionRecord r = Record(now, "hold", ActionName(d.action), d.from, d.to, d.code, d.reason);
      r.pressure = signals.pressure;
      r.signal = signals.pressure_signal;
      AppendLocked(out, std::move(r));
    }
  } else if (d.code == "steady" || d.code == "top") {
    last_hold_.clear();
  }
  return out;
}

std::vector<DecisionRecord> Controller::Tick(const Now& now) {
  Signals signals = monitor_.Snapshot(now.steady);
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DecisionRecord> out;
  const RollbackOptions& rb = options_.qos.rollback;
  for (size_t i = 0; i < signals.variants.size(); ++i) {
    const VariantSignals& v = signals.variants[i];
    if (!healthy_[i].load() || v.errors < rb.min_errors || v.error_rate < rb.error_rate) continue;
    healthy_[i].store(false);
    unhealthy_reason_[i] = "engine errors: " + std::to_string(v.errors) + " of " + std::to_string(v.sequences) +
                           " sequences in the window (" + Fixed(v.error_rate, 3) + " >= rollback.error_rate " +
                           Fixed(rb.error_rate, 3) + ")";
    AppendLocked(out, Record(now, "unhealthy", "", static_cast<int>(i), -1, "error_rate", unhealthy_reason_[i]));
  }
  PolicyInput in;
  in.healthy = HealthyLocked();
  in.pressure = signals.pressure;
  in.signal = signals.pressure_signal;
  in.upgrade_cost = UpgradeCostLocked(state_.active);
  const Decision d = Decide(Policy(), state_, in, now.steady);
  for (DecisionRecord& r : ApplyLocked(d, now, signals)) out.push_back(std::move(r));
  signals_ = std::move(signals);
  return out;
}

Result<std::vector<DecisionRecord>> Controller::Pin(const std::string& variant, const Now& now) {
  std::optional<int> target;
  if (variant != "auto") {
    target = FindVariant(variant);
    if (!target) return NotFound("model '" + options_.model + "' has no variant '" + variant + "'");
    if (!healthy(*target)) {
      return FailedPrecondition("variant '" + variant + "' of model '" + options_.model +
                                "' is unhealthy; clear it before pinning it");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DecisionRecord> out;
  const std::optional<int> before = state_.pin;
  state_.pin = target;
  if (target) {
    AppendLocked(out, Record(now, "pin", "", state_.active, *target, "pin", "pinned to '" + variant + "' by an administrator"));
  } else {
    AppendLocked(out, Record(now, "pin", "", state_.active, -1, "auto",
                             before ? "pin released by an administrator; the controller decides again"
                                    : "no pin was set; the controller decides"));
  }
  PolicyInput in;
  in.healthy = HealthyLocked();
  in.pressure = signals_.pressure;
  in.signal = signals_.pressure_signal;
  in.upgrade_cost = UpgradeCostLocked(state_.active);
  if (target) {
    const Decision d = Decide(Policy(), state_, in, now.steady);
    for (DecisionRecord& r : ApplyLocked(d, now, signals_)) out.push_back(std::move(r));
  }
  return out;
}

Result<std::vector<DecisionRecord>> Controller::Clear(const std::string& variant, const Now& now) {
  std::vector<int> which;
  if (variant == "all") {
    for (int i = 0; i < num_variants(); ++i) which.push_back(i);
  } else {
    const std::optional<int> v = FindVariant(variant);
    if (!v) return NotFound("model '" + options_.model + "' has no variant '" + variant + "'");
    which.push_back(*v);
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DecisionRecord> out;
  for (int i : which) {
    monitor_.ClearOutcomes(i);
    if (healthy_[static_cast<size_t>(i)].load()) continue;
    healthy_[static_cast<size_t>(i)].store(true);
    const std::string was = unhealthy_reason_[static_cast<size_t>(i)];
    unhealthy_reason_[static_cast<size_t>(i)].clear();
    AppendLocked(out, Record(now, "cleared", "", i, -1, "cleared", "cleared by an administrator (was: " + was + ")"));
  }
  return out;
}

std::vector<DecisionRecord> Controller::MarkUnhealthy(int variant, const std::string& code, const std::string& reason,
                                                      const Now& now) {
  std::vector<DecisionRecord> out;
  if (variant < 0 || variant >= num_variants()) return out;
  std::lock_guard<std::mutex> lock(mu_);
  if (!healthy_[static_cast<size_t>(variant)].load()) return out;
  healthy_[static_cast<size_t>(variant)].store(false);
  unhealthy_reason_[static_cast<size_t>(variant)] = reason;
  AppendLocked(out, Record(now, "unhealthy", "", variant, -1, code, reason));
  return out;
}

DecisionRecord Controller::Note(const std::string& kind, int variant, const std::string& code,
                                const std::string& reason, const Now& now) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DecisionRecord> out;
  AppendLocked(out, Record(now, kind, "", variant, -1, code, reason));
  return out.front();
}

double Controller::MaxUpgradeCost() const {
  std::lock_guard<std::mutex> lock(mu_);
  double cost = 1.0;
  for (int i = 1; i < num_variants(); ++i) cost = std::max(cost, UpgradeCostLocked(i));
  return cost;
}

void Controller::SetCost(int variant, double seconds) {
  if (variant < 0 || variant >= num_variants()) return;
  std::lock_guard<std::mutex> lock(mu_);
  cost_[static_cast<size_t>(variant)] = seconds;
}

Signals Controller::last_signals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return signals_;
}

nlohmann::json Controller::ToJson(const Now& now) const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json variants = nlohmann::json::array();
  const double top_cost = cost_.empty() ? 0.0 : cost_[0];
  for (int i = 0; i < num_variants(); ++i) {
    const size_t k = static_cast<size_t>(i);
    nlohmann::json v = {{"name", variant_name(i)}, {"index", i}, {"healthy", healthy_[k].load()},
                        {"active", i == state_.active}};
    if (!unhealthy_reason_[k].empty()) v["unhealthy_reason"] = unhealthy_reason_[k];
    if (cost_[k] > 0) {
      v["probe_seconds"] = cost_[k];
      if (top_cost > 0) v["relative_cost"] = cost_[k] / top_cost;
    }
    variants.push_back(std::move(v));
  }
  nlohmann::json floors = nlohmann::json::object();
  for (const auto& [tier, floor] : floors_) floors[tier] = variant_name(std::min(floor, num_variants() - 1));
  nlohmann::json tiers = nlohmann::json::array();
  for (const TierSignals& t : signals_.tiers) {
    tiers.push_back({{"tier", t.tier},
                     {"slo", {{"ttft_ms", t.slo.ttft_ms}, {"tpot_ms", t.slo.tpot_ms}, {"queue_ms", t.slo.queue_ms}}},
                     {"queue_wait", QuantilesJson(t.queue_wait_s)},
                     {"ttft", QuantilesJson(t.ttft_s)},
                     {"tpot", QuantilesJson(t.tpot_s)}});
  }
  nlohmann::json per_variant = nlohmann::json::array();
  for (const VariantSignals& v : signals_.variants) {
    per_variant.push_back({{"name", v.name}, {"sequences", v.sequences}, {"errors", v.errors},
                           {"error_rate", v.error_rate}, {"busy_s", v.busy_s}, {"kv_usage", v.kv_usage},
                           {"running", v.running}, {"waiting", v.waiting}, {"waiting_tokens", v.waiting_tokens}});
  }
  nlohmann::json pressures = nlohmann::json::array();
  for (const Pressure& p : signals_.pressures) {
    pressures.push_back({{"signal", p.signal}, {"value", Finite(p.value)}, {"samples", p.samples},
                         {"drives", p.drives}});
  }
  nlohmann::json decisions = nlohmann::json::array();
  for (const DecisionRecord& r : log_) decisions.push_back(r.ToJson());
  nlohmann::json j = {
      {"model", options_.model},
      {"variants", variants},
      {"active", variant_name(state_.active)},
      {"pin", state_.pin ? nlohmann::json(variant_name(*state_.pin)) : nlohmann::json("auto")},
      {"floors", floors},
      {"switches", switches_},
      {"options",
       {{"window_s", options_.qos.window_s}, {"downgrade_above", options_.qos.downgrade_above},
        {"upgrade_below", options_.qos.upgrade_below}, {"min_dwell_s", options_.qos.min_dwell_s},
        {"project_upgrade", options_.qos.project_upgrade}}},
      {"signals",
       {{"window_s", signals_.window_s}, {"pressure", Finite(signals_.pressure)},
        {"pressure_signal", signals_.pressure_signal}, {"pressures", pressures}, {"tiers", tiers},
        {"variants", per_variant}}},
      {"decisions", decisions}};
  if (state_.last_switch) {
    j["since_last_switch_s"] = std::chrono::duration<double>(now.steady - *state_.last_switch).count();
  }
  return j;
}

}  // namespace ferry::qos
