// The QoS metric families, registered once per server into its ServerMetrics registry:
// which variant of each group is active, its switches and why, the pressure signals, the
// variants' health, and request, token and engine-error counters by variant.
#pragma once

#include <string_view>

#include "serve/metrics.h"

namespace ferry::serve {

// Thread-safe (the families are).
struct QosMetrics {
  explicit QosMetrics(MetricsRegistry& registry);

  GaugeFamily& active_variant;     // ferry:qos_active_variant {model_name, variant}: 1 for the active one
  CounterFamily& switches;         // ferry:qos_switches_total {model_name, from, to, reason}
  GaugeFamily& pressure;           // ferry:qos_pressure {model_name, signal}: 1.0 = at target; signal "max" drives
  GaugeFamily& healthy;            // ferry:qos_variant_healthy {model_name, variant}: 0 once rolled back
  CounterFamily& requests;         // ferry:qos_variant_requests_total {model_name, variant, tier}: admitted
  CounterFamily& moved;            // ferry:qos_moved_requests_total {model_name, from, to, tier}: waiting ones moved
  CounterFamily& prompt_tokens;    // ferry:qos_variant_prompt_tokens_total {model_name, variant}
  CounterFamily& generation_tokens;  // ferry:qos_variant_generation_tokens_total {model_name, variant}
  CounterFamily& engine_errors;    // ferry:qos_variant_engine_errors_total {model_name, variant}
  GaugeFamily& step_pacing_ms;     // ferry:qos_step_pacing_ms {model_name, variant}: 0 = unpaced
  CounterFamily& paced_waits;      // ferry:qos_paced_waits_total {model_name, variant}
  CounterFamily& paced_seconds;    // ferry:qos_paced_seconds_total {model_name, variant}
};

}  // namespace ferry::serve
