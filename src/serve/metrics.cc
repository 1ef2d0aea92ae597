#include "serve/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "core/file_limit.h"
#include "core/version.h"

namespace ferry::serve {
namespace {

static_assert(std::atomic<double>::is_always_lock_free, "metric updates must be lock-free");

// Misuse of the registration API is a bug in the registering code, never a request's fault.
[[noreturn]] void MetricsBug(const std::string& message) {
  std::fprintf(stderr, "ferry metrics: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

// Lock-free floating-point accumulation: retry until no other thread changed the value
// between our load and our store.
void AtomicAdd(std::atomic<double>& target, double amount) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + amount, std::memory_order_relaxed)) {
  }
}

bool IsMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool IsLabelName(std::string_view name) {
  if (name.empty() || name.starts_with("__")) return false;  // __ is reserved for Prometheus
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// HELP text escapes backslash and newline; label values also escape the double quote.
void AppendEscaped(std::string_view text, bool escape_quote, std::string* out) {
  for (const char c : text) {
    if (c == '\\') {
      *out += "\\\\";
    } else if (c == '\n') {
      *out += "\\n";
    } else if (c == '"' && escape_quote) {
      *out += "\\\"";
    } else {
      *out += c;
    }
  }
}

// `name{labels} value\n`, or `name value\n` without labels.
void AppendSample(std::string_view name, std::string_view suffix, std::string_view labels,
                  double value, std::string* out) {
  *out += name;
  *out += suffix;
  if (!labels.empty()) {
    *out += '{';
    *out += labels;
    *out += '}';
  }
  *out += ' ';
  *out += FormatMetricValue(value);
  *out += '\n';
}

std::string_view TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

}  // namespace

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Below 2^53 every integer is exact; printing it as an integer keeps counters readable.
  if (value == std::trunc(value) && std::fabs(value) < 9007199254740992.0) {
    return std::to_string(static_cast<int64_t>(value));  // also turns -0 into "0"
  }
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  if (ec != std::errc()) return "NaN";  // cannot happen: 64 bytes hold any shortest double
  return std::string(buffer, end);
}

// --- Counter, Gauge, Histogram ---

void Counter::Inc(double amount) {
  if (!(amount >= 0.0)) return;  // also rejects NaN
  AtomicAdd(value_, amount);
}

void Counter::AppendSamples(std::string_view name, std::string_view labels, std::string* out) const {
  AppendSample(name, "", labels, Value(), out);
}

void Gauge::Add(double amount) { AtomicAdd(value_, amount); }

void Gauge::AppendSamples(std::string_view name, std::string_view labels, std::string* out) const {
  AppendSample(name, "", labels, Value(), out);
}

Histogram::Histogram(std::span<const double> bounds)
    : bounds_(bounds), buckets_(std::make_unique<std::atomic<uint64_t>[]>(bounds.size() + 1)) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  // The first bound >= value: Prometheus buckets are inclusive upper bounds.
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, value);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot snapshot;
  snapshot.cumulative_counts.resize(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    snapshot.cumulative_counts[i] = running;
  }
  snapshot.count = running;
  snapshot.sum = sum_.load(std::memory_order_relaxed);
  return snapshot;
}

void Histogram::AppendSamples(std::string_view name, std::string_view labels, std::string* out) const {
  const Snapshot snapshot = Read();
  std::string bucket_labels(labels);
  if (!bucket_labels.empty()) bucket_labels += ',';
  const size_t prefix_size = bucket_labels.size();
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    bucket_labels.resize(prefix_size);
    bucket_labels += "le=\"";
    bucket_labels += i < bounds_.size() ? FormatMetricValue(bounds_[i]) : "+Inf";
    bucket_labels += '"';
    AppendSample(name, "_bucket", bucket_labels, static_cast<double>(snapshot.cumulative_counts[i]), out);
  }
  AppendSample(name, "_sum", labels, snapshot.sum, out);
  AppendSample(name, "_count", labels, static_cast<double>(snapshot.count), out);
}

// --- Families ---

MetricFamilyBase::MetricFamilyBase(MetricType type, std::string name, std::string help,
                                   std::vector<std::string> label_names)
    : type_(type), name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)) {}

void MetricFamilyBase::Render(std::string* out) const {
  *out += "# HELP ";
  *out += name_;
  *out += ' ';
  AppendEscaped(help_, /*escape_quote=*/false, out);
  *out += "\n# TYPE ";
  *out += name_;
  *out += ' ';
  *out += TypeName(type_);
  *out += '\n';
  RenderSamples(out);
}

void MetricFamilyBase::CheckLabelCount(size_t count) const {
  if (count != label_names_.size()) {
    MetricsBug(name_ + " takes " + std::to_string(label_names_.size()) + " label values, got " +
               std::to_string(count));
  }
}

