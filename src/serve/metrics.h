// Prometheus metrics: a registry of counter, gauge and histogram families rendered in the
// text exposition format 0.0.4, and ServerMetrics, the serving metric set behind /metrics.
//
// Children (one per combination of label values) are created under the family's mutex on
// first use and live as long as the registry; their addresses are stable, so hot paths
// look a child up once and then update it lock-free.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace ferry::serve {

// The Content-Type of Render()'s output.
inline constexpr std::string_view kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

enum class MetricType { kCounter, kGauge, kHistogram };

// A sample value as Prometheus parses it: integral values without exponent ("42"), others
// in the shortest form that reads back exactly ("0.25", "1e-05"), "+Inf", "-Inf", "NaN".
std::string FormatMetricValue(double value);

// Thread-safe, lock-free. A monotonically increasing value.
class Counter {
 public:
  // Adds `amount`; negative and NaN amounts are ignored (a counter never goes down).
  void Inc(double amount = 1.0);
  double Value() const { return value_.load(std::memory_order_relaxed); }

  void AppendSamples(std::string_view name, std::string_view labels, std::string* out) const;

 private:
  std::atomic<double> value_{0.0};
};

// Thread-safe, lock-free. A value that goes up and down.
class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double amount);
  void Inc() { Add(1.0); }
  void Dec() { Add(-1.0); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

  void AppendSamples(std::string_view name, std::string_view labels, std::string* out) const;

 private:
  std::atomic<double> value_{0.0};
};

// Thread-safe, lock-free. Counts observations into buckets with fixed upper bounds
// (inclusive, Prometheus's `le`), plus an implicit +Inf bucket, and sums them.
class Histogram {
 public:
  // A consistent-enough copy: `count` is the sum of the buckets, so the +Inf bucket and
  // _count always agree even while other threads observe.
  struct Snapshot {
    std::vector<uint64_t> cumulative_counts;  // one per bound, then +Inf
    uint64_t count = 0;
    double sum = 0.0;
  };

  // `bounds` (strictly ascending, finite) must outlive the histogram; its family owns them.
  explicit Histogram(std::span<const double> bounds);

  // NaN observations are ignored.
  void Observe(double value);
  Snapshot Read() const;
  std::span<const double> bounds() const { return bounds_; }

  void AppendSamples(std::string_view name, std::string_view labels, std::string* out) const;

 private:
  std::span<const double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bucket, not cumulative; last is +Inf
  std::atomic<double> sum_{0.0};
};

// Thread-safe. The type-independent part of a family: name, help, label names, rendering.
class MetricFamilyBase {
 public:
  MetricFamilyBase(MetricType type, std::string name, std::string help,
                   std::vector<std::string> label_names);
  virtual ~MetricFamilyBase() = default;
  MetricFamilyBase(const MetricFamilyBase&) = delete;
  MetricFamilyBase& operator=(const MetricFamilyBase&) = delete;

  MetricType type() const { return type_; }
  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  // Appends the # HELP and # TYPE lines and every child's samples.
  void Render(std::string* out) const;

 protected:
  // Label arity is fixed by the code that registered the family; a mismatch is a bug.
  void CheckLabelCount(size_t count) const;
  // `a="x",b="y"`, values escaped; empty for a family without labels.
  std::string FormatLabels(const std::vector<std::string>& values) const;
  virtual void RenderSamples(std::string* out) const = 0;

 private:
  const MetricType type_;
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
};

// Thread-safe. A named family of Counter, Gauge or Histogram children keyed by label values.
template <typename Metric>
class MetricFamily final : public MetricFamilyBase {
 public:
  MetricFamily(MetricType type, std::string name, std::string help,
               std::vector<std::string> label_names, std::vector<double> bucket_bounds = {})
      : MetricFamilyBase(type, std::move(name), std::move(help), std::move(label_names)),
        bucket_bounds_(std::move(bucket_bounds)) {
    // A family without labels has exactly one child; create it so it renders from the start.
    if (this->label_names().empty()) WithLabels(std::span<const std::string_view>());
  }

  // The child for these label values (one per label name, in order), created on first
  // use. The reference stays valid for the family's lifetime.
  Metric& WithLabels(std::span<const std::string_view> values) {
    CheckLabelCount(values.size());
    std::lock_guard<std::mutex> lock(mu_);
    auto it = children_.find(values);
    if (it != children_.end()) return it->second;
    std::vector<std::string> key(values.begin(), values.end());
    if constexpr (std::is_same_v<Metric, Histogram>) {
      return children_.try_emplace(std::move(key), std::span<const double>(bucket_bounds_))
          .first->second;
    } else {
      return children_.try_emplace(std::move(key)).first->second;
    }
  }
  Metric& WithLabels(std::initializer_list<std::string_view> values) {
    return WithLabels(std::span<const std::string_view>(values.begin(), values.size()));
  }

