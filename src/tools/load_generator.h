// The load generator behind `ferry bench serve`: sends a schedule of requests to an
// OpenAI-compatible HTTP server (ferry's or any other) and measures what a client sees.
//
// The metric definitions follow vLLM's benchmark_serving so numbers can be compared:
//   TTFT  time from sending a request to its first non-empty streamed text chunk
//   ITL   every gap between two successive content chunks of one request
//   TPOT  (E2E - TTFT) / (output tokens - 1), per request with more than one token
//   E2E   time from sending a request to the end of its response
//   goodput  completed requests per second that meet every SLO given
// Arrivals are Gamma-distributed (shape = burstiness, mean = 1 / rate; burstiness 1 is a
// Poisson process); a concurrency cap holds arrivals until a request finishes, so an
// infinite rate with a cap is a closed loop of that many clients.
//
// All connections are driven asynchronously by Boost.Beast on one io_context, run on the
// calling thread: hundreds of concurrent streams cost no thread each. Connections are kept
// alive and reused by later requests (at most one request on a connection at a time), so
// connection setup is paid once per concurrency slot rather than per request. Responses
// are read as they arrive, and every streamed event is timed at the read that completed it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ferry::tools {

enum class LoadEndpoint { kCompletions, kEmbeddings, kClassify };

// Whether `s` starts with `prefix`, ASCII case ignored.
inline bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(s[i]) != lower(prefix[i])) return false;
  }
  return true;
}

// "completions", "embeddings" or "classify".
Result<LoadEndpoint> ParseLoadEndpoint(std::string_view name);
std::string_view LoadEndpointName(LoadEndpoint endpoint);
// "/v1/completions", "/v1/embeddings", "/v1/classify".
std::string_view LoadEndpointPath(LoadEndpoint endpoint);

// "inf" (any case) or a number of requests per second; 0 means infinite as well.
Result<double> ParseRequestRate(std::string_view text);

// A plain-HTTP server address: "http://host[:port][/prefix]".
struct HttpUrl {
  std::string host;
  std::string port = "80";
  std::string path_prefix;  // without a trailing '/'; "" for the root
};
Result<HttpUrl> ParseHttpUrl(std::string_view url);

// Service-level objectives for goodput; an unset target is not checked.
struct SloTargets {
  std::optional<double> ttft_ms;
  std::optional<double> tpot_ms;
  std::optional<double> e2e_ms;

  bool any() const { return ttft_ms || tpot_ms || e2e_ms; }
};

// One phase of a rate schedule: `rate` requests per second (Gamma arrivals with the run's
// burstiness) for `duration_s` seconds; a rate of 0 is a silent phase.
struct RatePhase {
  double duration_s = 0;
  double rate = 0;
};

// A tier of traffic: a share of the requests, sent with the tier's API key, judged against
// the tier's SLO (each target unset here falls back to the run's).
struct LoadTier {
  std::string name;
  double share = 0;
  std::string api_key;  // empty: the run's --api-key
  SloTargets slo;
};

// Everything one benchmark run needs; filled from the command line.
struct LoadOptions {
  std::string url = "http://127.0.0.1:8000";
  std::string model;
  std::string api_key;
  LoadEndpoint endpoint = LoadEndpoint::kCompletions;
  int num_prompts = 100;
  double request_rate = 0;  // requests per second; 0 or infinity: all at once
  double burstiness = 1.0;  // Gamma shape of the inter-arrival times
  int max_concurrency = 0;  // cap on requests in flight; 0: no cap
  // Prompt length in tokens, drawn uniformly from [min, max] per request. Completions get
  // random token ids from [token_id_min, token_id_max], so the server sees exactly that
  // many prompt tokens; the encoder endpoints get that many words of synthetic text.
  int input_len_min = 128;
  int input_len_max = 128;
  int token_id_min = 10;
  int token_id_max = 1000;
  // JSON lines with a "text" field: used in order (cycling) instead of random prompts.
  std::string dataset_path;
  // Fields merged into every request body (e.g. {"truncation": "chunk", "chunk_tokens": 512}).
  nlohmann::json extra_body = nlohmann::json::object();
  int output_len_min = 128;  // max_tokens, drawn uniformly from [min, max] per request
  int output_len_max = 128;
  bool ignore_eos = true;
  double temperature = 0.0;
  bool stream = true;
  SloTargets slo;
  uint64_t seed = 0;
  int warmup_requests = 0;   // sent and awaited before timing starts; not recorded
  double timeout_s = 600.0;  // per request, from sending to the last byte
  bool progress = true;      // a progress bar on stderr
  std::string label;
  // When not empty, arrivals follow this schedule instead of request_rate, and the number
  // of requests is what it produces (num_prompts is ignored).
  std::vector<RatePhase> rate_schedule;
  std::vector<LoadTier> tiers;  // empty: one tier, the run itself
  // The response header naming what served a request (a QoS variant), recorded per request.
  std::string variant_header = "x-ferry-variant";
};

