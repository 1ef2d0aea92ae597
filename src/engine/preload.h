// Preload and warm-up: what `serve` does before it reports ready. Load the engine (mmap,
// checksums, packed weights), allocate the KV cache and scratch for the configured limits,
// then run a pass over every batch-size and sequence-length bucket so that page faults,
// thread start-up, buffer growth and library caches are paid before the first request.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/generator.h"

namespace ferry::engine {

struct PreloadOptions {
  EngineOptions engine;
  int max_seq_len = 0;       // 0: the engine's build setting, else the model's context (<= 4096)
  int max_batch_seqs = 8;    // decoder: sequences the KV cache holds
  int max_batch_tokens = 0;  // decoder: tokens per step (0: max_seq_len)
  int block_tokens = 16;
  std::vector<int> decode_batches;  // decode buckets (default: GraphBatchBuckets(max_batch_seqs))
  std::vector<int> prefill_lengths; // prefill buckets (default: 16, 64, 256, ... max_batch_tokens)
  std::vector<int> encoder_batches{1, 8, 32};
  std::vector<int> encoder_lengths; // default: 16, 64, ... the model's context
  bool warmup = true;
  bool step_graphs = true;  // decode steps as recorded graphs where the backend has them (CUDA)
};

struct PreloadTimings {
  double load_ms = 0;      // engine/checkpoint load, weights prepared
  double allocate_ms = 0;  // KV cache and runner
  double warmup_ms = 0;    // all warm-up passes
  int warmup_passes = 0;
  double total_ms() const { return load_ms + allocate_ms + warmup_ms; }
};

// Owns a ready engine; thread-compatible (the server's scheduler thread uses it).
class PreloadedModel {
 public:
  static Result<std::unique_ptr<PreloadedModel>> Create(const std::string& path, const PreloadOptions& options);

  std::shared_ptr<Engine> engine() const { return engine_; }
  DecoderRunner* runner() const { return runner_.get(); }  // null for encoders
  const PreloadTimings& timings() const { return timings_; }
  const PreloadOptions& options() const { return options_; }

 private:
  PreloadedModel() = default;
  Status Warmup();

  PreloadOptions options_;
  std::shared_ptr<Engine> engine_;
  std::unique_ptr<DecoderRunner> runner_;
  PreloadTimings timings_;
};

}  // namespace ferry::engine
