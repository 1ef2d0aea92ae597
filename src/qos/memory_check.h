// The up-front memory check of a variant group: every variant's weights and KV cache,
// estimated from its files and serving options before anything is loaded, against the
// memory the host (and each GPU) has available. A group that cannot fit is refused with
// the sizes named, instead of failing halfway through loading its third variant.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/device_spec.h"
#include "core/dtype.h"
#include "core/status.h"
#include "sched/batching_options.h"

namespace ferry::qos {

// What the estimate needs of one variant (serve's ModelConfig, flattened).
struct VariantPlan {
  std::string variant;
  std::string path;  // checkpoint directory, GGUF file or engine file
  DeviceSpec device = DeviceSpec::Cpu();
  DType activations = DType::kBF16;        // GPU: a checkpoint's activation dtype
  std::optional<DType> kv_cache_dtype;     // GPU: unset = the activations'
  sched::ContinuousBatchingOptions batching;
};

struct MemoryNeed {
  std::string variant;
  std::string device;  // DeviceSpec::ToString()
  int64_t weights_bytes = 0;
  int64_t kv_bytes = 0;  // decoders: the KV cache the batching options allocate; encoders: 0
  int64_t total() const { return weights_bytes + kv_bytes; }
};

struct MemoryBudget {
  std::string device;          // "cpu" (host memory) or "cuda:N"
  int64_t available_bytes = 0;
  int64_t total_bytes = 0;
  std::string source;          // where the numbers come from ("/proc/meminfo", "cgroup", "cudaMemGetInfo")
};

// Weights: the engine file's size, or the checkpoint's safetensors (halved on a GPU for
// an f32 checkpoint served with 16-bit activations). KV: blocks for max_num_seqs sequences
// of max_seq_len (resolved as the engine core does), both K and V, every layer.
Result<MemoryNeed> EstimateMemory(const VariantPlan& plan);

// Host: MemAvailable, lowered to the cgroup's limit minus its usage when that is smaller.
// CUDA: the device's free and total memory (Unavailable without the CUDA backend).
Result<MemoryBudget> QueryMemory(const DeviceSpec& device);

// Each device's variants together must fit in `usable_fraction` of its available memory
// (the rest is left for activations, scratch and the other models). ResourceExhausted
// naming every variant's weights and KV and the device's available and total memory.
Status CheckGroupMemory(const std::string& group, const std::vector<MemoryNeed>& needs,
                        const std::vector<MemoryBudget>& budgets, double usable_fraction = 0.9);

// "1.50 GiB", "640.0 MiB", "12 KiB", "100 B".
std::string FormatBytes(int64_t bytes);

}  // namespace ferry::qos
