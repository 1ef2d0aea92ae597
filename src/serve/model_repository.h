// The served models: each preloaded (load, allocate, warm up) and paired with its batcher —
// continuous batching for decoders, Triton-style dynamic batching for encoders.
#pragma once

#include <atomic>
#include <chrono>
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
#include "structured/constraint.h"

namespace ferry::serve {

// One unit of encoder work: a tokenized input (a whole request input, or one window of a
// long one) and where its result goes.
struct EncoderWork {
  enum class Kind {
    kClassify,  // sequence-classification logits [labels]
    kEmbed,     // the pooled vector [hidden], not normalized (the route normalizes after merging)
    kTokens,    // token-classification logits [tokens x labels], row-major
  };
  Kind kind = Kind::kEmbed;
  engine::EncodedInput input;
  Histogram* queue_time = nullptr;  // the request's ferry:request_queue_time_seconds, observed when its batch starts
  std::string tier = "default";  // for the QoS load monitor of a variant group
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
  // Called exactly once with the row (logits or embedding), or the error.
  std::function<void(Result<std::vector<float>>)> done;
  std::atomic<bool> completed{false};

  void Complete(Result<std::vector<float>> result);
};

// How a served encoder pools embeddings, and where that came from.
struct EmbeddingPooling {
  io::PoolingMode mode = io::PoolingMode::kMean;
  bool normalize = true;
  std::string source;  // "sentence-transformers (1_Pooling/config.json)", "config" or "default"
  // Parts of the model's sentence-transformers pipeline ferry does not run: embeddings
  // are refused while this is not empty, rather than served wrong.
  std::vector<std::string> unsupported;
};

// One encoder input as a variant group's load monitor sees it (on the batcher's thread).
struct EncoderItemReport {
  std::string_view tier;
  double queue_seconds = 0;    // enqueued to its batch's start
  double latency_seconds = 0;  // the request's arrival to this input's result
  bool engine_error = false;   // the engine failed it (a failed pass, non-finite outputs)
  int64_t tokens = 0;
};

// What a QoS variant group (serve/variant_group.h) adds to one of its variants. A plain
// model has none.
struct VariantHooks {
  std::string variant;                         // the variant's name; empty for a plain model
  sched::BatcherObserver* observer = nullptr;  // decoders: step and request events, after the metrics
  std::function<void(const sched::BatchReport&)> on_encoder_batch;  // encoders: each batch
  std::function<void(const EncoderItemReport&)> on_encoder_item;    // encoders: each input
  bool model_gauges = true;  // false: the group sets the model's running/waiting/KV gauges
  // The model repository: told when loading moves on to allocating and warming up.
  std::function<void(std::string_view phase)> on_phase;
};

// A model ready to serve. Thread-safe after Create.
class ServedModel {
 public:
  static Result<std::unique_ptr<ServedModel>> Create(const ModelConfig& config, ServerMetrics& metrics,
                                                     VariantHooks hooks = {});
  ~ServedModel();

  const std::string& name() const { return config_.name; }
  // The variant of a QoS group this is ("" for a plain model).
  const std::string& variant() const { return hooks_.variant; }
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
  const EmbeddingPooling& embedding_pooling() const { return pooling_; }
  // Decoders with a tokenizer: compiled structured-output grammars for this vocabulary.
  structured::GrammarCache* grammars() const { return grammars_.get(); }

  // Stops the batcher: running work finishes within `timeout_ms`, the rest is cancelled.
  void Stop(int64_t timeout_ms);

 private:
  ServedModel() = default;
  void RunEncoderBatch(std::vector<std::shared_ptr<sched::BatchItem>>& batch);

  ModelConfig config_;
  VariantHooks hooks_;
  std::unique_ptr<sched::PreloadedModel> preloaded_;
  std::unique_ptr<sched::BatcherObserver> observer_;
  std::unique_ptr<sched::ContinuousBatcher> decoder_;
  std::unique_ptr<sched::DynamicBatcher> encoder_;
  ServerMetrics::ModelMetrics model_metrics_;
  ChatSetup chat_;
  EmbeddingPooling pooling_;
  std::unique_ptr<structured::GrammarCache> grammars_;
  int64_t created_unix_ = 0;
};

}  // namespace ferry::serve
