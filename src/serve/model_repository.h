// The served models: each preloaded (load, allocate, warm up) and paired with its batcher —
// continuous batching for decoders, Triton-style dynamic batching for encoders.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/encoder_runner.h"
#include "sched/preload.h"
#include "sched/continuous_batcher.h"
#include "sched/dynamic_batcher.h"
#include "serve/chat_prompt.h"
#include "serve/config.h"
#include "serve/metrics.h"

namespace ferry::serve {

// One unit of encoder work: a tokenized input and where its result goes.
struct EncoderWork {
  enum class Kind { kClassify, kEmbed };
  Kind kind = Kind::kEmbed;
  engine::EncodedInput input;
  Histogram* queue_time = nullptr;  // the request's ferry:request_queue_time_seconds, observed when its batch starts
  // Called exactly once with the row (logits or embedding), or the error.
  std::function<void(Result<std::vector<float>>)> done;
  std::atomic<bool> completed{false};

  void Complete(Result<std::vector<float>> result);
};

// A model ready to serve. Thread-safe after Create.
class ServedModel {
 public:
  static Result<std::unique_ptr<ServedModel>> Create(const ModelConfig& config, ServerMetrics& metrics);
  ~ServedModel();

  const std::string& name() const { return config_.name; }
  const ModelConfig& config() const { return config_; }
  engine::Engine& engine() const { return *preloaded_->engine(); }
  bool is_decoder() const { return decoder_ != nullptr; }
  sched::ContinuousBatcher* decoder() const { return decoder_.get(); }
  sched::DynamicBatcher* encoder() const { return encoder_.get(); }
  int max_seq_len() const;  // longest sequence served (decoders: prompt + generated)
  int64_t created_unix() const { return created_unix_; }
  const sched::PreloadTimings& timings() const { return preloaded_->timings(); }
  const ServerMetrics::ModelMetrics& metrics() const { return model_metrics_; }
  // Decoders: the chat templates, special tokens and tool-call parser.
  const ChatSetup& chat() const { return chat_; }

  // Stops the batcher: running work finishes within `timeout_ms`, the rest is cancelled.
  void Stop(int64_t timeout_ms);

 private:
  ServedModel() = default;
  void RunEncoderBatch(std::vector<std::shared_ptr<sched::BatchItem>>& batch);

  ModelConfig config_;
  std::unique_ptr<sched::PreloadedModel> preloaded_;
  std::unique_ptr<sched::BatcherObserver> observer_;
  std::unique_ptr<sched::ContinuousBatcher> decoder_;
  std::unique_ptr<sched::DynamicBatcher> encoder_;
  ServerMetrics::ModelMetrics model_metrics_;
  ChatSetup chat_;
  int64_t created_unix_ = 0;
};

}  // namespace ferry::serve
