// Offline generation over the step executor: used by the CLI, tests and benchmarks. The
// server's continuous batcher drives StepExecutor directly instead.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "engine/sampler.h"
#include "engine/step_executor.h"

namespace ferry::engine {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 16;
  std::vector<int32_t> stop_ids;  // generation ends after emitting one of these
  bool keep_first_logits = false;
};

struct GenerateResult {
  std::vector<int32_t> tokens;
  std::string finish_reason;       // "stop" or "length"
  std::vector<float> first_logits;  // logits that chose tokens[0] (when asked)
};

struct RunnerOptions {
  int max_seq_len = 0;       // 0: the model's context, capped at 4096
  int max_batch_seqs = 8;    // sequences the KV cache is sized for
  int block_tokens = 16;
  int prefill_chunk = 0;     // 0: whole prompts in one step; else chunked prefill of this size
  bool step_graphs = true;   // decode steps as recorded graphs, where the backend supports them
};

// Thread-compatible. Owns a KV cache sized for max_batch_seqs sequences of max_seq_len.
class DecoderRunner {
 public:
  static Result<std::unique_ptr<DecoderRunner>> Create(std::shared_ptr<Engine> engine, const RunnerOptions& options);

  // Runs several requests together: one ragged step per iteration (all prompts prefilled
  // together, then one decode token per live sequence per step).
  Result<std::vector<GenerateResult>> Generate(const std::vector<GenerateRequest>& requests);

  StepExecutor& executor() { return *executor_; }
  KvCache& cache() { return *cache_; }
  const RunnerOptions& options() const { return options_; }

 private:
  DecoderRunner() = default;

  std::shared_ptr<Engine> engine_;
  RunnerOptions options_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<StepExecutor> executor_;
  int64_t next_seq_id_ = 1;
};

// Encoder helpers: run texts (already tokenized with special tokens) through the encoder.
struct EncodedInput {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;
};
enum class Pooling { kCls, kMean };

// Classification logits [inputs, labels] (host f32).
Result<Tensor> Classify(const Engine& engine, const std::vector<EncodedInput>& inputs);
// Sentence embeddings [inputs, hidden]: CLS row or mean over tokens, optionally L2-normalised.
Result<Tensor> Embed(const Engine& engine, const std::vector<EncodedInput>& inputs, Pooling pooling, bool normalize);

}  // namespace ferry::engine
