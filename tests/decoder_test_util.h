// Test helpers over a decoder engine: raw steps with host logits (reserving the KV blocks as
// the scheduler would), and greedy or sampled generation through an engine core.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "engine/step_executor.h"
#include "sched/engine_core.h"

namespace ferry::testing {

// One sequence's part of a raw step: new tokens at start_pos; `all_logits` asks for every
// row, not only the last.
struct RawStep {
  int64_t seq_id = 0;
  std::span<const int32_t> tokens;
  int32_t start_pos = 0;
  bool all_logits = false;
};

struct Generated {
  std::vector<int32_t> tokens;
  std::string finish_reason;
  std::vector<float> first_logits;  // when asked for
  Status error;
};

// A KV cache and step executor of its own over `engine`, plus an engine core for generation.
class DecoderHarness {
 public:
  static std::unique_ptr<DecoderHarness> Create(std::shared_ptr<engine::Engine> engine, int seqs, int max_seq_len,
                                                bool graphs = false, int block_tokens = 16) {
    auto h = std::unique_ptr<DecoderHarness>(new DecoderHarness());
    h->engine_ = engine;
    const io::ModelConfig& c = engine->config();
    engine::KvCacheConfig kc;
    kc.num_layers = c.num_layers;
    kc.num_kv_heads = c.num_kv_heads;
    kc.head_dim = c.head_dim;
    kc.block_tokens = block_tokens;
    kc.num_blocks = seqs * ((max_seq_len + block_tokens - 1) / block_tokens);
    kc.dtype = engine->backend().kv_cache_dtype();
    auto cache = engine::KvCache::Create(kc, engine->backend());
    if (!cache.ok()) return nullptr;
    h->cache_ = std::move(cache).value();
    h->executor_ = std::make_unique<engine::StepExecutor>(*engine->decoder(), *h->cache_);
    if (graphs) h->executor_->SetGraphOptions(engine::StepGraphOptions{seqs, max_seq_len});
    sched::EngineCoreOptions co;
    co.batching.max_num_seqs = seqs;
    co.batching.max_seq_len = max_seq_len;
    co.batching.max_num_batched_tokens = std::max(seqs, 1) * max_seq_len;
    co.batching.kv_block_tokens = block_tokens;
    co.batching.max_queue_tokens = static_cast<int64_t>(seqs) * max_seq_len * 4 + 1;
    co.step_graphs = graphs;
    auto core = sched::EngineCore::Create("test", engine, co);
    if (!core.ok()) return nullptr;
    h->core_ = std::move(core).value();
    return h;
  }

  // Reserves each sequence's blocks (as the scheduler does), runs the step and returns its
  // host logits: one row per step, or tokens.size() rows with all_logits.
  Result<Tensor> Step(const std::vector<RawStep>& raw) {
    std::vector<engine::SeqStep> steps;
    for (const RawStep& r : raw) {
      FERRY_RETURN_IF_ERROR(cache_->Reserve(r.seq_id, r.start_pos + static_cast<int32_t>(r.tokens.size())));
      engine::SeqStep s;
      s.seq_id = r.seq_id;
      s.tokens = r.tokens;
      s.start_pos = r.start_pos;
      if (r.all_logits) s.targets = r.tokens;  // any targets ask for every row
      steps.push_back(s);
    }
    return executor_->Logits(steps);
  }

  // Runs the requests together through the engine core.
  Result<std::vector<Generated>> Generate(std::vector<sched::GenerationRequest> requests) {
    FERRY_ASSIGN_OR_RETURN(std::vector<sched::GenerationEvent> out, sched::GenerateAll(*core_, std::move(requests)));
    std::vector<Generated> results;
    for (sched::GenerationEvent& ev : out) {
      Generated g;
      for (const auto& t : ev.tokens) g.tokens.push_back(t.token);
      g.finish_reason = sched::FinishReasonName(ev.finish_reason);
      g.first_logits = std::move(ev.logits);
      g.error = ev.error;
      results.push_back(std::move(g));
    }
    return results;
  }

  // Greedy generation of one prompt.
  Result<std::vector<int32_t>> Greedy(const std::vector<int32_t>& prompt, int max_tokens,
                                      std::vector<int32_t> stop_ids = {}) {
    sched::GenerationRequest r;
    r.prompt = prompt;
    r.sampling.temperature = 0;
    r.max_tokens = max_tokens;
    r.stop_ids = std::move(stop_ids);
    FERRY_ASSIGN_OR_RETURN(std::vector<Generated> g, Generate({r}));
    if (!g[0].error.ok()) return g[0].error;
    return g[0].tokens;
  }

  engine::KvCache& cache() { return *cache_; }
  engine::StepExecutor& executor() { return *executor_; }
  sched::EngineCore& core() { return *core_; }

 private:
  DecoderHarness() = default;
  std::shared_ptr<engine::Engine> engine_;
  std::unique_ptr<engine::KvCache> cache_;
  std::unique_ptr<engine::StepExecutor> executor_;
  std::unique_ptr<sched::EngineCore> core_;
};

}  // namespace ferry::testing