  const std::vector<double>& bucket_bounds() const { return bucket_bounds_; }

 protected:
  void RenderSamples(std::string* out) const override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [values, child] : children_) child.AppendSamples(name(), FormatLabels(values), out);
  }

 private:
  // Orders label value lists lexicographically; lookups take string_views without copying.
  struct LabelValuesLess {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return std::lexicographical_compare(
          a.begin(), a.end(), b.begin(), b.end(),
          [](std::string_view x, std::string_view y) { return x < y; });
    }
  };

  const std::vector<double> bucket_bounds_;  // histograms only
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, Metric, LabelValuesLess> children_;  // GUARDED_BY(mu_)
};

using CounterFamily = MetricFamily<Counter>;
using GaugeFamily = MetricFamily<Gauge>;
using HistogramFamily = MetricFamily<Histogram>;

// Thread-safe. Owns metric families and renders them in registration order. Register at
// startup: names are fixed by the code, so an invalid or duplicate name, label name or
// bucket list is a bug and aborts with a message.
class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  CounterFamily& AddCounter(std::string name, std::string help, std::vector<std::string> label_names);
  GaugeFamily& AddGauge(std::string name, std::string help, std::vector<std::string> label_names);
  // `bucket_bounds`: strictly ascending finite upper bounds; a trailing +Inf is implied
  // (and dropped if given).
  HistogramFamily& AddHistogram(std::string name, std::string help,
                                std::vector<std::string> label_names,
                                std::vector<double> bucket_bounds);

  // The whole registry in the Prometheus text exposition format 0.0.4.
  std::string Render() const;

 private:
  void CheckNewFamily(const std::string& name, const std::vector<std::string>& label_names,
                      MetricType type) const;

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<MetricFamilyBase>> families_;  // GUARDED_BY(mu_)
};

// Bucket upper bounds of ferry's histograms (constant arrays: safe during static init).
// TTFT, inter-token, queue and engine-step latencies: 1 ms .. 60 s, roughly log-spaced.
inline constexpr double kLatencyBucketsSeconds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                    0.5,   1.0,    2.5,   5.0,  10.0,  20.0, 40.0, 60.0};
// End-to-end request latency: 10 ms .. 10 min.
inline constexpr double kRequestLatencyBucketsSeconds[] = {0.01, 0.025, 0.05, 0.1,  0.25,  0.5,   1.0,   2.5,
                                                           5.0,  10.0,  20.0, 40.0, 60.0, 120.0, 300.0, 600.0};
// Sizes in sequences or tokens: 1, 2, 4, .. 8192.
inline constexpr double kTokenCountBuckets[] = {1,   2,   4,    8,    16,   32,   64,
                                                128, 256, 512, 1024, 2048, 4096, 8192};

// Label values of ferry:request_success_total's finished_reason.
inline constexpr std::string_view kFinishedStop = "stop";
inline constexpr std::string_view kFinishedLength = "length";
inline constexpr std::string_view kFinishedAbort = "abort";
// Label values of ferry:request_failure_total's reason.
inline constexpr std::string_view kFailureInvalidRequest = "invalid_request";
inline constexpr std::string_view kFailureRejectedQueueFull = "rejected_queue_full";
inline constexpr std::string_view kFailureTimeout = "timeout";
inline constexpr std::string_view kFailureCancelled = "cancelled";
inline constexpr std::string_view kFailureEngineError = "engine_error";
inline constexpr std::string_view kFailureNonfiniteLogits = "nonfinite_logits";
inline constexpr std::string_view kFailureShutdown = "shutdown";
inline constexpr std::string_view kFailureQueueTimeout = "queue_timeout";

// Thread-safe. ferry's serving metrics: vLLM's names under the `ferry:` prefix, labelled
// by model_name and, for per-request metrics, tier. Families are public; ForModel and
// ForTier return the children a batcher or request path updates, to look up once and keep.
struct ServerMetrics {
  // Children of the per-model families for one model_name.
  struct ModelMetrics {
    Gauge* num_requests_running = nullptr;
    Gauge* num_requests_waiting = nullptr;
    Gauge* kv_cache_usage_perc = nullptr;
    Gauge* step_token_budget = nullptr;
    Counter* num_preemptions = nullptr;
    Histogram* engine_step_seconds = nullptr;
    Histogram* batch_size = nullptr;
    Histogram* iteration_tokens = nullptr;
    Counter* prefix_cache_queries = nullptr;  // decoders only
    Counter* prefix_cache_hits = nullptr;     // decoders only
  };
  // Children of the per-request families for one (model_name, tier). Encoder models get
  // only the series they record (no token-generation ones): those pointers are null.
  struct TierMetrics {
    Counter* prompt_tokens = nullptr;
    Counter* generation_tokens = nullptr;
    Histogram* time_to_first_token_seconds = nullptr;
    Histogram* inter_token_latency_seconds = nullptr;
    Histogram* e2e_request_latency_seconds = nullptr;
    Histogram* request_queue_time_seconds = nullptr;
    Histogram* request_prompt_tokens = nullptr;
    Histogram* request_generation_tokens = nullptr;
  };

