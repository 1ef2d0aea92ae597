// The batching limits of one served model, as the config file spells them. Plain values:
// the config parser fills them, the batchers validate and obey them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace ferry::sched {

// Decoders: continuous (iteration-level) batching with chunked prefill (vLLM's knobs).
// Whether a decoder step is planned and queued while the one before it still runs on the
// device (vLLM's async scheduling, TensorRT-LLM's overlap scheduler).
enum class AsyncScheduling {
  kAuto,  // on where the backend samples on the device (a GPU); off on the CPU
  kOn,    // also on the CPU (its steps still run one at a time: for tests)
  kOff,   // every step's tokens reach the host before the next step is planned
};

struct ContinuousBatchingOptions {
  int max_num_seqs = 16;              // sequences running at once (the KV cache holds this many at max_seq_len)
  int max_num_batched_tokens = 512;   // tokens per step: decode tokens first, prefill chunks after
  // Step-time target while sequences decode (step_time_model.h): -1 auto (2.5x a decode-only
  // step, learned online), 0 off (always max_num_batched_tokens), N: N milliseconds.
  int max_step_ms = -1;
  // The auto target's multiple of a decode-only step (>= 1): higher trades decode latency
  // for prefill throughput.
  double max_step_factor = 2.5;
  int max_seq_len = 0;                // prompt + generated; 0: the model's context (<= 4096)
  int kv_block_tokens = 16;
  int max_queue_requests = 256;       // waiting requests before 429
  int64_t max_queue_tokens = 262144;  // waiting prompt tokens before 429
  int64_t default_timeout_ms = 0;     // end-to-end limit per request; 0: none
  bool enable_prefix_caching = true;  // share and keep full KV blocks by content (vLLM's automatic prefix caching)
  // Longest a request may wait before it first runs: one that waits longer is refused
  // (429), and one whose estimated wait is longer is refused at once. 0: no limit.
  int64_t max_queue_time_ms = 30000;
  // A new request is refused at once when its estimated wait passes this fraction of
  // max_queue_time_ms. Below 1, so the estimate's error lands in the margin: a request admitted
  // at the edge would otherwise often wait past the limit and be refused after waiting it out.
  double admit_wait_fraction = 0.8;
  AsyncScheduling async_scheduling = AsyncScheduling::kAuto;

  Status Validate() const;
};

enum class TimeoutAction { kReject, kDelay };

// Triton's per-priority queue policy.
struct QueuePolicy {
  int64_t timeout_us = 0;  // 0: no timeout for requests that do not set one
  TimeoutAction timeout_action = TimeoutAction::kReject;
  bool allow_timeout_override = true;
  int max_queue_size = 0;  // 0: unbounded
};

// Encoders: Triton's dynamic batcher.
struct DynamicBatchingOptions {
  int max_batch_size = 32;
  int64_t max_queue_delay_us = 2000;
  std::vector<int> preferred_batch_sizes;  // ascending, each <= max_batch_size
  int priority_levels = 1;                 // priorities 1 (highest) .. priority_levels
  int default_priority_level = 1;
  QueuePolicy default_queue_policy;
  std::map<int, QueuePolicy> priority_queue_policy;  // per level, overriding the default

  Status Validate() const;
  const QueuePolicy& PolicyFor(int level) const;
};

}  // namespace ferry::sched