std::string MetricFamilyBase::FormatLabels(const std::vector<std::string>& values) const {
  std::string out;
  for (size_t i = 0; i < label_names_.size(); ++i) {
    if (i > 0) out += ',';
    out += label_names_[i];
    out += "=\"";
    AppendEscaped(values[i], /*escape_quote=*/true, &out);
    out += '"';
  }
  return out;
}

// --- Registry ---

void MetricsRegistry::CheckNewFamily(const std::string& name, const std::vector<std::string>& label_names,
                                     MetricType type) const {
  if (!IsMetricName(name)) MetricsBug("invalid metric name '" + name + "'");
  std::set<std::string_view> seen;
  for (const std::string& label : label_names) {
    if (!IsLabelName(label)) MetricsBug(name + ": invalid label name '" + label + "'");
    if (type == MetricType::kHistogram && label == "le") MetricsBug(name + ": histograms reserve the label 'le'");
    if (!seen.insert(label).second) MetricsBug(name + ": duplicate label name '" + label + "'");
  }
  for (const auto& family : families_) {
    if (family->name() == name) MetricsBug("metric '" + name + "' registered twice");
  }
}

CounterFamily& MetricsRegistry::AddCounter(std::string name, std::string help,
                                           std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckNewFamily(name, label_names, MetricType::kCounter);
  auto family = std::make_unique<CounterFamily>(MetricType::kCounter, std::move(name), std::move(help),
                                                std::move(label_names));
  CounterFamily& ref = *family;
  families_.push_back(std::move(family));
  return ref;
}

GaugeFamily& MetricsRegistry::AddGauge(std::string name, std::string help,
                                       std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckNewFamily(name, label_names, MetricType::kGauge);
  auto family = std::make_unique<GaugeFamily>(MetricType::kGauge, std::move(name), std::move(help),
                                              std::move(label_names));
  GaugeFamily& ref = *family;
  families_.push_back(std::move(family));
  return ref;
}

HistogramFamily& MetricsRegistry::AddHistogram(std::string name, std::string help,
                                               std::vector<std::string> label_names,
                                               std::vector<double> bucket_bounds) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckNewFamily(name, label_names, MetricType::kHistogram);
  if (!bucket_bounds.empty() && bucket_bounds.back() == INFINITY) bucket_bounds.pop_back();
  for (size_t i = 0; i < bucket_bounds.size(); ++i) {
    if (!std::isfinite(bucket_bounds[i]) || (i > 0 && !(bucket_bounds[i - 1] < bucket_bounds[i]))) {
      MetricsBug(name + ": bucket bounds must be finite and strictly ascending");
    }
  }
  auto family = std::make_unique<HistogramFamily>(MetricType::kHistogram, std::move(name), std::move(help),
                                                  std::move(label_names), std::move(bucket_bounds));
  HistogramFamily& ref = *family;
  families_.push_back(std::move(family));
  return ref;
}

std::string MetricsRegistry::Render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& family : families_) family->Render(&out);
  return out;
}

// --- ServerMetrics ---

namespace {

std::vector<std::string> ModelLabels() { return {"model_name"}; }
std::vector<std::string> TierLabels() { return {"model_name", "tier"}; }
std::vector<double> Bounds(std::span<const double> bounds) { return {bounds.begin(), bounds.end()}; }

#ifdef FERRY_HAVE_CUDA
constexpr bool kBuiltWithCuda = true;
#else
constexpr bool kBuiltWithCuda = false;
#endif

struct ProcessStats {
  bool ok = false;
  double cpu_seconds = 0;
  double resident_bytes = 0;
  double virtual_bytes = 0;
  double open_fds = 0;
  double max_fds = 0;
  double threads = 0;
};

// /proc/self/stat fields after the command name: 14 utime, 15 stime (clock ticks), 20
// num_threads, 22 starttime (ticks since boot), 23 vsize (bytes), 24 rss (pages).
std::vector<std::string> StatFields() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  std::getline(in, line);
  const size_t close = line.rfind(')');
  std::vector<std::string> fields;
  if (close == std::string::npos) return fields;
  std::istringstream rest(line.substr(close + 2));
  for (std::string f; rest >> f;) fields.push_back(f);
  return fields;  // fields[0] is field 3 (state)
}

ProcessStats ReadProcessStats() {
  ProcessStats s;
  const std::vector<std::string> f = StatFields();
  if (f.size() < 22) return s;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  s.cpu_seconds = (std::stod(f[11]) + std::stod(f[12])) / tick;
  s.threads = std::stod(f[17]);
  s.virtual_bytes = std::stod(f[20]);
  s.resident_bytes = std::stod(f[21]) * static_cast<double>(sysconf(_SC_PAGESIZE));
  s.open_fds = static_cast<double>(std::max<int64_t>(OpenFileCount(), 0));
  if (const int64_t limit = FileLimit(); limit >= 0) s.max_fds = static_cast<double>(limit);
  s.ok = true;
  return s;
}

