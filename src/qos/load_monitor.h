// The load monitor of one variant group: sliding windows of what the server measures —
// per tier the queue wait, time to first token and time per output token; per variant the
// sequences and engine errors, engine-busy time, and sampled queue depth and KV usage —
// turned into normalized pressures (1.0 = at target) for the policy.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "qos/qos_options.h"
#include "qos/sliding_window.h"

namespace ferry::qos {

struct LoadMonitorOptions {
  Clock::duration window = std::chrono::seconds(10);
  int min_samples = 10;
  std::vector<Signal> drive;                                  // signals that count toward the pressure
  std::vector<std::string> variants;                          // ladder order
  std::vector<std::pair<std::string, ResolvedSlo>> tiers;    // every tier and its targets
  double waiting_capacity = 16;          // waiting requests that count as pressure 1
  double waiting_tokens_capacity = 512;  // waiting prompt tokens that count as pressure 1
};

struct TierSignals {
  std::string tier;
  ResolvedSlo slo;
  WindowedQuantiles::Summary queue_wait_s;
  WindowedQuantiles::Summary ttft_s;
  WindowedQuantiles::Summary tpot_s;
};

struct VariantSignals {
  std::string name;
  int64_t sequences = 0;  // finished in the window
  int64_t errors = 0;     // failed in the engine (failed steps, non-finite outputs)
  double error_rate = 0;
  double busy_s = 0;      // engine-busy seconds in the window
  double kv_usage = 0;    // window means of the sampled gauges
  double running = 0;
  double waiting = 0;
  double waiting_tokens = 0;
};

// One normalized signal: 1.0 is at target (latencies), a full KV cache, a full batch waiting.
struct Pressure {
  std::string signal;   // "ttft:gold", "kv_usage", ...
  double value = 0;
  int64_t samples = 0;  // latency signals: samples in the window
  bool drives = false;  // counts toward the pressure (enabled and enough samples)
};

struct Signals {
  double window_s = 0;
  std::vector<TierSignals> tiers;
  std::vector<VariantSignals> variants;
  std::vector<Pressure> pressures;
  double pressure = 0;          // max over the driving signals (0 when none drives)
  std::string pressure_signal;  // the signal that gave it
};

// Thread-safe: records come from scheduler threads and output workers, snapshots from the
// controller. The tier and variant sets are fixed at construction; records for an unknown
// tier or variant are ignored.
class LoadMonitor {
 public:
  explicit LoadMonitor(LoadMonitorOptions options);

  void RecordQueueWait(std::string_view tier, double seconds, Clock::time_point now);
  void RecordTtft(std::string_view tier, double seconds, Clock::time_point now);
  void RecordTpot(std::string_view tier, double seconds, Clock::time_point now);
  // A sequence (or encoder input) finished on `variant`; `engine_error` when the engine
  // failed it (a failed step, non-finite outputs), not for timeouts, cancels or bad input.
  void RecordOutcome(int variant, bool engine_error, Clock::time_point now);
  void RecordBusy(int variant, double seconds, Clock::time_point now);
  void RecordLoad(int variant, double running, double waiting, double waiting_tokens, double kv_usage,
                  Clock::time_point now);
  // Forgets a variant's outcomes (an administrator cleared it).
  void ClearOutcomes(int variant);

  Signals Snapshot(Clock::time_point now) const;
  const LoadMonitorOptions& options() const { return options_; }
  int num_variants() const { return static_cast<int>(variants_.size()); }

 private:
  struct TierWindows {
    std::string name;
    ResolvedSlo slo;
    WindowedQuantiles queue_wait;
    WindowedQuantiles ttft;
    WindowedQuantiles tpot;
    TierWindows(std::string n, ResolvedSlo s, Clock::duration w)
        : name(std::move(n)), slo(s), queue_wait(w), ttft(w), tpot(w) {}
  };
  struct VariantWindows {
    WindowedStats outcomes;  // one sample per sequence: 1 for an engine error, 0 otherwise
    WindowedStats busy;
    WindowedStats kv_usage;
    WindowedStats running;
    WindowedStats waiting;
    WindowedStats waiting_tokens;
    explicit VariantWindows(Clock::duration w)
        : outcomes(w), busy(w), kv_usage(w), running(w), waiting(w), waiting_tokens(w) {}
  };
  TierWindows* FindTier(std::string_view tier);
  bool Drives(Signal s) const;

  const LoadMonitorOptions options_;
  std::vector<std::unique_ptr<TierWindows>> tiers_;          // fixed after construction
  std::unordered_map<std::string, TierWindows*> tier_index_;  // fixed after construction
  std::vector<std::unique_ptr<VariantWindows>> variants_;    // fixed after construction
};

}  // namespace ferry::qos
