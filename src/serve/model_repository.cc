#include "serve/model_repository.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/logging.h"
#include "serve/tool_parser.h"

namespace ferry::serve {

void EncoderWork::Complete(Result<std::vector<float>> result) {
  if (completed.exchange(true)) return;
  done(std::move(result));
}

namespace {

// Feeds the continuous batcher's step statistics into the model's metrics.
// and then into the variant group's observer, when the model is a variant.
class MetricsObserver : public sched::BatcherObserver {
 public:
  MetricsObserver(ServerMetrics::ModelMetrics m, const VariantHooks& hooks)
      : m_(m), next_(hooks.observer), gauges_(hooks.model_gauges) {}
  void OnStep(const sched::StepStats& s) override {
    m_.engine_step_seconds->Observe(s.seconds);
    m_.batch_size->Observe(s.num_seqs);
    m_.iteration_tokens->Observe(s.num_tokens);
    if (m_.step_token_budget != nullptr) m_.step_token_budget->Set(s.token_budget);
    if (gauges_) {
      m_.num_requests_running->Set(s.running);
      m_.num_requests_waiting->Set(s.waiting);
      m_.kv_cache_usage_perc->Set(s.kv_usage);
    }
    if (next_ != nullptr) next_->OnStep(s);
  }
  void OnPreemption(int count) override {
    m_.num_preemptions->Inc(count);
    if (next_ != nullptr) next_->OnPreemption(count);
  }
  void OnPrefixCache(int64_t queried, int64_t hits) override {
    m_.prefix_cache_queries->Inc(static_cast<double>(queried));
    m_.prefix_cache_hits->Inc(static_cast<double>(hits));
    if (next_ != nullptr) next_->OnPrefixCache(queried, hits);
  }
  void OnState(const sched::LoadState& s) override {
    if (gauges_) {
      m_.num_requests_running->Set(s.running);
      m_.num_requests_waiting->Set(s.waiting);
      m_.kv_cache_usage_perc->Set(s.kv_usage);
    }
    if (next_ != nullptr) next_->OnState(s);
  }
  void OnRequest(const sched::RequestProgress& p) override {
    if (next_ != nullptr) next_->OnRequest(p);
  }
  bool wants_requests() const override { return next_ != nullptr && next_->wants_requests(); }

 private:
  ServerMetrics::ModelMetrics m_;
  sched::BatcherObserver* next_;
  bool gauges_;
};

bool AllFinite(const float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i])) return false;
  }
  return true;
}

// The checkpoint's sentence-transformers settings win; the config's are the fallback.
EmbeddingPooling ResolvePooling(const ModelConfig& config, const engine::Engine& e) {
  EmbeddingPooling p;
  if (const auto& st = e.sentence_pooling()) {
    p.mode = st->mode;
    p.normalize = st->normalize;
    p.source = "sentence-transformers (" + (st->pooling_path.empty() ? std::string() : st->pooling_path + "/") +
               "config.json)";
    p.unsupported = st->unsupported;
    if ((config.pooling && *config.pooling != p.mode) || (config.normalize && *config.normalize != p.normalize)) {
      FERRY_LOG_WARN("model '{}': pooling/normalize in the config are ignored; the checkpoint's modules.json sets {}{}",
                     config.name, io::PoolingModeName(p.mode), p.normalize ? " + normalize" : "");
    }
    return p;
  }
  p.mode = config.pooling.value_or(io::PoolingMode::kMean);
  p.normalize = config.normalize.value_or(true);
  p.source = config.pooling || config.normalize ? "config" : "default";
  return p;
}

engine::Pooling EnginePooling(io::PoolingMode mode) {
  switch (mode) {
    case io::PoolingMode::kCls: return engine::Pooling::kCls;
    case io::PoolingMode::kMax: return engine::Pooling::kMax;
    case io::PoolingMode::kLastToken: return engine::Pooling::kLast;
    case io::PoolingMode::kMean: break;
  }
  return engine::Pooling::kMean;
}

}  // namespace

