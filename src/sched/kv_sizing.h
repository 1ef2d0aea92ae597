// Sizing a decoder's KV cache on its device: measures what DecideKvBlocks (kv_budget.h)
// needs — the weights held, the activation peak of the largest step (a profiling step on a
// GPU, vLLM's profile run; an estimate on the host) — and returns the blocks to allocate.
#pragma once

#include <cstdint>
#include <string>

#include "core/device_spec.h"
#include "core/status.h"
#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "sched/batching_options.h"
#include "sched/kv_budget.h"

namespace ferry::sched {

struct KvSizingOptions {
  double gpu_memory_utilization = 0;    // GPU: this fraction of the device's memory is the budget
  int64_t host_memory_budget_bytes = 0; // host: the budget
  int default_seqs = 0;                 // sequences of max_seq_len the cache holds without a budget
};

// Before anything is loaded: refuses (ResourceExhausted, naming the sizes) a GPU model whose
// gpu_memory_utilization share is not free on its device, and a host model whose weights
// (the checkpoint's or engine file's size) already exceed its host budget.
Status PrecheckMemoryBudget(const std::string& name, const std::string& path, const DeviceSpec& device,
                            const KvSizingOptions& options);

// `kc` describes the cache (its num_blocks is ignored); the result's blocks are what to
// allocate. Logs the decision.
Result<KvBudgetDecision> SizeKvCache(const std::string& name, engine::Engine& engine,
                                     const engine::KvCacheConfig& kc, const ContinuousBatchingOptions& batching,
                                     int max_seq_len, const KvSizingOptions& options);

// The host's estimate of a step's activations: max_num_batched_tokens rows of the widest
// intermediate buffers of a block, and max_num_seqs rows of logits with their sampling copies.
int64_t EstimateActivationBytes(const io::ModelConfig& config, const ContinuousBatchingOptions& batching,
                                size_t activation_dtype_bytes);

}  // namespace ferry::sched
