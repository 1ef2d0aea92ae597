#include "engine/generator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

namespace ferry::engine {

Result<std::unique_ptr<DecoderRunner>> DecoderRunner::Create(std::shared_ptr<Engine> engine,
                                                             const RunnerOptions& options) {
  if (engine == nullptr || !engine->is_decoder()) return InvalidArgument("DecoderRunner needs a decoder engine");
  std::unique_ptr<DecoderRunner> r(new DecoderRunner());
  r->engine_ = std::move(engine);
  r->options_ = options;
  const io::ModelConfig& c = r->engine_->config();
  if (r->options_.max_seq_len <= 0) r->options_.max_seq_len = std::min(c.max_position_embeddings, 4096);
  if (r->options_.max_batch_seqs <= 0) return InvalidArgument("max_batch_seqs must be positive");
  KvCacheConfig kc;
  kc.num_layers = c.num_layers;
  kc.num_kv_heads = c.num_kv_heads;
  kc.head_dim = c.head_dim;
  kc.block_tokens = options.block_tokens;
  kc.num_blocks = r->options_.max_batch_seqs * ((r->options_.max_seq_len + kc.block_tokens - 1) / kc.block_tokens);
  kc.dtype = r->engine_->backend().kv_cache_dtype();
  FERRY_ASSIGN_OR_RETURN(r->cache_, KvCache::Create(kc, r->engine_->backend()));
  r->executor_ = std::make_unique<StepExecutor>(*r->engine_->decoder(), *r->cache_);
  if (options.step_graphs) {
    r->executor_->SetGraphOptions(StepGraphOptions{r->options_.max_batch_seqs, r->options_.max_seq_len});
  }
  return r;
}

Result<std::vector<GenerateResult>> DecoderRunner::Generate(const std::vector<GenerateRequest>& requests) {
  const int vocab = engine_->config().vocab_size;
  struct Live {
    int64_t seq_id;
    const GenerateRequest* req;
    std::vector<int32_t> history;  // prompt + generated
    int32_t prefilled = 0;         // prompt tokens already in the KV cache
    Sampler sampler;
    bool done = false;
  };
  std::vector<Live> live;
  live.reserve(requests.size());
  for (const GenerateRequest& req : requests) {
    if (req.prompt.empty()) return InvalidArgument("empty prompt");
    if (req.max_tokens < 0) return InvalidArgument("max_tokens must be >= 0");
    FERRY_RETURN_IF_ERROR(req.sampling.Validate());
    const int64_t total = static_cast<int64_t>(req.prompt.size()) + req.max_tokens;
    if (total > options_.max_seq_len) {
      return OutOfRange("prompt (" + std::to_string(req.prompt.size()) + " tokens) + max_tokens (" +
                        std::to_string(req.max_tokens) + ") exceeds the context of " +
                        std::to_string(options_.max_seq_len) + " tokens");
    }
    for (int32_t id : req.prompt) {
      if (id < 0 || id >= vocab) {
        return InvalidArgument("prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                               std::to_string(vocab) + ")");
      }
    }
    const int64_t id = next_seq_id_++;
    live.push_back(Live{id, &req, req.prompt, 0, Sampler(req.sampling.seed.value_or(static_cast<uint64_t>(id))),
                        req.max_tokens == 0});
  }
  std::vector<GenerateResult> results(requests.size());
  for (size_t i = 0; i < live.size(); ++i) {
    if (live[i].done) results[i].finish_reason = "length";
  }
  // Frees every sequence's KV blocks however this function exits.
  struct Release {
    KvCache& cache;
    std::vector<Live>& live;
    ~Release() {
      for (Live& l : live) cache.Free(l.seq_id);
    }
  } release{*cache_, live};

  std::vector<SeqStep> steps;
  std::vector<size_t> owners;
  for (;;) {
    steps.clear();
    owners.clear();
    for (size_t i = 0; i < live.size(); ++i) {
      Live& l = live[i];
      if (l.done) continue;
      SeqStep s;
      s.seq_id = l.seq_id;
      const int32_t prompt_len = static_cast<int32_t>(l.req->prompt.size());
      if (l.prefilled < prompt_len) {
        int32_t n = prompt_len - l.prefilled;
        if (options_.prefill_chunk > 0) n = std::min(n, options_.prefill_chunk);
        s.tokens = std::span<const int32_t>(l.history.data() + l.prefilled, n);
        s.start_pos = l.prefilled;
        l.prefilled += n;
      } else {
        s.tokens = std::span<const int32_t>(l.history.data() + l.history.size() - 1, 1);
        s.start_pos = static_cast<int32_t>(l.history.size()) - 1;
      }
      steps.push_back(s);
      owners.push_back(i);
    }
    if (steps.empty()) break;
    FERRY_ASSIGN_OR_RETURN(Tensor logits, executor_->Step(steps));
    for (size_t j = 0; j < steps.size(); ++j) {
      Live& l = live[owners[j]];
      if (l.prefilled < static_cast<int32_t>(l.req->prompt.size())) continue;  // mid-prefill chunk
      std::span<const float> row(logits.data<float>() + j * vocab, vocab);
      for (float v : row) {
        if (!std::isfinite(v)) return Internal("the model produced non-finite logits");
      }
      GenerateResult& res = results[owners[j]];
      if (res.tokens.empty() && l.req->keep_first_logits) res.first_logits.assign(row.begin(), row.end());
      const int32_t next = l.sampler.Sample(row, l.req->sampling, l.history);
      res.tokens.push_back(next);
      l.history.push_back(next);
      const auto& stops = l.req->stop_ids;
      if (std::find(stops.begin(), stops.end(), next) != stops.end()) {
        res.finish_reason = "stop";
        l.done = true;
      } else if (static_cast<int>(res.tokens.size()) >= l.req->max_tokens) {
        res.finish_reason = "length";
        l.done = true;
      }
      if (l.done) cache_->Free(l.seq_id);
    }
  }
  return results;
}

namespace {

// Runs the encoder and brings back only what is asked for: the logits, and with `pooling`
// the pooled rows (reduced on the device), never the whole hidden state.
Result<model::EncoderOutput> RunEncoder(const Engine& engine, const std::vector<EncodedInput>& inputs,
                                        std::optional<Pooling> pooling) {
  if (engine.encoder() == nullptr) return InvalidArgument("model '" + engine.path() + "' is not an encoder");
  if (inputs.empty()) return InvalidArgument("no inputs");
  model::EncoderBatch b;
  for (const EncodedInput& in : inputs) {
    if (in.ids.empty()) return InvalidArgument("empty input");
    if (!in.type_ids.empty() && in.type_ids.size() != in.ids.size()) {
      return InvalidArgument("type ids do not match the input ids");
    }
    if (static_cast<int>(in.ids.size()) > engine.config().max_position_embeddings) {
      return OutOfRange("input of " + std::to_string(in.ids.size()) + " tokens exceeds the model's context of " +
                        std::to_string(engine.config().max_position_embeddings));
    }
    backend::SeqSpan span;
    span.q_begin = static_cast<int32_t>(b.token_ids.size());
    span.q_len = static_cast<int32_t>(in.ids.size());
    span.context_len = span.q_len;
    for (size_t i = 0; i < in.ids.size(); ++i) {
      b.token_ids.push_back(in.ids[i]);
      b.type_ids.push_back(in.type_ids.empty() ? 0 : in.type_ids[i]);
      b.positions.push_back(static_cast<int32_t>(i));
    }
    b.spans.push_back(span);
  }
  model::EncoderOutput out;
  FERRY_RETURN_IF_ERROR(engine.encoder()->Forward(b, out));
  backend::Backend& be = engine.backend();
  if (pooling.has_value()) {
    FERRY_ASSIGN_OR_RETURN(Tensor pooled,
                           be.Allocate({static_cast<int64_t>(b.spans.size()), out.hidden.dim(1)}, out.hidden.dtype()));
    FERRY_RETURN_IF_ERROR(be.PoolRows(out.hidden, b.spans, *pooling == Pooling::kMean, pooled));
    FERRY_ASSIGN_OR_RETURN(out.hidden, be.ToHost(pooled));
  } else {
    out.hidden = Tensor();
  }
  if (out.logits.defined()) {
    FERRY_ASSIGN_OR_RETURN(out.logits, engine.backend().ToHost(out.logits));
  }
  return out;
}

}  // namespace

Result<Tensor> Classify(const Engine& engine, const std::vector<EncodedInput>& inputs) {
  if (engine.encoder() != nullptr && !engine.encoder()->has_classifier()) {
    return InvalidArgument("model '" + engine.path() + "' has no classification head");
  }
  FERRY_ASSIGN_OR_RETURN(model::EncoderOutput out, RunEncoder(engine, inputs, std::nullopt));
  return out.logits;
}

Result<Tensor> Embed(const Engine& engine, const std::vector<EncodedInput>& inputs, Pooling pooling, bool normalize) {
  FERRY_ASSIGN_OR_RETURN(model::EncoderOutput out, RunEncoder(engine, inputs, pooling));
  Tensor emb = out.hidden;  // [inputs, hidden] f32, pooled
  if (normalize) {
    const int64_t H = emb.dim(1);
    for (int64_t s = 0; s < emb.dim(0); ++s) {
      float* dst = emb.data<float>() + s * H;
      double norm = 0.0;
      for (int64_t j = 0; j < H; ++j) norm += static_cast<double>(dst[j]) * dst[j];
      const float inv = static_cast<float>(1.0 / std::max(std::sqrt(norm), 1e-12));
      for (int64_t j = 0; j < H; ++j) dst[j] *= inv;
    }
  }
  return emb;
}

}  // namespace ferry::engine
