// Latency of single requests on a preloaded model: the first request after ready versus
// the steady state (`ferry bench coldstart`).
#pragma once

#include <vector>

#include "sched/preload.h"

namespace ferry::tools {

struct RequestLatencyOptions {
  int requests = 100;     // measured after the first
  int prompt_tokens = 32; // decoder prompt / encoder input length
  int max_tokens = 8;     // decoder tokens generated per request
};

struct RequestLatencies {
  double first_ms = 0;
  std::vector<double> rest_ms;
  double median_rest_ms() const;
};

// Runs 1 + options.requests requests one after another (each a fresh sequence: prefill
// and max_tokens greedy decode steps through the model's engine core, or one encoder
// embedding).
Result<RequestLatencies> MeasureRequestLatencies(sched::PreloadedModel& model, const RequestLatencyOptions& options);

}  // namespace ferry::tools
