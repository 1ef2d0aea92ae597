#include "serve/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <latch>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ferry::serve {
namespace {

size_t CountOccurrences(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++count;
  return count;
}

TEST(MetricsFormatTest, ValuesParseAsPrometheusFloats) {
  EXPECT_EQ(FormatMetricValue(0.0), "0");
  EXPECT_EQ(FormatMetricValue(-0.0), "0");
  EXPECT_EQ(FormatMetricValue(42.0), "42");
  EXPECT_EQ(FormatMetricValue(-7.0), "-7");
  EXPECT_EQ(FormatMetricValue(1e15), "1000000000000000");
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(2.5), "2.5");
  EXPECT_EQ(FormatMetricValue(1e-05), "1e-05");
  EXPECT_EQ(FormatMetricValue(1e300), "1e+300");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatMetricValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatMetricValue(std::nan("")), "NaN");
  // Shortest form still reads back exactly.
  const double third = 1.0 / 3.0;
  EXPECT_EQ(std::stod(FormatMetricValue(third)), third);
}

TEST(MetricsRegistryTest, RendersExactTextFormat) {
  MetricsRegistry registry;
  CounterFamily& requests =
      registry.AddCounter("app_requests_total", "Requests \"handled\".\nBy path\\code.", {"path", "code"});
  requests.WithLabels({"/b", "200"}).Inc(2);
  requests.WithLabels({"/a \"q\"\\x\ny", "500"}).Inc();
  GaugeFamily& temperature = registry.AddGauge("app:temperature", "Current temperature.", {});
  temperature.WithLabels({}).Set(-3.5);
  HistogramFamily& latency = registry.AddHistogram("app_latency_seconds", "Latency.", {"route"}, {0.5, 1, 2.5});
  Histogram& x = latency.WithLabels({"x"});
  x.Observe(0.25);
  x.Observe(1.0);  // on a bound: counted in le="1"
  x.Observe(3.0);
  registry.AddCounter("app_unused_total", "Never incremented.", {"kind"});

  const std::string expected =
      "# HELP app_requests_total Requests \"handled\".\\nBy path\\\\code.\n"
      "# TYPE app_requests_total counter\n"
      "app_requests_total{path=\"/a \\\"q\\\"\\\\x\\ny\",code=\"500\"} 1\n"
      "app_requests_total{path=\"/b\",code=\"200\"} 2\n"
      "# HELP app:temperature Current temperature.\n"
      "# TYPE app:temperature gauge\n"
      "app:temperature -3.5\n"
      "# HELP app_latency_seconds Latency.\n"
      "# TYPE app_latency_seconds histogram\n"
      "app_latency_seconds_bucket{route=\"x\",le=\"0.5\"} 1\n"
      "app_latency_seconds_bucket{route=\"x\",le=\"1\"} 2\n"
      "app_latency_seconds_bucket{route=\"x\",le=\"2.5\"} 2\n"
      "app_latency_seconds_bucket{route=\"x\",le=\"+Inf\"} 3\n"
      "app_latency_seconds_sum{route=\"x\"} 4.25\n"
      "app_latency_seconds_count{route=\"x\"} 3\n"
      "# HELP app_unused_total Never incremented.\n"
      "# TYPE app_unused_total counter\n";
  EXPECT_EQ(registry.Render(), expected);
}

TEST(MetricsRegistryTest, UnlabelledFamiliesRenderZeroFromTheStart) {
  MetricsRegistry registry;
  registry.AddCounter("a_total", "A.", {});
  registry.AddHistogram("b", "B.", {}, {1});
  EXPECT_EQ(registry.Render(),
            "# HELP a_total A.\n# TYPE a_total counter\na_total 0\n"
            "# HELP b B.\n# TYPE b histogram\nb_bucket{le=\"1\"} 0\nb_bucket{le=\"+Inf\"} 0\nb_sum 0\nb_count 0\n");
}

