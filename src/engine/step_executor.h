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

// Thread-compatible: one caller (the scheduler thread) at a time.
class StepExecutor {
 public:
  StepExecutor(model::DecoderModel& model, KvCache& cache) : model_(model), cache_(cache) {}

  // Reserves KV for every sequence (ResourceExhausted, with nothing reserved by this call
  // kept, when the cache is full), runs the model, and returns host f32 logits: for each
  // step in order, one row (its last token) or tokens.size() rows when all_logits.
  Result<Tensor> Step(const std::vector<SeqStep>& steps);

  KvCache& cache() { return cache_; }
  model::DecoderModel& model() { return model_; }

 private:
  model::DecoderModel& model_;
  KvCache& cache_;
  model::DecoderBatch batch_;  // reused between steps so steady state does not allocate
};

}  // namespace ferry::engine
