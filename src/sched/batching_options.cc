#include "sched/batching_options.h"

#include <string>

namespace ferry::sched {

Status ContinuousBatchingOptions::Validate() const {
  if (max_num_seqs <= 0) return InvalidArgument("max_num_seqs must be positive");
  if (max_num_batched_tokens <= 0) return InvalidArgument("max_num_batched_tokens must be positive");
  if (max_num_batched_tokens < max_num_seqs) {
    return InvalidArgument("max_num_batched_tokens (" + std::to_string(max_num_batched_tokens) +
                           ") must be at least max_num_seqs (" + std::to_string(max_num_seqs) +
                           ") so every running sequence can decode each step");
  }
  if (max_step_ms < -1) return InvalidArgument("max_step_ms must be auto, off (0) or a positive number of milliseconds");
  if (!(max_step_factor >= 1.0 && max_step_factor <= 1000.0)) {
    return InvalidArgument("max_step_factor must be in [1, 1000], got " + std::to_string(max_step_factor));
  }
  if (max_seq_len < 0) return InvalidArgument("max_seq_len must be >= 0");
  if (kv_block_tokens <= 0 || kv_block_tokens > 1024) return InvalidArgument("kv_block_tokens must be in [1, 1024]");
  if (max_queue_requests <= 0) return InvalidArgument("max_queue_requests must be positive");
  if (max_queue_tokens <= 0) return InvalidArgument("max_queue_tokens must be positive");
  if (default_timeout_ms < 0) return InvalidArgument("default_timeout_ms must be >= 0");
  if (max_queue_time_ms < 0) return InvalidArgument("max_queue_time_ms must be >= 0");
  if (!(admit_wait_fraction > 0 && admit_wait_fraction <= 1)) {
    return InvalidArgument("admit_wait_fraction must be in (0, 1], got " + std::to_string(admit_wait_fraction));
  }
  return Status::Ok();
}

Status DynamicBatchingOptions::Validate() const {
  if (max_batch_size <= 0) return InvalidArgument("max_batch_size must be positive");
  if (max_queue_delay_us < 0) return InvalidArgument("max_queue_delay_us must be >= 0");
  int previous = 0;
  for (int size : preferred_batch_sizes) {
    if (size <= previous || size > max_batch_size) {
      return InvalidArgument("preferred_batch_sizes must be ascending and within [1, max_batch_size]");
    }
    previous = size;
  }
  if (priority_levels <= 0) return InvalidArgument("priority_levels must be positive");
  if (default_priority_level < 1 || default_priority_level > priority_levels) {
    return InvalidArgument("default_priority_level must be within [1, priority_levels]");
  }
  for (const auto& [level, policy] : priority_queue_policy) {
    if (level < 1 || level > priority_levels) {
      return InvalidArgument("priority_queue_policy level " + std::to_string(level) + " is outside [1, " +
                             std::to_string(priority_levels) + "]");
    }
    if (policy.timeout_us < 0 || policy.max_queue_size < 0) {
      return InvalidArgument("queue policy values must be >= 0");
    }
  }
  if (default_queue_policy.timeout_us < 0 || default_queue_policy.max_queue_size < 0) {
    return InvalidArgument("queue policy values must be >= 0");
  }
  return Status::Ok();
}

const QueuePolicy& DynamicBatchingOptions::PolicyFor(int level) const {
  auto it = priority_queue_policy.find(level);
  return it == priority_queue_policy.end() ? default_queue_policy : it->second;
}

}  // namespace ferry::sched