TEST(MetricsRegistryTest, ChildrenAreStableAndSortedByLabelValues) {
  MetricsRegistry registry;
  GaugeFamily& family = registry.AddGauge("g", "G.", {"a", "b"});
  Gauge& first = family.WithLabels({"z", "1"});
  family.WithLabels({"a", "2"}).Set(2);
  family.WithLabels({"a", "10"}).Set(10);
  EXPECT_EQ(&family.WithLabels({"z", "1"}), &first);
  first.Inc();
  first.Inc();
  first.Dec();
  first.Add(0.5);
  EXPECT_EQ(first.Value(), 1.5);
  EXPECT_EQ(registry.Render(),
            "# HELP g G.\n# TYPE g gauge\n"
            "g{a=\"a\",b=\"10\"} 10\n"
            "g{a=\"a\",b=\"2\"} 2\n"
            "g{a=\"z\",b=\"1\"} 1.5\n");
}

TEST(MetricsCounterTest, IgnoresNegativeAndNanIncrements) {
  Counter counter;
  counter.Inc();
  counter.Inc(2.5);
  counter.Inc(-10);
  counter.Inc(std::nan(""));
  EXPECT_EQ(counter.Value(), 3.5);
}

TEST(MetricsHistogramTest, BucketsAreCumulativeWithInclusiveBounds) {
  const std::vector<double> bounds = {1, 2, 4, 8};
  Histogram histogram(bounds);
  for (double v : {0.0, 1.0, 1.5, 2.0, 3.0, 4.0, 8.0, 8.5, 100.0, -5.0}) histogram.Observe(v);
  histogram.Observe(std::nan(""));  // ignored
  const Histogram::Snapshot s = histogram.Read();
  // <=1: 0, 1, -5 | <=2: 1.5, 2 | <=4: 3, 4 | <=8: 8 | +Inf: 8.5, 100
  EXPECT_EQ(s.cumulative_counts, (std::vector<uint64_t>{3, 5, 7, 8, 10}));
  EXPECT_EQ(s.count, 10u);
  EXPECT_EQ(s.sum, 0.0 + 1 + 1.5 + 2 + 3 + 4 + 8 + 8.5 + 100 - 5);
}

TEST(MetricsHistogramTest, TrailingInfBoundIsImplied) {
  MetricsRegistry registry;
  HistogramFamily& family =
      registry.AddHistogram("h", "H.", {}, {0.25, std::numeric_limits<double>::infinity()});
  EXPECT_EQ(family.bucket_bounds(), std::vector<double>{0.25});
  family.WithLabels({}).Observe(0.5);
  EXPECT_EQ(CountOccurrences(registry.Render(), "le=\"+Inf\""), 1u);
}

