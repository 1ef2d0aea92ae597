// Preload and warm-up: what `serve` does before it reports ready. Load the engine (mmap,
// checksums, packed weights); for a decoder, create its engine core (KV cache, step
// executor, scratch) for the configured limits; then run requests over every batch-size and
// sequence-length bucket through that core, so that page faults, thread start-up, buffer
// growth, library caches and step-graph recordings are paid before the first request.
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <string>
#include <vector>

#include "engine/encoder_runner.h"
#include "engine/engine.h"
#include "sched/engine_core.h"

namespace ferry::sched {

struct PreloadOptions {
  engine::EngineOptions engine;
  EngineCoreOptions core;            // decoders: batching limits, KV size, step graphs
  std::vector<int> decode_batches;   // decode buckets (default: GraphBatchBuckets(max_num_seqs))
  std::vector<int> prefill_lengths;  // prefill buckets (default: 16, 64, 256, ... max_num_batched_tokens)
  std::vector<int> encoder_batches{1, 8, 32};
  std::vector<int> encoder_lengths;  // default: 16, 64, ... the model's context
  int encoder_max_seq_len = 0;       // encoders: 0 = the model's context (<= 4096)
  bool warmup = true;
  // Only what makes the first request fast: one short prompt and a few decode steps at batch
  // 1 (decoders), one short batch of 1 (encoders) — threads started, the weights' pages
  // touched, the step's buffers grown. Every bucket otherwise (what CUDA step graphs need:
  // each decode batch size is recorded once).
  bool minimal_warmup = false;
  // Called on the loading thread as each phase starts: "allocate", "warmup".
  std::function<void(std::string_view phase)> on_phase;
};

// One warm-up pass: what it ran ("prefill 256", "decode batch 8", "encoder 8x64") and its time.
struct WarmupPass {
  std::string what;
  double ms = 0;
};

struct PreloadTimings {
  double load_ms = 0;      // engine/checkpoint load, weights prepared
  engine::LoadStats load;  // inside load_ms: bytes of weights, checksums, copies, the wait for them
  double allocate_ms = 0;  // KV cache and executor
  double warmup_ms = 0;    // all warm-up passes
  int warmup_passes = 0;
  std::vector<WarmupPass> passes;  // each pass, in the order run
  double total_ms() const { return load_ms + allocate_ms + warmup_ms; }
};

// Owns a ready engine (and a decoder's core); thread-compatible.
class PreloadedModel {
 public:
  static Result<std::unique_ptr<PreloadedModel>> Create(const std::string& name, const std::string& path,
                                                        const PreloadOptions& options);

  std::shared_ptr<engine::Engine> engine() const { return engine_; }
  EngineCore* core() const { return core_.get(); }  // null for encoders
  const PreloadTimings& timings() const { return timings_; }
  const PreloadOptions& options() const { return options_; }
  int max_seq_len() const { return max_seq_len_; }  // decoders: prompt + generated

 private:
  PreloadedModel() = default;
  Status Warmup();

  PreloadOptions options_;
  std::shared_ptr<engine::Engine> engine_;
  std::unique_ptr<EngineCore> core_;
  PreloadTimings timings_;
  int max_seq_len_ = 0;
};

}  // namespace ferry::sched
