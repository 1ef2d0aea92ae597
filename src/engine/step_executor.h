// One ragged decoder step: any mix of whole prompts, prefill chunks and decode tokens,
// each sequence adding a span of new tokens against its paged KV. The continuous batcher
// drives exactly this call.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "engine/kv_cache.h"
#include "model/decoder.h"

namespace ferry::engine {

struct SeqStep {
  int64_t seq_id = 0;
  std::span<const int32_t> tokens;  // new tokens this step
  int32_t start_pos = 0;            // position of tokens[0]; the cache holds [0, start_pos) already
  bool all_logits = false;          // logits for every new token, not only the last
};

// Step graphs for decode batches (backends that support them: CUDA graphs). A decode-only
// step of n sequences runs as the recording for the smallest batch bucket >= n, padded with
// rows that write into the cache's padding block; the first step of each bucket records it.
struct StepGraphOptions {
  int max_batch = 0;     // largest decode batch run as a graph; 0: graphs off
  int plan_context = 0;  // longest context a graphed step may have (longer: run eagerly)
};

// Decode batch sizes that get their own recording: 1, 2, 4, 8, then steps of about 1.5x
// (16, 24, 32, 48, 64, 96, ...), ending with max_batch itself.
std::vector<int> GraphBatchBuckets(int max_batch);

// Thread-compatible: one caller (the scheduler thread) at a time.
class StepExecutor {
 public:
  StepExecutor(model::DecoderModel& model, KvCache& cache);
  ~StepExecutor();
  StepExecutor(const StepExecutor&) = delete;
  StepExecutor& operator=(const StepExecutor&) = delete;

  // Turns step graphs on (when the backend supports them) or off (max_batch 0).
  void SetGraphOptions(const StepGraphOptions& options);
  const StepGraphOptions& graph_options() const { return graph_options_; }

  // Reserves KV for every sequence (ResourceExhausted, with nothing reserved by this call
  // kept, when the cache is full), runs the model, and returns host f32 logits: for each
  // step in order, one row (its last token) or tokens.size() rows when all_logits.
  Result<Tensor> Step(const std::vector<SeqStep>& steps);

  // The same step, then one token per step sampled where the logits are (backends with
  // samples_on_device(); no all_logits steps): only token ids reach the host. A step whose
  // logits are not all finite gets -1.
  Result<std::vector<int32_t>> StepAndSample(const std::vector<SeqStep>& steps,
                                             std::span<const backend::TokenSampling> sampling);

  KvCache& cache() { return cache_; }
  model::DecoderModel& model() { return model_; }
  // Steps that ran as a step graph (captures and replays), for reports and tests.
  int64_t graphed_steps() const { return graphed_steps_; }

 private:
  // Reserves, builds the batch and runs the model: `logits` gets the wanted rows on the
  // device (the first `rows` of it; a graphed step has padding rows after them).
  Status Run(const std::vector<SeqStep>& steps, Tensor& logits, int64_t& rows);

  model::DecoderModel& model_;
  KvCache& cache_;
  const int64_t graph_owner_;  // unique per executor: its recordings use its KV cache
  model::DecoderBatch batch_;  // reused between steps so steady state does not allocate
  StepGraphOptions graph_options_;
  std::vector<int> graph_buckets_;
  std::vector<int32_t> padding_table_;  // the block table of a padding row
  int64_t graphed_steps_ = 0;
};

}  // namespace ferry::engine