// "60:8,60:24,60:8": seconds:requests-per-second phases.
Result<std::vector<RatePhase>> ParseRateSchedule(std::string_view text);
// "NAME:SHARE[:API_KEY]", e.g. "gold:0.2:sk-gold".
Result<LoadTier> ParseLoadTier(std::string_view text);
// "NAME:ttft=MS,tpot=MS,e2e=MS" (any subset) sets that tier's SLO targets.
Status ApplyTierSlo(std::vector<LoadTier>& tiers, std::string_view text);
// Send offsets following `schedule` (Gamma gaps within each phase, restarting at each
// phase boundary), and each request's phase. Reproducible for one seed.
std::vector<double> ScheduleOffsets(const std::vector<RatePhase>& schedule, double burstiness, uint64_t seed,
                                    std::vector<int>* phases);
// Each of `n` requests' tier index, drawn by share (reproducible for one seed).
std::vector<int> AssignTiers(int n, const std::vector<LoadTier>& tiers, uint64_t seed);

// Checks ranges and combinations; RunLoadBenchmark calls it first.
Status ValidateLoadOptions(const LoadOptions& options);

// Send offsets in seconds from the start of the run, non-decreasing, the first at 0.
// Gaps are Gamma(shape = burstiness, mean = 1 / rate), reproducible for one seed. A rate
// of 0 or infinity puts every offset at 0.
std::vector<double> ArrivalOffsets(int n, double rate, double burstiness, uint64_t seed);

// The q-th percentile (q in [0, 100]) of sorted values, linearly interpolated between the
// closest ranks (numpy's default). 0 for no values.
double Percentile(std::span<const double> sorted, double q);

// Summary statistics of a sample; std is the population standard deviation.
struct Distribution {
  size_t count = 0;
  double mean = 0;
  double std = 0;
  double p50 = 0;
  double p90 = 0;
  double p95 = 0;
  double p99 = 0;
  double max = 0;
};
Distribution Summarize(std::vector<double> values);

// One Server-Sent Event: the "data" lines joined by '\n', and the "event" field.
struct SseEvent {
  std::string event;
  std::string data;
};

// Incremental Server-Sent Events parser (the WHATWG rules): bytes may arrive split
// anywhere, lines end in LF, CRLF or CR, ':' lines are comments, fields other than
// "data" and "event" are ignored, and a blank line dispatches the event if it has data.
// Thread-compatible.
class SseParser {
 public:
  // Appends each event that `bytes` completes to `out`.
  void Feed(std::string_view bytes, std::vector<SseEvent>& out);

 private:
  void ProcessLine(std::string_view line, std::vector<SseEvent>& out);

  std::string line_;      // the current line so far
  bool skip_lf_ = false;  // the last byte was a CR: a following LF ends no new line
  bool has_data_ = false;
  std::string data_;
  std::string event_;
};

// One request's prompt and length, decided before the run.
struct PlannedRequest {
  std::vector<int> prompt_ids;  // random ids, or
  std::string prompt_text;      // text (dataset or synthetic), or
  nlohmann::json input;         // an encoder request's `input` as the dataset gives it
  int prompt_tokens = 0;        // known only for prompt_ids; 0 otherwise
  int max_tokens = 0;
  uint64_t seed = 0;
};

// One line of a dataset: a text, or (encoder endpoints) an `input` sent as it is, e.g.
// several token-id arrays.
struct DatasetEntry {
  std::string text;
  nlohmann::json input;  // null when the line has a text
};

// `count` requests, reproducible for one seed. `dataset` (loaded) replaces the random
// prompts when not empty.
std::vector<PlannedRequest> PlanRequests(const LoadOptions& options, const std::vector<DatasetEntry>& dataset,
                                         int count, uint64_t seed);

// The JSON request body for the options' endpoint.
std::string RequestBody(const PlannedRequest& request, const LoadOptions& options);

// Reads a JSON-lines file whose lines each hold a "text" string.
Result<std::vector<std::string>> LoadDatasetTexts(const std::string& path);
// The same, also accepting lines with an "input" (any JSON) instead of a text.
Result<std::vector<DatasetEntry>> LoadDataset(const std::string& path);

