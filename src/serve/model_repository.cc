#include "serve/model_repository.h"

#include "serve/tool_parser.h"

#include <chrono>
#include <cmath>

#include "core/logging.h"

namespace ferry::serve {

void EncoderWork::Complete(Result<std::vector<float>> result) {
  if (completed.exchange(true)) return;
  done(std::move(result));
}

namespace {

// Feeds the continuous batcher's step statistics into the model's metrics.
class MetricsObserver : public sched::BatcherObserver {
 public:
  explicit MetricsObserver(ServerMetrics::ModelMetrics m) : m_(m) {}
  void OnStep(const sched::StepStats& s) override {
    m_.engine_step_seconds->Observe(s.seconds);
    m_.batch_size->Observe(s.num_seqs);
    m_.iteration_tokens->Observe(s.num_tokens);
    m_.num_requests_running->Set(s.running);
    m_.num_requests_waiting->Set(s.waiting);
    m_.kv_cache_usage_perc->Set(s.kv_usage);
  }
  void OnPreemption(int count) override { m_.num_preemptions->Inc(count); }
  void OnPrefixCache(int64_t queried, int64_t hits) override {
    m_.prefix_cache_queries->Inc(static_cast<double>(queried));
    m_.prefix_cache_hits->Inc(static_cast<double>(hits));
  }
  void OnState(const sched::LoadState& s) override {
    m_.num_requests_running->Set(s.running);
    m_.num_requests_waiting->Set(s.waiting);
    m_.kv_cache_usage_perc->Set(s.kv_usage);
  }

 private:
  ServerMetrics::ModelMetrics m_;
};

bool AllFinite(const float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i])) return false;
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<ServedModel>> ServedModel::Create(const ModelConfig& config, ServerMetrics& metrics) {
  std::unique_ptr<ServedModel> m(new ServedModel());
  m->config_ = config;
  sched::PreloadOptions po;
  po.engine.threads = config.threads;
  po.engine.device = config.device;
  po.engine.cuda_activations = config.activations;
  po.engine.cuda_kv_cache = config.kv_cache_dtype;
  po.core.batching = config.batching;
  po.core.step_graphs = !config.enforce_eager;
  po.core.gpu_memory_utilization = config.gpu_memory_utilization;
  po.encoder_max_seq_len = config.batching.max_seq_len;
  po.encoder_batches = {1, config.dynamic_batching.max_batch_size};
  if (config.dynamic_batching.max_batch_size > 8) po.encoder_batches.insert(po.encoder_batches.begin() + 1, 8);
  po.warmup = config.warmup;
  {
    auto loaded = sched::PreloadedModel::Create(config.name, config.path, po);
    if (!loaded.ok()) return loaded.status().WithContext("model '" + config.name + "'");
    m->preloaded_ = std::move(loaded).value();
  }
  engine::Engine& e = *m->preloaded_->engine();
  m->model_metrics_ = metrics.ForModel(config.name, e.is_decoder());
  if (e.is_decoder()) {
    auto chat = LoadChatSetup(config, e);
    if (!chat.ok()) return chat.status().WithContext("model '" + config.name + "'");
    m->chat_ = std::move(chat).value();
    if (m->chat_.has_template()) {
      FERRY_LOG_INFO("model '{}': chat template from {}; tool-call parser {}", config.name, m->chat_.origin,
                     ToolCallParserName(m->chat_.parser));
    }
    m->observer_ = std::make_unique<MetricsObserver>(m->model_metrics_);
    m->decoder_ = std::make_unique<sched::ContinuousBatcher>(*m->preloaded_->core(), m->observer_.get());
    FERRY_RETURN_IF_ERROR(m->decoder_->Start());
  } else {
    ServedModel* self = m.get();
    ServerMetrics::ModelMetrics mm = m->model_metrics_;
    auto observer = [mm, self](const sched::BatchReport& r) {
      mm.batch_size->Observe(r.batch_size);
      mm.engine_step_seconds->Observe(static_cast<double>(r.run_us) * 1e-6);
      if (self->encoder_ != nullptr) mm.num_requests_waiting->Set(self->encoder_->Stats().queued_total);
    };
    m->encoder_ = std::make_unique<sched::DynamicBatcher>(
        config.name, config.dynamic_batching,
        [self](std::vector<std::shared_ptr<sched::BatchItem>>& batch) { self->RunEncoderBatch(batch); },
        observer);
    FERRY_RETURN_IF_ERROR(m->encoder_->Start());
  }
  m->created_unix_ = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
  const sched::PreloadTimings& t = m->preloaded_->timings();
  FERRY_LOG_INFO("model '{}' ready: load {:.0f} ms, allocate {:.0f} ms, warm-up {:.0f} ms ({} passes)", config.name,
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

// Runs on the dynamic batcher's thread: one encoder pass per kind in the batch. A failed
// pass is retried input by input so only the bad input fails; non-finite rows fail alone.
void ServedModel::RunEncoderBatch(std::vector<std::shared_ptr<sched::BatchItem>>& batch) {
  model_metrics_.num_requests_running->Set(static_cast<double>(batch.size()));
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
  for (auto kind : {EncoderWork::Kind::kClassify, EncoderWork::Kind::kEmbed}) {
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
      return engine::Embed(e, inputs, engine::Pooling::kMean, /*normalize=*/true);
    };
    auto deliver = [](const std::vector<EncoderWork*>& group, const Tensor& out) {
      const int64_t width = out.shape()[1];
      for (size_t i = 0; i < group.size(); ++i) {
        const float* row = out.data<float>() + static_cast<int64_t>(i) * width;
        if (!AllFinite(row, width)) {
          group[i]->Complete(Internal("the model produced non-finite outputs for this input"));
        } else {
          group[i]->Complete(std::vector<float>(row, row + width));
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
        w->Complete(one.status());
      }
    }
  }
  model_metrics_.num_requests_running->Set(0);
}

}  // namespace ferry::serve