double ProcessStartTime() {
  const std::vector<std::string> f = StatFields();
  std::ifstream up("/proc/uptime");
  double uptime = 0;
  if (f.size() < 20 || !(up >> uptime)) return 0;
  const double started_after_boot = std::stod(f[19]) / static_cast<double>(sysconf(_SC_CLK_TCK));
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return now - uptime + started_after_boot;
}

}  // namespace

ServerMetrics::ServerMetrics()
    : num_requests_running(registry.AddGauge("ferry:num_requests_running",
                                             "Number of requests in the running batch.", ModelLabels())),
      num_requests_waiting(registry.AddGauge("ferry:num_requests_waiting",
                                             "Number of requests waiting to be scheduled.", ModelLabels())),
      kv_cache_usage_perc(registry.AddGauge("ferry:kv_cache_usage_perc",
                                            "Fraction of KV cache blocks in use (0 to 1).", ModelLabels())),
      step_token_budget(registry.AddGauge("ferry:step_token_budget",
                                          "Token budget of the last decoder step: max_num_batched_tokens, or less "
                                          "while max_step_ms bounds the steps of decoding sequences.",
                                          ModelLabels())),
      num_preemptions(registry.AddCounter("ferry:num_preemptions_total",
                                          "Cumulative number of sequences preempted to free KV cache blocks.",
                                          ModelLabels())),
      engine_step_seconds(registry.AddHistogram("ferry:engine_step_seconds",
                                                "Wall time of one engine step or batch, in seconds.",
                                                ModelLabels(), Bounds(kLatencyBucketsSeconds))),
      batch_size(registry.AddHistogram("ferry:batch_size",
                                       "Number of sequences or encoder inputs per engine step or batch.",
                                       ModelLabels(), Bounds(kTokenCountBuckets))),
      iteration_tokens(registry.AddHistogram("ferry:iteration_tokens_total",
                                             "Number of tokens processed per engine step or encoder batch.",
                                             ModelLabels(), Bounds(kTokenCountBuckets))),
      prefix_cache_queries(registry.AddCounter("ferry:prefix_cache_queries_total",
                                               "Prompt tokens looked up in the prefix cache at admission.",
                                               ModelLabels())),
      prefix_cache_hits(registry.AddCounter("ferry:prefix_cache_hits_total",
                                            "Prompt tokens found in the prefix cache (not computed again).",
                                            ModelLabels())),
      prompt_tokens(registry.AddCounter("ferry:prompt_tokens_total", "Number of prompt tokens processed.",
                                        TierLabels())),
      generation_tokens(registry.AddCounter("ferry:generation_tokens_total",
                                            "Number of generated tokens.", TierLabels())),
      time_to_first_token_seconds(registry.AddHistogram("ferry:time_to_first_token_seconds",
                                                        "Time from request arrival to the first output token, "
                                                        "in seconds.",
                                                        TierLabels(), Bounds(kLatencyBucketsSeconds))),
      inter_token_latency_seconds(registry.AddHistogram("ferry:inter_token_latency_seconds",
                                                        "Time between consecutive output tokens, in seconds.",
                                                        TierLabels(), Bounds(kLatencyBucketsSeconds))),
      e2e_request_latency_seconds(registry.AddHistogram("ferry:e2e_request_latency_seconds",
                                                        "Time from request arrival to completion, in seconds.",
                                                        TierLabels(), Bounds(kRequestLatencyBucketsSeconds))),
      request_queue_time_seconds(registry.AddHistogram("ferry:request_queue_time_seconds",
                                                       "Time a request waited before first being scheduled, "
                                                       "in seconds.",
                                                       TierLabels(), Bounds(kLatencyBucketsSeconds))),
      request_prompt_tokens(registry.AddHistogram("ferry:request_prompt_tokens",
                                                  "Number of prompt tokens per request.", TierLabels(),
                                                  Bounds(kTokenCountBuckets))),
      request_generation_tokens(registry.AddHistogram("ferry:request_generation_tokens",
                                                      "Number of generated tokens per request.", TierLabels(),
                                                      Bounds(kTokenCountBuckets))),
      request_success(registry.AddCounter("ferry:request_success_total",
                                          "Number of requests finished successfully, by finish reason.",
                                          {"model_name", "tier", "finished_reason"})),
      request_failure(registry.AddCounter("ferry:request_failure_total", "Number of failed requests, by reason.",
                                          {"model_name", "tier", "reason"})),
      http_requests(registry.AddCounter("ferry:http_requests_total",
                                        "Number of HTTP requests answered, by route and status code.",
                                        {"route", "code"})),
      tenant_requests(registry.AddCounter("ferry:tenant_requests_total",
                                          "API requests answered per tenant, by status code.", {"tenant", "code"})),
      tenant_tokens(registry.AddCounter("ferry:tenant_tokens_total",
                                        "Prompt and generated (or encoder input) tokens used per tenant.", {"tenant"})),
      rate_limited(registry.AddCounter("ferry:rate_limited_requests_total",
                                       "Requests refused by a tenant's rate limit, by which limit.",
                                       {"tenant", "limit"})),
      process_cpu_seconds(registry.AddCounter("process_cpu_seconds_total",
                                              "Total user and system CPU time spent in seconds.", {})),
      process_resident_memory(registry.AddGauge("process_resident_memory_bytes", "Resident memory size in bytes.", {})),
      process_virtual_memory(registry.AddGauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", {})),
      process_start_time(registry.AddGauge("process_start_time_seconds",
                                           "Start time of the process since unix epoch in seconds.", {})),
      process_open_fds(registry.AddGauge("process_open_fds", "Number of open file descriptors.", {})),
      process_max_fds(registry.AddGauge("process_max_fds", "Maximum number of open file descriptors.", {})),
      process_threads(registry.AddGauge("process_threads", "Number of OS threads in the process.", {})),
      build_info(registry.AddGauge("ferry:build_info", "ferry's version and build; the value is always 1.",
                                   {"version", "cuda"})) {
  build_info.WithLabels({std::string_view(kVersion), std::string_view(kBuiltWithCuda ? "yes" : "no")}).Set(1);
  process_start_time.WithLabels({}).Set(ProcessStartTime());
}

std::string ServerMetrics::Render() {
  const ProcessStats p = ReadProcessStats();
  if (p.ok) {
    process_cpu_seconds.WithLabels({}).Inc(std::max(0.0, p.cpu_seconds - reported_cpu_seconds_));
    reported_cpu_seconds_ = std::max(reported_cpu_seconds_, p.cpu_seconds);
    process_resident_memory.WithLabels({}).Set(p.resident_bytes);
    process_virtual_memory.WithLabels({}).Set(p.virtual_bytes);
    process_open_fds.WithLabels({}).Set(p.open_fds);
    process_max_fds.WithLabels({}).Set(p.max_fds);
    process_threads.WithLabels({}).Set(p.threads);
  }
  return registry.Render();
}

ServerMetrics::ModelMetrics ServerMetrics::ForModel(std::string_view model_name, bool decoder) {
  ModelMetrics m;
  m.num_requests_running = &num_requests_running.WithLabels({model_name});
  m.num_requests_waiting = &num_requests_waiting.WithLabels({model_name});
  if (decoder) {
    m.kv_cache_usage_perc = &kv_cache_usage_perc.WithLabels({model_name});
    m.step_token_budget = &step_token_budget.WithLabels({model_name});
    m.num_preemptions = &num_preemptions.WithLabels({model_name});
    m.prefix_cache_queries = &prefix_cache_queries.WithLabels({model_name});
    m.prefix_cache_hits = &prefix_cache_hits.WithLabels({model_name});
  }
  m.engine_step_seconds = &engine_step_seconds.WithLabels({model_name});
  m.batch_size = &batch_size.WithLabels({model_name});
  m.iteration_tokens = &iteration_tokens.WithLabels({model_name});
  return m;
}

ServerMetrics::TierMetrics ServerMetrics::ForTier(std::string_view model_name, std::string_view tier, bool decoder) {
  TierMetrics t;
  t.prompt_tokens = &prompt_tokens.WithLabels({model_name, tier});
  t.e2e_request_latency_seconds = &e2e_request_latency_seconds.WithLabels({model_name, tier});
  t.request_queue_time_seconds = &request_queue_time_seconds.WithLabels({model_name, tier});
  t.request_prompt_tokens = &request_prompt_tokens.WithLabels({model_name, tier});
  if (decoder) {
    t.generation_tokens = &generation_tokens.WithLabels({model_name, tier});
    t.time_to_first_token_seconds = &time_to_first_token_seconds.WithLabels({model_name, tier});
    t.inter_token_latency_seconds = &inter_token_latency_seconds.WithLabels({model_name, tier});
    t.request_generation_tokens = &request_generation_tokens.WithLabels({model_name, tier});
  }
  return t;
}

void ServerMetrics::RecordSuccess(std::string_view model_name, std::string_view tier,
                                  std::string_view finished_reason) {
  request_success.WithLabels({model_name, tier, finished_reason}).Inc();
}

void ServerMetrics::RecordFailure(std::string_view model_name, std::string_view tier, std::string_view reason) {
  request_failure.WithLabels({model_name, tier, reason}).Inc();
}

void ServerMetrics::RecordHttpRequest(std::string_view route, int status_code) {
  const std::string code = std::to_string(status_code);
  http_requests.WithLabels({route, std::string_view(code)}).Inc();
}

}  // namespace ferry::serve