  ServerMetrics();

  MetricsRegistry registry;  // declared first: the families below live in it

  // {model_name}
  GaugeFamily& num_requests_running;  // ferry:num_requests_running: sequences in the running batch
  GaugeFamily& num_requests_waiting;  // ferry:num_requests_waiting: requests queued, not yet scheduled
  GaugeFamily& kv_cache_usage_perc;   // ferry:kv_cache_usage_perc: fraction of KV cache blocks in use, 0..1
  GaugeFamily& step_token_budget;     // ferry:step_token_budget: the last decoder step's token budget
  CounterFamily& num_preemptions;     // ferry:num_preemptions_total: sequences preempted to free KV blocks
  HistogramFamily& engine_step_seconds;  // ferry:engine_step_seconds: wall time of one engine step/batch
  HistogramFamily& batch_size;        // ferry:batch_size: sequences or encoder inputs per step/batch
  HistogramFamily& iteration_tokens;  // ferry:iteration_tokens_total: tokens processed per step (encoders: per batch)
  CounterFamily& prefix_cache_queries;  // ferry:prefix_cache_queries_total: prompt tokens looked up in the prefix cache
  CounterFamily& prefix_cache_hits;     // ferry:prefix_cache_hits_total: of them, found (not computed again)

  // {model_name, tier}
  CounterFamily& prompt_tokens;      // ferry:prompt_tokens_total: prompt tokens prefilled
  CounterFamily& generation_tokens;  // ferry:generation_tokens_total: tokens generated
  HistogramFamily& time_to_first_token_seconds;  // ferry:time_to_first_token_seconds: arrival to first token
  HistogramFamily& inter_token_latency_seconds;  // ferry:inter_token_latency_seconds: between output tokens
  HistogramFamily& e2e_request_latency_seconds;  // ferry:e2e_request_latency_seconds: arrival to finish
  HistogramFamily& request_queue_time_seconds;   // ferry:request_queue_time_seconds: arrival to first scheduled
  HistogramFamily& request_prompt_tokens;        // ferry:request_prompt_tokens: prompt length per request
  HistogramFamily& request_generation_tokens;    // ferry:request_generation_tokens: output length per request
  CounterFamily& request_success;  // ferry:request_success_total {model_name, tier, finished_reason}
  CounterFamily& request_failure;  // ferry:request_failure_total {model_name, tier, reason}

  CounterFamily& http_requests;  // ferry:http_requests_total {route, code}

  // {tenant}
  CounterFamily& tenant_requests;  // ferry:tenant_requests_total {tenant, code}: API requests answered
  CounterFamily& tenant_tokens;    // ferry:tenant_tokens_total {tenant}: prompt + generated tokens used
  CounterFamily& rate_limited;     // ferry:rate_limited_requests_total {tenant, limit}: refused by a rate limit

  // The process (read from /proc when rendered), as Prometheus' client libraries export it.
  CounterFamily& process_cpu_seconds;        // process_cpu_seconds_total
  GaugeFamily& process_resident_memory;      // process_resident_memory_bytes
  GaugeFamily& process_virtual_memory;       // process_virtual_memory_bytes
  GaugeFamily& process_start_time;           // process_start_time_seconds (Unix time)
  GaugeFamily& process_open_fds;             // process_open_fds
  GaugeFamily& process_max_fds;              // process_max_fds
  GaugeFamily& process_threads;              // process_threads
  GaugeFamily& build_info;                   // ferry:build_info {version, cuda}: always 1

  // Creates (rendered as zeros from then on) and returns one model's children; call when
  // the model is loaded and keep the result. An encoder gets no decoder-only series (KV
  // cache, preemptions, prefix cache): those pointers are null.
  ModelMetrics ForModel(std::string_view model_name, bool decoder = true);
  // Creates and returns one (model, tier)'s children; cheap enough per request, or keep it.
  TierMetrics ForTier(std::string_view model_name, std::string_view tier, bool decoder = true);

  // finished_reason: kFinishedStop, kFinishedLength or kFinishedAbort.
  void RecordSuccess(std::string_view model_name, std::string_view tier, std::string_view finished_reason);
  // reason: one of the kFailure* values.
  void RecordFailure(std::string_view model_name, std::string_view tier, std::string_view reason);
  void RecordHttpRequest(std::string_view route, int status_code);

  // The process metrics are refreshed first.
  std::string Render();

 private:
  double reported_cpu_seconds_ = 0;  // process_cpu_seconds_total so far
};

}  // namespace ferry::serve