// What happened to one request.
struct RequestRecord {
  int index = 0;
  double scheduled_s = 0;  // planned send offset from the start of the run
  double start_s = 0;      // when it was sent: later than planned when the cap held it
  bool success = false;
  int http_status = 0;  // 0: no HTTP response
  // "" on success; otherwise "http_<status>", "connect", "timeout", "io" (a transport
  // failure after connecting), "bad_response" (unparsable body) or "stream_error" (an
  // error event inside a 200 stream).
  std::string error_class;
  std::string error;      // the server's error message or the transport's
  bool streamed = false;  // the reply was an event stream: TTFT, ITL and TPOT are per chunk
  double e2e_ms = 0;
  // Streamed: time to the first content chunk. Otherwise (and for a stream without
  // content) the whole reply arrives at once, so it equals e2e_ms.
  std::optional<double> ttft_ms;
  std::optional<double> tpot_ms;  // streamed replies with more than one output token
  std::vector<double> itl_ms;  // events completed by one read share a time: a gap of 0
  int64_t prompt_tokens = 0;  // from "usage" when given, else what was sent if known
  int64_t output_tokens = 0;  // from "usage" when given, else the content chunks
  int content_chunks = 0;
  std::string tier;     // the tier it was sent as ("" without tiers)
  int phase = -1;       // its rate-schedule phase (-1 without a schedule)
  std::string variant;  // the variant header's value ("" when absent)
};

// Whether a request completed and met every target set. A request with one output token
// has no TPOT and meets any TPOT target.
bool MeetsSlo(const RequestRecord& record, const SloTargets& slo);

// Aggregates of one run.
struct BenchmarkSummary {
  int num_requests = 0;
  int completed = 0;
  int failed = 0;
  std::map<std::string, int> failures;  // by error class
  double duration_s = 0;
  int64_t total_input_tokens = 0;
  int64_t total_output_tokens = 0;
  double request_throughput = 0;      // completed / duration
  double output_throughput = 0;       // output tokens / duration
  double total_token_throughput = 0;  // (input + output tokens) / duration
  std::optional<double> goodput;      // set when an SLO is: good requests / duration
  int good_requests = 0;
  Distribution ttft_ms;
  Distribution tpot_ms;
  Distribution itl_ms;  // over every gap of every request
  Distribution e2e_ms;
};
BenchmarkSummary SummarizeRun(const std::vector<RequestRecord>& records, double duration_s, const SloTargets& slo);

// One tier's share of a run (or the whole run, when it has no tiers), judged against the
// tier's SLO, with its breakdown by schedule phase and by the variant that served it.
struct TierReport {
  struct Phase {
    int index = 0;
    double start_s = 0;
    double duration_s = 0;
    double rate = 0;  // the schedule's rate for the whole run
    int requests = 0;
    int completed = 0;
    int good = 0;
    double slo_attainment = 0;  // good / requests
    double goodput = 0;         // good / duration
    Distribution ttft_ms;
  };
  struct VariantShare {
    int requests = 0;
    int64_t output_tokens = 0;
    double token_share = 0;  // of the tier's output tokens
  };
  std::string tier;
  SloTargets slo;
  BenchmarkSummary summary;
  double slo_attainment = 0;  // good / requests (failed requests miss)
  std::vector<Phase> phases;
  std::map<std::string, VariantShare> variants;  // "" for replies without the header
};
// Per tier (in the options' order; one entry for the whole run without tiers).
std::vector<TierReport> SummarizeTiers(const LoadOptions& options, const std::vector<RequestRecord>& records,
                                       double duration_s);

struct BenchmarkReport {
  LoadOptions options;
  std::vector<RequestRecord> records;  // in request order
  BenchmarkSummary summary;
  int peak_in_flight = 0;
  double started_unix_s = 0;     // wall-clock time of the first send (to line up with server logs)
  std::vector<TierReport> tiers;  // with tiers or a rate schedule
};

// Runs the benchmark: resolves and connects to the server (failing with kUnavailable when
// it cannot), sends the warm-up requests (failing when every one of them fails), then
// the timed requests. Single request failures are counted in the report, not returned.
Result<BenchmarkReport> RunLoadBenchmark(const LoadOptions& options);

// The human-readable result table.
std::string FormatReport(const BenchmarkReport& report);
// Options, summary and, with `include_requests`, one object per request.
nlohmann::json ReportToJson(const BenchmarkReport& report, bool include_requests);

}  // namespace ferry::tools