Result<std::unique_ptr<ServedModel>> ServedModel::Create(const ModelConfig& config, ServerMetrics& metrics,
                                                         VariantHooks hooks) {
  std::unique_ptr<ServedModel> m(new ServedModel());
  m->config_ = config;
  m->hooks_ = std::move(hooks);
  // A variant's engine core is named "model@variant" (its thread and log lines).
  const std::string unit = m->hooks_.variant.empty() ? config.name : config.name + "@" + m->hooks_.variant;
  sched::PreloadOptions po;
  po.engine.threads = config.threads;
  po.engine.device = config.device;
  po.engine.map_weights = config.map_weights;
  po.engine.cuda_activations = config.activations;
  po.engine.cuda_kv_cache = config.kv_cache_dtype;
  po.engine.cpu_activations = config.cpu_activations;
  po.core.batching = config.batching;
  po.core.step_graphs = !config.enforce_eager;
  po.core.gpu_memory_utilization = config.gpu_memory_utilization;
  po.core.host_memory_budget_bytes = config.host_memory_budget_bytes;
  po.encoder_max_seq_len = config.batching.max_seq_len;
  po.encoder_batches = {1, config.dynamic_batching.max_batch_size};
  if (config.dynamic_batching.max_batch_size > 8) po.encoder_batches.insert(po.encoder_batches.begin() + 1, 8);
  po.warmup = config.warmup;
  po.minimal_warmup = config.warmup_mode == ModelConfig::WarmupMode::kMinimal ||
                      (config.warmup_mode == ModelConfig::WarmupMode::kAuto && !config.device.is_cuda());
  po.on_phase = m->hooks_.on_phase;
  {
    auto loaded = sched::PreloadedModel::Create(unit, config.path, po);
    if (!loaded.ok()) {
      return loaded.status().WithContext("model '" + config.name + "'" +
                                         (m->hooks_.variant.empty() ? "" : " variant '" + m->hooks_.variant + "'"));
    }
    m->preloaded_ = std::move(loaded).value();
  }
  engine::Engine& e = *m->preloaded_->engine();
  m->model_metrics_ = metrics.ForModel(config.name, e.is_decoder());
  if (!e.is_decoder()) m->pooling_ = ResolvePooling(config, e);
  if (e.is_decoder()) {
    auto chat = LoadChatSetup(config, e);
    if (!chat.ok()) {
      return chat.status().WithContext("model '" + config.name + "'" +
                                       (m->hooks_.variant.empty() ? "" : " variant '" + m->hooks_.variant + "'"));
    }
    m->chat_ = std::move(chat).value();
    if (e.tokenizer() != nullptr) {
      m->grammars_ = std::make_unique<structured::GrammarCache>(
          structured::Vocabulary::FromTokenizer(*e.tokenizer(), e.config().vocab_size));
    }
    if (m->chat_.has_template()) {
      FERRY_LOG_INFO("model '{}': chat template from {}; tool-call parser {}", unit, m->chat_.origin,
                     ToolCallParserName(m->chat_.parser));
    }
    m->observer_ = std::make_unique<MetricsObserver>(m->model_metrics_, m->hooks_);
    m->decoder_ = std::make_unique<sched::ContinuousBatcher>(*m->preloaded_->core(), m->observer_.get());
    FERRY_RETURN_IF_ERROR(m->decoder_->Start());
  } else {
    ServedModel* self = m.get();
    ServerMetrics::ModelMetrics mm = m->model_metrics_;
    auto observer = [mm, self](const sched::BatchReport& r) {
      mm.batch_size->Observe(r.batch_size);
      mm.engine_step_seconds->Observe(static_cast<double>(r.run_us) * 1e-6);
      if (self->encoder_ != nullptr && self->hooks_.model_gauges) {
        mm.num_requests_waiting->Set(self->encoder_->Stats().queued_total);
      }
      if (self->hooks_.on_encoder_batch) self->hooks_.on_encoder_batch(r);
    };
    m->encoder_ = std::make_unique<sched::DynamicBatcher>(
        unit, config.dynamic_batching,
        [self](std::vector<std::shared_ptr<sched::BatchItem>>& batch) { self->RunEncoderBatch(batch); },
        observer);
    FERRY_RETURN_IF_ERROR(m->encoder_->Start());
  }
  m->created_unix_ = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
  const sched::PreloadTimings& t = m->preloaded_->timings();
  FERRY_LOG_INFO("model '{}' ready: load {:.0f} ms, allocate {:.0f} ms, warm-up {:.0f} ms ({} passes)", unit,
                 t.load_ms, t.allocate_ms, t.warmup_ms, t.warmup_passes);
  return m;
}

ServedModel::~ServedModel() { Stop(0); }

int ServedModel::max_seq_len() const { return preloaded_->max_seq_len(); }

