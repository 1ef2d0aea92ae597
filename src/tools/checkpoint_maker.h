// Random-weight checkpoints with the exact shapes and Hugging Face layout of real models
// (config.json + sharded safetensors), for benchmarks: nothing is downloaded here.
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace ferry::tools {

struct CheckpointSpec {
  std::string preset;  // e.g. "llama-3.2-1b", "bert-base"
  DType dtype = DType::kBF16;
  uint64_t seed = 0;
  double shard_bytes = 2e9;  // split into shards of about this size
};

// Names of the known presets.
std::vector<std::string> CheckpointPresets();
// Writes the checkpoint into `dir` (created if needed).
Status MakeCheckpoint(const CheckpointSpec& spec, const std::string& dir);

}  // namespace ferry::tools
