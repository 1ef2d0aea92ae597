#include "engine/preload.h"

#include <algorithm>
#include <chrono>

namespace ferry::engine {

namespace {

using Clock = std::chrono::steady_clock;
double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

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

Result<std::unique_ptr<PreloadedModel>> PreloadedModel::Create(const std::string& path, const PreloadOptions& o) {
  std::unique_ptr<PreloadedModel> p(new PreloadedModel());
  p->options_ = o;
  auto t0 = Clock::now();
  FERRY_ASSIGN_OR_RETURN(p->engine_, Engine::Load(path, o.engine));
  auto t1 = Clock::now();
  p->timings_.load_ms = Ms(t0, t1);
  const io::ModelConfig& c = p->engine_->config();
  int max_seq = o.max_seq_len;
  if (max_seq <= 0 && p->engine_->build_info() != nullptr) max_seq = p->engine_->build_info()->max_seq_len;
  if (max_seq <= 0) max_seq = std::min(c.max_position_embeddings, 4096);
  max_seq = std::min(max_seq, c.max_position_embeddings);
  p->options_.max_seq_len = max_seq;
  if (p->options_.max_batch_tokens <= 0) p->options_.max_batch_tokens = max_seq;
  if (p->engine_->is_decoder()) {
    RunnerOptions ro;
    ro.max_seq_len = max_seq;
    ro.max_batch_seqs = o.max_batch_seqs;
    ro.block_tokens = o.block_tokens;
    ro.step_graphs = o.step_graphs;
    FERRY_ASSIGN_OR_RETURN(p->runner_, DecoderRunner::Create(p->engine_, ro));
    // Every decode batch bucket, so that each step graph is recorded before the first request.
    if (p->options_.decode_batches.empty()) p->options_.decode_batches = GraphBatchBuckets(o.max_batch_seqs);
    if (p->options_.prefill_lengths.empty()) {
      p->options_.prefill_lengths = PowersUpTo(16, std::min(p->options_.max_batch_tokens, max_seq), 4);
    }
  } else if (p->options_.encoder_lengths.empty()) {
    p->options_.encoder_lengths = PowersUpTo(16, max_seq, 4);
  }
  auto t2 = Clock::now();
  p->timings_.allocate_ms = Ms(t1, t2);
  if (o.warmup) FERRY_RETURN_IF_ERROR(p->Warmup());
  p->timings_.warmup_ms = Ms(t2, Clock::now());
  return p;
}

Status PreloadedModel::Warmup() {
  const int vocab = engine_->config().vocab_size;
  if (runner_ != nullptr) {
    StepExecutor& ex = runner_->executor();
    KvCache& cache = runner_->cache();
    // Prefill buckets: one sequence of each length (the largest sizes scratch for the rest).
    std::vector<int> lengths = options_.prefill_lengths;
    std::sort(lengths.rbegin(), lengths.rend());
    for (int len : lengths) {
      const std::vector<int32_t> ids = WarmupIds(len, vocab);
      FERRY_ASSIGN_OR_RETURN(Tensor logits, ex.Step({SeqStep{-1, ids, 0, false}}));
      cache.Free(-1);
      ++timings_.warmup_passes;
    }
    // Decode buckets: `batch` sequences with a short context, two decode steps each.
    const std::vector<int32_t> ctx = WarmupIds(18, vocab);
    for (int batch : options_.decode_batches) {
      std::vector<SeqStep> steps;
      for (int b = 0; b < batch; ++b) steps.push_back(SeqStep{-1 - b, std::span<const int32_t>(ctx.data(), 16), 0, false});
      FERRY_ASSIGN_OR_RETURN(Tensor prefill, ex.Step(steps));
      for (int pos = 16; pos < 18; ++pos) {
        for (int b = 0; b < batch; ++b) steps[b] = SeqStep{-1 - b, std::span<const int32_t>(ctx.data() + pos, 1), pos, false};
        FERRY_ASSIGN_OR_RETURN(Tensor logits, ex.Step(steps));
      }
      for (int b = 0; b < batch; ++b) cache.Free(-1 - b);
      ++timings_.warmup_passes;
    }
    return Status::Ok();
  }
  for (int batch : options_.encoder_batches) {
    for (int len : options_.encoder_lengths) {
      std::vector<EncodedInput> inputs(batch, EncodedInput{WarmupIds(len, vocab), std::vector<int32_t>(len, 0)});
      FERRY_ASSIGN_OR_RETURN(Tensor emb, Embed(*engine_, inputs, Pooling::kCls, false));
      ++timings_.warmup_passes;
    }
  }
  return Status::Ok();
}

}  // namespace ferry::engine