void ServedModel::Stop(int64_t timeout_ms) {
  if (decoder_ != nullptr) decoder_->Stop(std::chrono::milliseconds(timeout_ms));
  if (encoder_ != nullptr) {
    encoder_->Stop(/*drain=*/timeout_ms > 0, sched::BatchClock::now() + std::chrono::milliseconds(timeout_ms));
  }
}

// Runs on the dynamic batcher's thread: one encoder pass per kind in the batch (whole inputs
// and windows of long ones alike). A failed pass is retried input by input so only the bad
// input fails; non-finite rows fail alone.
void ServedModel::RunEncoderBatch(std::vector<std::shared_ptr<sched::BatchItem>>& batch) {
  const auto started = std::chrono::steady_clock::now();
  if (hooks_.model_gauges) model_metrics_.num_requests_running->Set(static_cast<double>(batch.size()));
  const sched::BatchTime start = sched::BatchClock::now();
  int64_t batch_tokens = 0;
  for (auto& item : batch) {
    const auto* w = static_cast<const EncoderWork*>(item->payload.get());
    batch_tokens += static_cast<int64_t>(w->input.ids.size());
    if (w->queue_time != nullptr) {
      w->queue_time->Observe(std::chrono::duration<double>(start - item->enqueue_time).count());
    }
  }
  model_metrics_.iteration_tokens->Observe(static_cast<double>(batch_tokens));
  const engine::Engine& e = engine();
  const engine::Pooling pooling = EnginePooling(pooling_.mode);
  std::vector<EncoderWork*> engine_failed;  // for the variant group's error window
  for (auto kind : {EncoderWork::Kind::kClassify, EncoderWork::Kind::kTokens, EncoderWork::Kind::kEmbed}) {
    std::vector<EncoderWork*> works;
    for (auto& item : batch) {
      auto* w = static_cast<EncoderWork*>(item->payload.get());
      if (w->kind == kind && !w->completed.load()) works.push_back(w);
    }
    if (works.empty()) continue;
    auto run = [&](const std::vector<EncoderWork*>& group) -> Result<Tensor> {
      std::vector<engine::EncodedInput> inputs;
      inputs.reserve(group.size());
      for (EncoderWork* w : group) inputs.push_back(w->input);
      if (kind == EncoderWork::Kind::kClassify) return engine::Classify(e, inputs);
      if (kind == EncoderWork::Kind::kTokens) return engine::ClassifyTokens(e, inputs);
      return engine::Embed(e, inputs, pooling, /*normalize=*/false);
    };
    // One row per input, or for tokens one [tokens x labels] block per input.
    auto deliver = [kind, &engine_failed](const std::vector<EncoderWork*>& group, const Tensor& out) {
      const int64_t width = out.shape()[1];
      int64_t row = 0;
      for (size_t i = 0; i < group.size(); ++i) {
        const int64_t rows =
            kind == EncoderWork::Kind::kTokens ? static_cast<int64_t>(group[i]->input.ids.size()) : 1;
        const float* begin = out.data<float>() + row * width;
        row += rows;
        if (!AllFinite(begin, rows * width)) {
          engine_failed.push_back(group[i]);
          group[i]->Complete(Internal("the model produced non-finite outputs for this input"));
        } else {
          group[i]->Complete(std::vector<float>(begin, begin + rows * width));
        }
      }
    };
    Result<Tensor> out = run(works);
    if (out.ok()) {
      deliver(works, out.value());
      continue;
    }
    FERRY_LOG_WARN("{}: encoder batch of {} failed ({}); retrying each input alone", name(), works.size(),
                   out.status().message());
    for (EncoderWork* w : works) {
      Result<Tensor> one = run({w});
      if (one.ok()) {
        deliver({w}, one.value());
      } else {
        engine_failed.push_back(w);
        w->Complete(one.status());
      }
    }
  }
  if (hooks_.model_gauges) model_metrics_.num_requests_running->Set(0);
  if (hooks_.on_encoder_item) {
    const auto now = std::chrono::steady_clock::now();
    for (auto& item : batch) {
      auto* w = static_cast<EncoderWork*>(item->payload.get());
      EncoderItemReport r;
      r.tier = w->tier;
      r.queue_seconds = std::chrono::duration<double>(started - item->enqueue_time).count();
      r.latency_seconds = std::chrono::duration<double>(now - w->arrival).count();
      r.engine_error = std::find(engine_failed.begin(), engine_failed.end(), w) != engine_failed.end();
      r.tokens = static_cast<int64_t>(w->input.ids.size());
      hooks_.on_encoder_item(r);
    }
  }
}

}  // namespace ferry::serve
