// `ferry bench serve`: the HTTP load generator (tools/load_generator.h) against ferry's
// server or any OpenAI-compatible one. Argument handling only.
#include <cstdio>
#include <fstream>

#include "cli/subcommands.h"
#include "tools/load_generator.h"

namespace ferry::cli {

namespace {

struct BenchServeArgs {
  tools::LoadOptions load;
  std::string endpoint = "completions";
  std::string request_rate = "inf";
  int input_len = 0;
  std::vector<int> input_len_range;
  int output_len = 0;
  std::vector<int> output_len_range;
  double slo_ttft_ms = 0;
  double slo_tpot_ms = 0;
  double slo_e2e_ms = 0;
  bool no_progress = false;
  std::string json_path;
  bool save_requests = false;
  std::string extra_body;
  std::string rate_schedule;
  std::vector<std::string> tiers;
  std::vector<std::string> tier_slos;
  bool num_prompts_given = false;
  bool request_rate_given = false;
};

// A fixed length (when given) or an "a,b" range (when given) into [min, max].
Status ApplyLength(const char* name, int fixed, const std::vector<int>& range, int& min, int& max) {
  if (fixed != 0 && !range.empty()) {
    return InvalidArgument(std::string("give --") + name + " or --" + name + "-range, not both");
  }
  if (fixed != 0) {
    min = max = fixed;
  } else if (!range.empty()) {
    min = range[0];
    max = range[1];
  }
  return Status::Ok();
}

Status ToLoadOptions(BenchServeArgs& a) {
  tools::LoadOptions& o = a.load;
  Result<tools::LoadEndpoint> endpoint = tools::ParseLoadEndpoint(a.endpoint);
  if (!endpoint.ok()) return endpoint.status();
  o.endpoint = *endpoint;
  Result<double> rate = tools::ParseRequestRate(a.request_rate);
  if (!rate.ok()) return rate.status();
  o.request_rate = *rate;
  FERRY_RETURN_IF_ERROR(ApplyLength("input-len", a.input_len, a.input_len_range, o.input_len_min, o.input_len_max));
  FERRY_RETURN_IF_ERROR(
      ApplyLength("output-len", a.output_len, a.output_len_range, o.output_len_min, o.output_len_max));
  if (!a.rate_schedule.empty()) {
    if (a.num_prompts_given || a.request_rate_given) {
      return InvalidArgument("--rate-schedule sets the arrivals and their number; drop --num-prompts and --request-rate");
    }
    Result<std::vector<tools::RatePhase>> schedule = tools::ParseRateSchedule(a.rate_schedule);
    if (!schedule.ok()) return schedule.status();
    o.rate_schedule = *schedule;
  }
  for (const std::string& spec : a.tiers) {
    Result<tools::LoadTier> tier = tools::ParseLoadTier(spec);
    if (!tier.ok()) return tier.status();
    o.tiers.push_back(*tier);
  }
  for (const std::string& spec : a.tier_slos) FERRY_RETURN_IF_ERROR(tools::ApplyTierSlo(o.tiers, spec));
    if (a.slo_ttft_ms > 0) o.slo.ttft_ms = a.slo_ttft_ms;
  if (a.slo_tpot_ms > 0) o.slo.tpot_ms = a.slo_tpot_ms;
  if (a.slo_e2e_ms > 0) o.slo.e2e_ms = a.slo_e2e_ms;
  o.progress = !a.no_progress;
  if (!a.extra_body.empty()) {
    o.extra_body = nlohmann::json::parse(a.extra_body, nullptr, /*allow_exceptions=*/false);
    if (!o.extra_body.is_object()) return InvalidArgument("--extra-body must be a JSON object");
  }
  return tools::ValidateLoadOptions(o);
}

int RunBenchServe(BenchServeArgs& a, CLI::App& sub) {
  a.num_prompts_given = sub.get_option("--num-prompts")->count() > 0;
  a.request_rate_given = sub.get_option("--request-rate")->count() > 0;
  Status st = ToLoadOptions(a);
  if (!st.ok()) return Fail(st);
  Result<tools::BenchmarkReport> report = tools::RunLoadBenchmark(a.load);
  if (!report.ok()) return Fail(report.status());
  std::fputs(tools::FormatReport(*report).c_str(), stdout);
  std::fflush(stdout);
  if (!a.json_path.empty()) {
    std::ofstream out(a.json_path);
    out << tools::ReportToJson(*report, a.save_requests).dump(2) << "\n";
    if (!out.flush()) return Fail(Internal("cannot write '" + a.json_path + "'"));
  }
  if (report->summary.completed == 0) return Fail(Unavailable("no request completed"));
  return 0;
}

}  // namespace

void RegisterBenchServe(CLI::App& bench, int& exit_code) {
  auto a = std::make_shared<BenchServeArgs>();
  tools::LoadOptions& o = a->load;
  CLI::App* sub = bench.add_subcommand("serve",
                                       "Load an OpenAI-compatible HTTP server and measure TTFT, TPOT, ITL, "
                                       "E2E latency, throughput and goodput");
  sub->add_option("--url", o.url, "Server base URL (http only)")->capture_default_str();
  sub->add_option("--model", o.model, "Model name sent in each request")->required();
  sub->add_option("--api-key", o.api_key, "Sent as 'Authorization: Bearer KEY'");
  sub->add_option("--endpoint", a->endpoint, "completions, embeddings or classify")->capture_default_str();
  sub->add_option("--num-prompts", o.num_prompts, "Requests to send")->capture_default_str();
  sub->add_option("--request-rate", a->request_rate, "Requests per second, or inf (0 = inf): all at once")
      ->capture_default_str();
  sub->add_option("--burstiness", o.burstiness,
                  "Gamma shape of the inter-arrival times (1 = Poisson; lower is burstier)")
      ->capture_default_str();
  sub->add_option("--max-concurrency", o.max_concurrency,
                  "Cap on requests in flight (0 = none); with rate inf, a closed loop of this many clients")
      ->capture_default_str();
  sub->add_option("--input-len", a->input_len, "Prompt tokens per request (default 128)");
  sub->add_option("--input-len-range", a->input_len_range, "Prompt tokens drawn uniformly from a,b")
      ->delimiter(',')
      ->expected(2);
  sub->add_option("--token-id-min", o.token_id_min, "Smallest random prompt token id")->capture_default_str();
  sub->add_option("--token-id-max", o.token_id_max, "Largest random prompt token id")->capture_default_str();
  sub->add_option("--dataset", o.dataset_path,
                  "JSON lines with a \"text\" field: text prompts or encoder inputs instead of random ones");
  sub->add_option("--output-len", a->output_len, "max_tokens per request (default 128)");
  sub->add_option("--output-len-range", a->output_len_range, "max_tokens drawn uniformly from a,b")
      ->delimiter(',')
      ->expected(2);
  sub->add_flag("--ignore-eos,!--no-ignore-eos", o.ignore_eos,
                "Ask the server to generate max_tokens regardless of end of sequence (default on)");
  sub->add_option("--temperature", o.temperature, "Sampling temperature")->capture_default_str();
  sub->add_flag("--stream,!--no-stream", o.stream, "Stream completions as Server-Sent Events (default on)");
  sub->add_option("--slo-ttft-ms", a->slo_ttft_ms, "Goodput target: time to first token");
  sub->add_option("--slo-tpot-ms", a->slo_tpot_ms, "Goodput target: time per output token");
  sub->add_option("--slo-e2e-ms", a->slo_e2e_ms, "Goodput target: end-to-end latency");
  sub->add_option("--seed", o.seed, "Seed of prompts, lengths and arrivals")->capture_default_str();
  sub->add_option("--warmup", o.warmup_requests, "Requests sent and awaited before timing starts")
      ->capture_default_str();
  sub->add_option("--timeout-s", o.timeout_s, "Per-request timeout in seconds")->capture_default_str();
  sub->add_flag("--no-progress", a->no_progress, "No progress bar on stderr");
  sub->add_option("--label", o.label, "A name for this run, carried into the JSON");
  sub->add_option("--json", a->json_path, "Write the full result as JSON to this file");
  sub->add_option("--extra-body", a->extra_body,
                  "JSON object merged into every request body, e.g. '{\"truncation\": \"chunk\"}'");
  sub->add_flag("--save-requests", a->save_requests, "Include per-request records in the JSON");
  sub->add_option("--rate-schedule", a->rate_schedule,
                  "Phases of SECONDS:RATE, e.g. 60:8,60:24,60:8 (a 1x-3x-1x burst); replaces --request-rate and "
                  "--num-prompts");
  sub->add_option("--tier", a->tiers,
                  "NAME:SHARE[:API_KEY] (repeatable): a share of the requests sent with that tier's key, reported "
                  "per tier");
  sub->add_option("--tier-slo", a->tier_slos,
                  "NAME:ttft=MS,tpot=MS,e2e=MS (repeatable): a tier's own SLO targets (default: the --slo-* ones)");
  sub->add_option("--variant-header", o.variant_header,
                  "Response header naming the variant that served a request (recorded per request; '' to skip)")
      ->capture_default_str();
  sub->callback([a, sub, &exit_code] { exit_code = RunBenchServe(*a, *sub); });
}

}  // namespace ferry::cli
