// The load generator's report: a table for the terminal and JSON (see load_generator.h).
#include <fmt/format.h>

#include <cmath>

#include "tools/load_generator.h"

namespace ferry::tools {

// ---------------------------------------------------------------------------------------
// Output

namespace {

std::string RateText(double rate) { return std::isinf(rate) || rate <= 0 ? "inf" : fmt::format("{:g}", rate); }

std::string SloText(const SloTargets& slo) {
  std::string out;
  auto add = [&out](const char* name, const std::optional<double>& v) {
    if (!v) return;
    if (!out.empty()) out += ", ";
    out += fmt::format("{} <= {:g} ms", name, *v);
  };
  add("TTFT", slo.ttft_ms);
  add("TPOT", slo.tpot_ms);
  add("E2E", slo.e2e_ms);
  return out;
}

nlohmann::json DistributionJson(const Distribution& d) {
  return {{"count", d.count}, {"mean", d.mean}, {"std", d.std}, {"p50", d.p50},
          {"p90", d.p90},     {"p95", d.p95},   {"p99", d.p99},   {"max", d.max}};
}

nlohmann::json OptionalJson(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

}  // namespace

std::string FormatReport(const BenchmarkReport& report) {
  const LoadOptions& o = report.options;
  const BenchmarkSummary& s = report.summary;
  std::string out;
  auto row = [&out](std::string_view name, const std::string& value) { out += fmt::format("{:<36}{}\n", name, value); };
  out += fmt::format("{:=^60}\n", " ferry bench serve ");
  if (!o.label.empty()) row("Label:", o.label);
  row("Server:", o.url + std::string(LoadEndpointPath(o.endpoint)) +
                     (o.endpoint == LoadEndpoint::kCompletions ? (o.stream ? " (stream)" : " (no stream)") : ""));
  row("Model:", o.model);
  if (o.rate_schedule.empty()) {
    row("Request rate (req/s):",
        RateText(o.request_rate) +
            (std::isinf(o.request_rate) || o.request_rate <= 0 ? "" : fmt::format(", burstiness {:g}", o.burstiness)));
  } else {
    row("Request rate (req/s):", fmt::format("rate schedule (below), burstiness {:g}", o.burstiness));
  }
  row("Max concurrency:", o.max_concurrency > 0 ? std::to_string(o.max_concurrency) : "none");
  row("Peak requests in flight:", std::to_string(report.peak_in_flight));
  row("Successful requests:", std::to_string(s.completed));
  row("Failed requests:", std::to_string(s.failed));
  for (const auto& [error_class, n] : s.failures) row(fmt::format("  {}:", error_class), std::to_string(n));
  row("Duration (s):", fmt::format("{:.2f}", s.duration_s));
  row("Total input tokens:", std::to_string(s.total_input_tokens));
  row("Total output tokens:", std::to_string(s.total_output_tokens));
  row("Request throughput (req/s):", fmt::format("{:.2f}", s.request_throughput));
  if (s.goodput) row("Goodput (req/s):", fmt::format("{:.2f}  ({})", *s.goodput, SloText(o.slo)));
  row("Output token throughput (tok/s):", fmt::format("{:.2f}", s.output_throughput));
  row("Total token throughput (tok/s):", fmt::format("{:.2f}", s.total_token_throughput));
  out += fmt::format("{:-^60}\n", "");
  out += fmt::format("{:<8}{:>10}{:>10}{:>10}{:>10}{:>10}\n", "ms", "mean", "p50", "p90", "p99", "max");
  auto dist = [&out](std::string_view name, const Distribution& d) {
    if (d.count == 0) {
      out += fmt::format("{:<8}{:>10}\n", name, "-");
      return;
    }
    out +=
        fmt::format("{:<8}{:>10.2f}{:>10.2f}{:>10.2f}{:>10.2f}{:>10.2f}\n", name, d.mean, d.p50, d.p90, d.p99, d.max);
  };
  dist("TTFT", s.ttft_ms);
  dist("TPOT", s.tpot_ms);
  dist("ITL", s.itl_ms);
  dist("E2E", s.e2e_ms);
  if (!o.rate_schedule.empty()) {
    std::string schedule;
    for (const RatePhase& p : o.rate_schedule) {
      schedule += fmt::format("{}{:g} s at {:g}/s", schedule.empty() ? "" : ", ", p.duration_s, p.rate);
    }
    out += fmt::format("{:-^60}\n", " rate schedule ");
    out += schedule + "\n";
  }
  for (const TierReport& t : report.tiers) {
    const std::string title = t.tier.empty() ? " all requests " : " tier " + t.tier + " ";
    out += fmt::format("{:-^60}\n", title);
    if (t.slo.any()) row("SLO:", SloText(t.slo));
    row("Requests (completed / failed):", fmt::format("{} / {}", t.summary.completed, t.summary.failed));
    row("SLO attainment:", fmt::format("{:.1f} %", t.slo_attainment * 100));
    if (t.summary.goodput) row("Goodput (req/s):", fmt::format("{:.2f}", *t.summary.goodput));
    if (t.summary.ttft_ms.count > 0) {
      row("TTFT p50 / p95 / p99 (ms):",
          fmt::format("{:.1f} / {:.1f} / {:.1f}", t.summary.ttft_ms.p50, t.summary.ttft_ms.p95, t.summary.ttft_ms.p99));
    }
    for (const auto& [variant, v] : t.variants) {
      row(fmt::format("  served by {}:", variant.empty() ? "(no header)" : variant),
          fmt::format("{} requests, {:.1f} % of output tokens", v.requests, v.token_share * 100));
    }
    for (const TierReport::Phase& p : t.phases) {
      row(fmt::format("  phase {} ({:g}/s):", p.index, p.rate),
          fmt::format("{} requests, {:.1f} % in SLO, goodput {:.2f}/s, TTFT p95 {:.1f} ms", p.requests,
                      p.slo_attainment * 100, p.goodput, p.ttft_ms.p95));
    }
  }
  out += fmt::format("{:=^60}\n", "");
  return out;
}

nlohmann::json ReportToJson(const BenchmarkReport& report, bool include_requests) {
  const LoadOptions& o = report.options;
  const BenchmarkSummary& s = report.summary;
  nlohmann::json j;
  j["label"] = o.label;
  j["config"] = {
      {"url", o.url},
      {"endpoint", LoadEndpointName(o.endpoint)},
      {"model", o.model},
      {"num_prompts", o.num_prompts},
      {"request_rate",
       std::isinf(o.request_rate) || o.request_rate <= 0 ? nlohmann::json("inf") : nlohmann::json(o.request_rate)},
      {"burstiness", o.burstiness},
      {"max_concurrency", o.max_concurrency},
      {"input_len", {o.input_len_min, o.input_len_max}},
      {"token_id_range", {o.token_id_min, o.token_id_max}},
      {"dataset", o.dataset_path},
      {"output_len", {o.output_len_min, o.output_len_max}},
      {"ignore_eos", o.ignore_eos},
      {"temperature", o.temperature},
      {"stream", o.stream},
      {"seed", o.seed},
      {"warmup_requests", o.warmup_requests},
      {"timeout_s", o.timeout_s},
      {"slo",
       {{"ttft_ms", OptionalJson(o.slo.ttft_ms)},
        {"tpot_ms", OptionalJson(o.slo.tpot_ms)},
        {"e2e_ms", OptionalJson(o.slo.e2e_ms)}}},
  };
  j["num_requests"] = s.num_requests;
  j["completed"] = s.completed;
  j["failed"] = s.failed;
  j["failures"] = s.failures;
  j["duration_s"] = s.duration_s;
  j["peak_in_flight"] = report.peak_in_flight;
  j["total_input_tokens"] = s.total_input_tokens;
  j["total_output_tokens"] = s.total_output_tokens;
  j["request_throughput"] = s.request_throughput;
  j["output_throughput"] = s.output_throughput;
  j["total_token_throughput"] = s.total_token_throughput;
  j["goodput"] = OptionalJson(s.goodput);
  j["good_requests"] = s.good_requests;
  j["ttft_ms"] = DistributionJson(s.ttft_ms);
  j["tpot_ms"] = DistributionJson(s.tpot_ms);
  j["itl_ms"] = DistributionJson(s.itl_ms);
  j["e2e_ms"] = DistributionJson(s.e2e_ms);
  j["started_unix_s"] = report.started_unix_s;
  if (!o.rate_schedule.empty()) {
    nlohmann::json schedule = nlohmann::json::array();
    for (const RatePhase& p : o.rate_schedule) schedule.push_back({{"duration_s", p.duration_s}, {"rate", p.rate}});
    j["config"]["rate_schedule"] = std::move(schedule);
  }
  if (!o.tiers.empty()) {
    nlohmann::json tiers = nlohmann::json::array();
    for (const LoadTier& t : o.tiers) tiers.push_back({{"name", t.name}, {"share", t.share}});
    j["config"]["tiers"] = std::move(tiers);
  }
  if (!report.tiers.empty()) {
    nlohmann::json tiers = nlohmann::json::array();
    for (const TierReport& t : report.tiers) {
      nlohmann::json phases = nlohmann::json::array();
      for (const TierReport::Phase& p : t.phases) {
        phases.push_back({{"index", p.index}, {"start_s", p.start_s}, {"duration_s", p.duration_s}, {"rate", p.rate},
                          {"requests", p.requests}, {"completed", p.completed}, {"good", p.good},
                          {"slo_attainment", p.slo_attainment}, {"goodput", p.goodput},
                          {"ttft_ms", DistributionJson(p.ttft_ms)}});
      }
      nlohmann::json variants = nlohmann::json::object();
      for (const auto& [name, v] : t.variants) {
        variants[name] = {{"requests", v.requests}, {"output_tokens", v.output_tokens}, {"token_share", v.token_share}};
      }
      tiers.push_back({{"tier", t.tier},
                       {"slo",
                        {{"ttft_ms", OptionalJson(t.slo.ttft_ms)},
                         {"tpot_ms", OptionalJson(t.slo.tpot_ms)},
                         {"e2e_ms", OptionalJson(t.slo.e2e_ms)}}},
                       {"requests", t.summary.num_requests},
                       {"completed", t.summary.completed},
                       {"failed", t.summary.failed},
                       {"good_requests", t.summary.good_requests},
                       {"slo_attainment", t.slo_attainment},
                       {"goodput", OptionalJson(t.summary.goodput)},
                       {"output_tokens", t.summary.total_output_tokens},
                       {"ttft_ms", DistributionJson(t.summary.ttft_ms)},
                       {"tpot_ms", DistributionJson(t.summary.tpot_ms)},
                       {"variants", std::move(variants)},
                       {"phases", std::move(phases)}});
    }
    j["tiers"] = std::move(tiers);
  }
  if (include_requests) {
    nlohmann::json requests = nlohmann::json::array();
    for (const RequestRecord& r : report.records) {
      requests.push_back({{"index", r.index},
                          {"scheduled_s", r.scheduled_s},
                          {"start_s", r.start_s},
                          {"success", r.success},
                          {"http_status", r.http_status},
                          {"error_class", r.error_class},
                          {"error", r.error},
                          {"streamed", r.streamed},
                          {"e2e_ms", r.e2e_ms},
                          {"ttft_ms", OptionalJson(r.ttft_ms)},
                          {"tpot_ms", OptionalJson(r.tpot_ms)},
                          {"itl_ms", r.itl_ms},
                          {"prompt_tokens", r.prompt_tokens},
                          {"output_tokens", r.output_tokens},
                          {"content_chunks", r.content_chunks},
                          {"tier", r.tier},
                          {"phase", r.phase},
                          {"variant", r.variant}});
    }
    j["requests"] = std::move(requests);
  }
  return j;
}


}  // namespace ferry::tools