TEST(MetricsConcurrencyTest, ConcurrentUpdatesSumExactly) {
  constexpr int kThreads = 8;
  constexpr int kIterations = 500000;
  MetricsRegistry registry;
  CounterFamily& counters = registry.AddCounter("c_total", "C.", {"who"});
  GaugeFamily& gauges = registry.AddGauge("g", "G.", {"who"});
  HistogramFamily& histograms = registry.AddHistogram("h", "H.", {"who"}, {0.5, 1});

  std::latch start(kThreads + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string own = "t" + std::to_string(t);
      start.arrive_and_wait();
      // Every thread races to create the shared children, then updates them in a tight
      // loop (where a lost update would show), and creates its own child on the way.
      Counter& counter = counters.WithLabels({"shared"});
      Gauge& gauge = gauges.WithLabels({"shared"});
      Histogram& histogram = histograms.WithLabels({"shared"});
      for (int i = 0; i < kIterations; ++i) {
        counter.Inc();
        gauge.Add(i % 2 == 0 ? 1.5 : -0.5);
        histogram.Observe(i % 2 == 0 ? 0.25 : 2.0);
        if (i % 100 == 0) counters.WithLabels({own}).Inc(0.5);
      }
    });
  }
  // Render while the others update: iterating children must be safe against insertion.
  threads.emplace_back([&] {
    start.arrive_and_wait();
    for (int i = 0; i < 50; ++i) EXPECT_NE(registry.Render().find("# TYPE h histogram"), std::string::npos);
  });
  for (std::thread& thread : threads) thread.join();

  constexpr double kTotal = static_cast<double>(kThreads) * kIterations;
  EXPECT_EQ(counters.WithLabels({"shared"}).Value(), kTotal);
  EXPECT_EQ(gauges.WithLabels({"shared"}).Value(), kTotal / 2);  // (1.5 - 0.5) per pair
  const Histogram::Snapshot s = histograms.WithLabels({"shared"}).Read();
  EXPECT_EQ(s.cumulative_counts, (std::vector<uint64_t>{uint64_t(kTotal / 2), uint64_t(kTotal / 2), uint64_t(kTotal)}));
  EXPECT_EQ(s.sum, kTotal / 2 * 0.25 + kTotal / 2 * 2.0);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(counters.WithLabels({"t" + std::to_string(t)}).Value(), kIterations / 100 * 0.5);
  }
  EXPECT_EQ(CountOccurrences(registry.Render(), "c_total{who="), static_cast<size_t>(kThreads + 1));
}

TEST(MetricsDeathTest, RegistrationMisuseAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  MetricsRegistry registry;
  CounterFamily& family = registry.AddCounter("dup_total", "D.", {"a"});
  EXPECT_DEATH(registry.AddGauge("dup_total", "D.", {}), "registered twice");
  EXPECT_DEATH(registry.AddCounter("bad-name", "B.", {}), "invalid metric name");
  EXPECT_DEATH(registry.AddCounter("x_total", "X.", {"__reserved"}), "invalid label name");
  EXPECT_DEATH(registry.AddCounter("y_total", "Y.", {"a", "a"}), "duplicate label name");
  EXPECT_DEATH(registry.AddHistogram("h", "H.", {"le"}, {1}), "reserve the label 'le'");
  EXPECT_DEATH(registry.AddHistogram("h", "H.", {}, {2, 1}), "strictly ascending");
  EXPECT_DEATH(family.WithLabels({"v", "extra"}), "takes 1 label values, got 2");
}

TEST(ServerMetricsTest, RendersEveryFamilyWithHelpAndType) {
  ServerMetrics metrics;
  const std::string text = metrics.Render();
  const std::vector<std::pair<std::string, std::string>> families = {
      {"ferry:num_requests_running", "gauge"},
      {"ferry:num_requests_waiting", "gauge"},
      {"ferry:kv_cache_usage_perc", "gauge"},
      {"ferry:step_token_budget", "gauge"},
      {"ferry:num_preemptions_total", "counter"},
      {"ferry:engine_step_seconds", "histogram"},
      {"ferry:batch_size", "histogram"},
      {"ferry:iteration_tokens_total", "histogram"},
      {"ferry:prefix_cache_queries_total", "counter"},
      {"ferry:prefix_cache_hits_total", "counter"},
      {"ferry:prompt_tokens_total", "counter"},
      {"ferry:generation_tokens_total", "counter"},
      {"ferry:time_to_first_token_seconds", "histogram"},
      {"ferry:inter_token_latency_seconds", "histogram"},
      {"ferry:e2e_request_latency_seconds", "histogram"},
      {"ferry:request_queue_time_seconds", "histogram"},
      {"ferry:request_prompt_tokens", "histogram"},
      {"ferry:request_generation_tokens", "histogram"},
      {"ferry:request_success_total", "counter"},
      {"ferry:request_failure_total", "counter"},
      {"ferry:http_requests_total", "counter"},
      {"ferry:tenant_requests_total", "counter"},
      {"ferry:tenant_tokens_total", "counter"},
      {"ferry:rate_limited_requests_total", "counter"},
      {"process_cpu_seconds_total", "counter"},
      {"process_resident_memory_bytes", "gauge"},
      {"process_virtual_memory_bytes", "gauge"},
      {"process_start_time_seconds", "gauge"},
      {"process_open_fds", "gauge"},
      {"process_max_fds", "gauge"},
      {"process_threads", "gauge"},
      {"ferry:build_info", "gauge"},
  };
  size_t previous = 0;
  for (const auto& [name, type] : families) {
    const size_t help = text.find("# HELP " + name + " ");
    ASSERT_NE(help, std::string::npos) << name;
    EXPECT_GE(help, previous) << name << " out of registration order";
    previous = help;
    EXPECT_EQ(CountOccurrences(text, "# TYPE " + name + " " + type + "\n"), 1u) << name;
  }
  EXPECT_EQ(CountOccurrences(text, "# HELP "), families.size());
  EXPECT_EQ(CountOccurrences(text, "# TYPE "), families.size());
}

