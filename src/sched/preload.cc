#include "sched/preload.h"

#include <algorithm>
#include <chrono>

#include "sched/kv_sizing.h"

namespace ferry::sched {

namespace {

using SteadyClock = std::chrono::steady_clock;
double Ms(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::vector<int> PowersUpTo(int first, int limit, int factor) {
  std::vector<int> v;
  for (int x = first; x < limit; x *= factor) v.push_back(x);
  v.push_back(limit);
  return v;
}

// A deterministic, valid token id sequence for warm-up passes.
std::vector<int32_t> WarmupIds(int n, int vocab) {
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7919 + 13) % vocab);
  return ids;
}

}  // namespace

Result<std::unique_ptr<PreloadedModel>> PreloadedModel::Create(const std::string& name, const std::string& path,
                                                               const PreloadOptions& o) {
  std::unique_ptr<PreloadedModel> p(new PreloadedModel());
  p->options_ = o;
  auto t0 = SteadyClock::now();
  // A memory budget that cannot be met is refused before any weight is read.
  KvSizingOptions budget;
  budget.gpu_memory_utilization = o.core.gpu_memory_utilization;
  budget.host_memory_budget_bytes = o.core.host_memory_budget_bytes;
  FERRY_RETURN_IF_ERROR(PrecheckMemoryBudget(name, path, o.engine.device, budget));
  FERRY_ASSIGN_OR_RETURN(p->engine_, engine::Engine::Load(path, o.engine));
  auto t1 = SteadyClock::now();
  p->timings_.load_ms = Ms(t0, t1);
  p->timings_.load = p->engine_->load_stats();
  if (o.on_phase) o.on_phase("allocate");
  const io::ModelConfig& c = p->engine_->config();
  if (p->engine_->is_decoder()) {
    FERRY_ASSIGN_OR_RETURN(p->core_, EngineCore::Create(name, p->engine_, o.core));
    p->max_seq_len_ = p->core_->max_seq_len();
    const ContinuousBatchingOptions& b = p->core_->options();
    // Every decode batch bucket, so that each step graph is recorded before the first request.
    if (p->options_.decode_batches.empty()) p->options_.decode_batches = engine::GraphBatchBuckets(b.max_num_seqs);
    if (p->options_.prefill_lengths.empty()) {
      p->options_.prefill_lengths = PowersUpTo(16, std::min(b.max_num_batched_tokens, p->max_seq_len_ - 1), 4);
    }
  } else {
    int max_seq = o.encoder_max_seq_len;
    if (max_seq <= 0 && p->engine_->build_info() != nullptr) max_seq = p->engine_->build_info()->max_seq_len;
    if (max_seq <= 0) max_seq = std::min(c.max_position_embeddings, 4096);
    p->max_seq_len_ = std::min(max_seq, c.max_position_embeddings);
    if (p->options_.encoder_lengths.empty()) p->options_.encoder_lengths = PowersUpTo(16, p->max_seq_len_, 4);
  }
  auto t2 = SteadyClock::now();
  p->timings_.allocate_ms = Ms(t1, t2);
  if (o.warmup && o.on_phase) o.on_phase("warmup");
  if (o.warmup) FERRY_RETURN_IF_ERROR(p->Warmup());
  p->timings_.warmup_ms = Ms(t2, SteadyClock::now());
  return p;
}

Status PreloadedModel::Warmup() {
  const int vocab = engine_->config().vocab_size;
  auto pass_start = SteadyClock::now();
  auto record = [&](std::string what) {
    const auto now = SteadyClock::now();
    timings_.passes.push_back(WarmupPass{std::move(what), Ms(pass_start, now)});
    ++timings_.warmup_passes;
    pass_start = now;
  };
  if (options_.minimal_warmup) {
    const int len = std::min(16, max_seq_len_ - 4);
    if (core_ != nullptr) {
      if (len <= 0) return Status::Ok();
      FERRY_ASSIGN_OR_RETURN(std::vector<GenerationEvent> out,
                             GenerateAll(*core_, {FixedLengthGreedy("warmup", WarmupIds(len, vocab), 3)}));
      if (!out[0].error.ok()) return out[0].error;
      record("prefill " + std::to_string(len) + " + 2 decode steps at batch 1");
      return Status::Ok();
    }
    const int elen = std::min(16, max_seq_len_);
    std::vector<engine::EncodedInput> inputs(1, engine::EncodedInput{WarmupIds(elen, vocab), std::vector<int32_t>(elen, 0)});
    FERRY_ASSIGN_OR_RETURN(Tensor emb, engine::Embed(*engine_, inputs, engine::Pooling::kCls, false));
    record("encoder 1x" + std::to_string(elen));
    return Status::Ok();
  }
  if (core_ != nullptr) {
    // Prefill buckets: one request of each length (the largest sizes scratch for the rest).
    std::vector<int> lengths = options_.prefill_lengths;
    std::sort(lengths.rbegin(), lengths.rend());
    for (int len : lengths) {
      len = std::min(len, max_seq_len_ - 1);
      if (len <= 0) continue;
      FERRY_ASSIGN_OR_RETURN(std::vector<GenerationEvent> out,
                             GenerateAll(*core_, {FixedLengthGreedy("warmup", WarmupIds(len, vocab), 1)}));
      if (!out[0].error.ok()) return out[0].error;
      record("prefill " + std::to_string(len));
    }
    // Decode buckets: `batch` requests with a short prompt, long enough that at least two
    // steps decode the whole batch after the last prompt is in (the first runs a bucket
    // eagerly, the second records its graph).
    const int prompt_len = std::min(16, max_seq_len_ / 2);
    const int budget = core_->options().max_num_batched_tokens;
    for (int batch : options_.decode_batches) {
      const int prefill_steps = (batch * prompt_len + budget - 1) / budget;
      const int max_tokens = std::min(3 + prefill_steps, max_seq_len_ - prompt_len);
      std::vector<GenerationRequest> requests;
      for (int b = 0; b < batch; ++b) {
        requests.push_back(FixedLengthGreedy("warmup", WarmupIds(prompt_len, vocab), max_tokens));
      }
      FERRY_ASSIGN_OR_RETURN(std::vector<GenerationEvent> out, GenerateAll(*core_, std::move(requests)));
      for (const GenerationEvent& ev : out) {
        if (!ev.error.ok()) return ev.error;
      }
      record("decode batch " + std::to_string(batch));
    }
    return Status::Ok();
  }
  for (int batch : options_.encoder_batches) {
    for (int len : options_.encoder_lengths) {
      std::vector<engine::EncodedInput> inputs(
          batch, engine::EncodedInput{WarmupIds(len, vocab), std::vector<int32_t>(len, 0)});
      FERRY_ASSIGN_OR_RETURN(Tensor emb, engine::Embed(*engine_, inputs, engine::Pooling::kCls, false));
      record("encoder " + std::to_string(batch) + "x" + std::to_string(len));
    }
  }
  return Status::Ok();
}

}  // namespace ferry::sched
