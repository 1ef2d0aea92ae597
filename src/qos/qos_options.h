// The options of one QoS variant group, as the server's config spells them under a model's
// `qos:` key (and a tier's `min_variant` / `slo`). Plain values: serve/config.cc fills them,
// the controller obeys them. docs/serving-config.md describes each.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ferry::qos {

// Latency targets. An unset field falls back to the next level (tier → group default →
// built-in default); see EffectiveSlo.
struct SloTargets {
  std::optional<double> ttft_ms;   // time to first token (encoders: time to the result)
  std::optional<double> tpot_ms;   // time per output token after the first (decoders)
  std::optional<double> queue_ms;  // arrival to first scheduled; unset: the TTFT target
};

// What one tier asks of a group.
struct TierRule {
  std::optional<std::string> min_variant;  // the tier's requests never run below this variant
  SloTargets slo;
};

struct RollbackOptions {
  double error_rate = 0.05;  // errors / sequences in the window above which a variant is unhealthy
  int min_errors = 3;        // ... and at least this many errors in the window
  // A prompt whose greedy output (decoders) or output row (encoders) each lower variant is
  // checked against the top variant's, at startup and every canary_interval_s. Empty: off.
  std::string canary_prompt;
  int canary_tokens = 16;               // decoders: greedy tokens compared
  double canary_min_agreement = 0.75;   // decoders: teacher-forced top-1 agreement with the top variant
  double canary_min_cosine = 0.99;      // encoders: cosine similarity of the output rows
  double canary_interval_s = 60;        // 0: at startup only
};

// The load signals the controller can act on (all are measured and exported).
enum class Signal {
  kQueueWait,      // per tier: p95 queue wait / its queue target
  kTtft,           // per tier: p95 time to first token / its TTFT target
  kTpot,           // per tier: p95 time per output token / its TPOT target
  kKvUsage,        // fullest KV cache of the group's variants, 0..1
  kWaiting,        // waiting requests / the top variant's max_num_seqs (encoders: max_batch_size)
  kWaitingTokens,  // waiting prompt tokens / the top variant's max_num_batched_tokens
  kUtilization,    // engine-busy seconds per second, summed over the variants
};
std::string_view SignalName(Signal signal);  // "queue_wait", "ttft", ...
Result<Signal> ParseSignal(std::string_view name);

// qos.inactive_step_ms: the step pacing of the decoder variants new requests are not being
// steered to (tier-floor traffic, sequences draining after a switch).
struct InactivePacing {
  enum class Mode { kAuto, kOff, kFixed };
  Mode mode = Mode::kAuto;
  double ms = 0;  // kFixed: the interval
};
// kAuto's interval as a fraction of the smallest TPOT target: a paced tier's TPOT pressure is
// then about this, which a move up projects (times the rung's measured cost) against
// upgrade_below.
inline constexpr double kAutoPaceFraction = 0.5;
// ... lowered where a ladder's rung is so much cheaper than the one above that even that
// projection would pass this share of upgrade_below.
inline constexpr double kPaceProjectedShare = 0.75;
inline constexpr double kMaxInactiveStepMs = 10000;

// A setting that is auto, on or off.
enum class AutoSwitch { kAuto, kOn, kOff };
// qos.step_turns: whether the decoder variants of a group that share one device take turns
// step by step (sched::StepTurns). kAuto: on for GPUs, off on the CPU.
using StepTurnsMode = AutoSwitch;

struct QosOptions {
  double window_s = 10;          // sliding window of every signal
  double downgrade_above = 0.85;  // move one rung down when the pressure exceeds this
  double upgrade_below = 0.70;    // move one rung up when the (projected) pressure is below this
  double min_dwell_s = 30;        // no automatic move sooner than this after the last switch
  int64_t tick_ms = 250;          // how often the controller decides
  int min_samples = 10;           // latency signals with fewer samples in the window are not used
  // Scale the pressure by the measured cost of the rung above before deciding to move up,
  // so that a variant twice as fast does not move up into an overload it just left.
  bool project_upgrade = true;
  std::vector<Signal> signals = {Signal::kQueueWait, Signal::kTtft, Signal::kTpot, Signal::kKvUsage};
  SloTargets slo;                           // the group's default targets
  InactivePacing inactive_step;             // pacing of the variants not active
  StepTurnsMode step_turns = StepTurnsMode::kAuto;
  // qos.share_cores: whether the decoder variants of a group on the CPU split its cores while
  // more than one has work (sched::CoreShare). kAuto: on for the CPU variants that do not take
  // step turns; kOn is the same (a GPU has no cores to split).
  AutoSwitch share_cores = AutoSwitch::kAuto;
  RollbackOptions rollback;
  std::map<std::string, TierRule> tiers;    // per-tier rules of this group (over the global ones)

  // Ranges and combinations; messages name the key relative to `qos`.
  Status Validate() const;
};

// Built-in targets when neither the tier nor the group sets one.
inline constexpr double kDefaultTtftMs = 1000;
inline constexpr double kDefaultTpotMs = 100;

// Field by field: `tier` over `group` over the built-in defaults; queue_ms falls back to
// the resulting TTFT target.
struct ResolvedSlo {
  double ttft_ms = kDefaultTtftMs;
  double tpot_ms = kDefaultTpotMs;
  double queue_ms = kDefaultTtftMs;
};
ResolvedSlo EffectiveSlo(const SloTargets& group, const SloTargets& tier);

// The step pacing, in milliseconds (0 = off), of a group's inactive decoder variants.
// `tpot_targets_ms`: the TPOT targets set in the config (the group's slo.tpot_ms and the
// tiers' own; the built-in default does not count); `max_upgrade_cost`: the largest measured
// cost ratio of a rung to the one below it (1 when unknown or not projected). kAuto: the
// smallest target times kAutoPaceFraction, or less where `pace / target * max_upgrade_cost`
// would exceed kPaceProjectedShare of upgrade_below; 0 without a target.
double InactiveStepMs(const QosOptions& options, const std::vector<double>& tpot_targets_ms, double max_upgrade_cost);

}  // namespace ferry::qos