TEST(ServerMetricsTest, HotPathChildrenRenderWithTheirLabels) {
  ServerMetrics metrics;
  const ServerMetrics::ModelMetrics model = metrics.ForModel("m");
  model.num_requests_running->Set(3);
  model.kv_cache_usage_perc->Set(0.25);
  model.batch_size->Observe(3);
  model.num_preemptions->Inc();
  const ServerMetrics::TierMetrics tier = metrics.ForTier("m", "interactive");
  tier.time_to_first_token_seconds->Observe(0.07);
  tier.prompt_tokens->Inc(12);
  EXPECT_EQ(metrics.ForTier("m", "interactive").prompt_tokens, tier.prompt_tokens);
  metrics.RecordSuccess("m", "interactive", kFinishedStop);
  metrics.RecordFailure("m", "batch", kFailureRejectedQueueFull);
  metrics.RecordHttpRequest("/v1/completions", 200);
  metrics.RecordHttpRequest("/v1/completions", 200);

  const std::string text = metrics.Render();
  for (const std::string line : {
           "ferry:num_requests_running{model_name=\"m\"} 3\n",
           "ferry:num_requests_waiting{model_name=\"m\"} 0\n",
           "ferry:kv_cache_usage_perc{model_name=\"m\"} 0.25\n",
           "ferry:num_preemptions_total{model_name=\"m\"} 1\n",
           "ferry:batch_size_bucket{model_name=\"m\",le=\"2\"} 0\n",
           "ferry:batch_size_bucket{model_name=\"m\",le=\"4\"} 1\n",
           "ferry:batch_size_bucket{model_name=\"m\",le=\"8192\"} 1\n",
           "ferry:time_to_first_token_seconds_bucket{model_name=\"m\",tier=\"interactive\",le=\"0.05\"} 0\n",
           "ferry:time_to_first_token_seconds_bucket{model_name=\"m\",tier=\"interactive\",le=\"0.1\"} 1\n",
           "ferry:time_to_first_token_seconds_count{model_name=\"m\",tier=\"interactive\"} 1\n",
           "ferry:prompt_tokens_total{model_name=\"m\",tier=\"interactive\"} 12\n",
           "ferry:request_success_total{model_name=\"m\",tier=\"interactive\",finished_reason=\"stop\"} 1\n",
           "ferry:request_failure_total{model_name=\"m\",tier=\"batch\",reason=\"rejected_queue_full\"} 1\n",
           "ferry:http_requests_total{route=\"/v1/completions\",code=\"200\"} 2\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line;
  }
  // 14 bounds (1 .. 8192) plus +Inf.
  EXPECT_EQ(CountOccurrences(text, "ferry:iteration_tokens_total_bucket{model_name=\"m\","), 15u);
  EXPECT_EQ(CountOccurrences(text, "ferry:e2e_request_latency_seconds_bucket{model_name=\"m\",tier=\"interactive\","),
            std::size(kRequestLatencyBucketsSeconds) + 1);
}

}  // namespace
}  // namespace ferry::serve
