// The controller of one variant group: it owns the group's load monitor, the policy state,
// the variants' health and the decision log, and chooses where NEW requests go. Running
// sequences are never moved: each finishes on the variant it was admitted to (the variants
// do not share KV caches), so a switch only changes Route()'s answer.
//
// Time comes in as arguments (a steady point for the windows and the dwell time, Unix
// milliseconds for the log), so tests drive it with a fake clock.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "qos/load_monitor.h"
#include "qos/policy.h"
#include "qos/qos_options.h"

namespace ferry::qos {

struct Now {
  Clock::time_point steady;
  int64_t unix_ms = 0;
  static Now Current();
};

// One entry of the decision log: a switch, a held move, a health change, a pin.
struct DecisionRecord {
  int64_t unix_ms = 0;
  std::string model;
  std::string kind;    // "switch", "hold", "unhealthy", "cleared", "pin", "canary"
  std::string action;  // the policy's action for switches and holds ("down", "up", "rollback", "pin", "stay")
  std::string from;    // variant names; empty where not applicable
  std::string to;
  std::string code;    // fixed, low-cardinality (metrics label): "pressure_high", "dwell", ...
  std::string reason;  // the numbers behind it
  double pressure = 0;
  std::string signal;
  nlohmann::json ToJson() const;
};

struct ControllerOptions {
  std::string model;                  // the group's name, for the log
  std::vector<std::string> variants;  // ladder order, most accurate first
  QosOptions qos;
  // Each tier's effective targets and floor (the index of the lowest variant it may use).
  std::vector<std::pair<std::string, ResolvedSlo>> tiers;
  std::map<std::string, int> floors;
  double waiting_capacity = 16;
  double waiting_tokens_capacity = 512;
};

// Thread-safe. Route() is on every request's path and takes no lock.
class Controller {
 public:
  static constexpr size_t kMaxDecisions = 100;

  explicit Controller(ControllerOptions options);

  LoadMonitor& monitor() { return monitor_; }
  const ControllerOptions& options() const { return options_; }
  int num_variants() const { return static_cast<int>(options_.variants.size()); }
  const std::string& variant_name(int i) const { return options_.variants[static_cast<size_t>(i)]; }
  std::optional<int> FindVariant(std::string_view name) const;

  // The variant a new request of `tier` goes to; nullopt when no healthy variant is at or
  // above the tier's floor.
  std::optional<int> Route(std::string_view tier) const;
  int active() const { return active_.load(std::memory_order_acquire); }
  bool healthy(int variant) const;

  // One decision: reads the window, marks variants whose engine errors exceed the rollback
  // threshold, runs the policy and applies it. Returns the records it added to the log.
  std::vector<DecisionRecord> Tick(const Now& now);
  // `variant` or "auto". NotFound for an unknown variant, FailedPrecondition for an
  // unhealthy one. Takes effect at once (a pin ignores the dwell time).
  Result<std::vector<DecisionRecord>> Pin(const std::string& variant, const Now& now);
  // Marks `variant` (or every variant, "all") healthy again and forgets its errors.
  Result<std::vector<DecisionRecord>> Clear(const std::string& variant, const Now& now);
  // A failed canary, or any other reason found outside the window.
  std::vector<DecisionRecord> MarkUnhealthy(int variant, const std::string& code, const std::string& reason,
                                            const Now& now);
  // A record for the log that changes nothing (a passed canary).
  DecisionRecord Note(const std::string& kind, int variant, const std::string& code, const std::string& reason,
                      const Now& now);
  // The measured time of the same work on each variant (startup probe); <= 0: unknown.
  void SetCost(int variant, double seconds);
  // The largest projected cost of a move up: max over the rungs of the measured cost of the
  // rung above over its own (1 without measurements, or with project_upgrade off).
  double MaxUpgradeCost() const;

  // State, signals of the last tick, and the last kMaxDecisions decisions (oldest first).
  nlohmann::json ToJson(const Now& now) const;
  // The signals of the last Tick (empty before the first).
  Signals last_signals() const;

 private:
  DecisionRecord Record(const Now& now, std::string kind, std::string action, int from, int to, std::string code,
                        std::string reason) const;
  void AppendLocked(std::vector<DecisionRecord>& out, DecisionRecord r);
  std::vector<bool> HealthyLocked() const;
  double UpgradeCostLocked(int active) const;
  std::vector<DecisionRecord> ApplyLocked(const Decision& d, const Now& now, const Signals& signals);
  PolicyOptions Policy() const;

  const ControllerOptions options_;
  LoadMonitor monitor_;
  std::map<std::string, int, std::less<>> floors_;     // fixed after construction
  std::unique_ptr<std::atomic<bool>[]> healthy_;  // per variant; written under mu_
  std::atomic<int> active_{0};                    // written under mu_

  mutable std::mutex mu_;
  PolicyState state_;                               // GUARDED_BY(mu_)
  std::vector<std::string> unhealthy_reason_;      // GUARDED_BY(mu_)
  std::vector<double> cost_;                        // GUARDED_BY(mu_)
  std::deque<DecisionRecord> log_;                  // GUARDED_BY(mu_)
  std::string last_hold_;                           // GUARDED_BY(mu_): the hold logged since the last change
  Signals signals_;                                 // GUARDED_BY(mu_)
  uint64_t switches_ = 0;                           // GUARDED_BY(mu_)
};

}  // namespace ferry::qos
