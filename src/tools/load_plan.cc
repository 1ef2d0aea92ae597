// The load generator's plan: options, the arrival schedule and statistics, the SSE parser
// and the requests (see load_generator.h). The HTTP client is load_generator.cc, the report
// load_report.cc.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <numeric>
#include <random>

#include "tools/load_generator.h"

namespace ferry::tools {

namespace {

// Words for synthetic encoder inputs: common, short, one token each in most vocabularies.
constexpr std::array<std::string_view, 32> kWords = {
    "the",  "people", "river", "water", "light", "house", "night", "stone", "field", "bread", "city",
    "king", "land",   "voice", "hand",  "day",   "word",  "fire",  "tree",  "road",  "sea",   "hill",
    "gate", "time",   "heart", "eye",   "gold",  "sun",   "wind",  "door",  "song",  "ship"};

}  // namespace

// ---------------------------------------------------------------------------------------
// Options

Result<LoadEndpoint> ParseLoadEndpoint(std::string_view name) {
  if (name == "completions") return LoadEndpoint::kCompletions;
  if (name == "embeddings") return LoadEndpoint::kEmbeddings;
  if (name == "classify") return LoadEndpoint::kClassify;
  return InvalidArgument("unknown endpoint '" + std::string(name) + "' (completions, embeddings or classify)");
}

std::string_view LoadEndpointName(LoadEndpoint endpoint) {
  switch (endpoint) {
    case LoadEndpoint::kCompletions:
      return "completions";
    case LoadEndpoint::kEmbeddings:
      return "embeddings";
    case LoadEndpoint::kClassify:
      return "classify";
  }
  return "?";
}

std::string_view LoadEndpointPath(LoadEndpoint endpoint) {
  switch (endpoint) {
    case LoadEndpoint::kCompletions:
      return "/v1/completions";
    case LoadEndpoint::kEmbeddings:
      return "/v1/embeddings";
    case LoadEndpoint::kClassify:
      return "/v1/classify";
  }
  return "/";
}

Result<double> ParseRequestRate(std::string_view text) {
  if (StartsWithNoCase(text, "inf") && (text.size() == 3 || (text.size() == 8 && StartsWithNoCase(text, "infinity")))) {
    return std::numeric_limits<double>::infinity();
  }
  double rate = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), rate);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(rate) || rate < 0) {
    return InvalidArgument("request rate must be a number >= 0 or 'inf', got '" + std::string(text) + "'");
  }
  if (rate == 0) return std::numeric_limits<double>::infinity();
  return rate;
}

Result<HttpUrl> ParseHttpUrl(std::string_view url) {
  if (StartsWithNoCase(url, "https://")) {
    return InvalidArgument("'" + std::string(url) + "': https is not supported; use plain http");
  }
  if (!StartsWithNoCase(url, "http://")) {
    return InvalidArgument("'" + std::string(url) + "' is not an http:// URL");
  }
  std::string_view rest = url.substr(7);
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  HttpUrl out;
  if (!authority.empty() && authority.front() == '[') {  // [ipv6]:port
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return InvalidArgument("'" + std::string(url) + "': unclosed '['");
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return InvalidArgument("'" + std::string(url) + "': bad port");
      out.port = std::string(after.substr(1));
    }
  } else {
    size_t colon = authority.rfind(':');
    if (colon != std::string_view::npos) {
      out.host = std::string(authority.substr(0, colon));
      out.port = std::string(authority.substr(colon + 1));
    } else {
      out.host = std::string(authority);
    }
  }
  if (out.host.empty()) return InvalidArgument("'" + std::string(url) + "' has no host");
  if (out.port.empty() || !std::all_of(out.port.begin(), out.port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoul(out.port) == 0 || std::stoul(out.port) > 65535) {
    return InvalidArgument("'" + std::string(url) + "': bad port '" + out.port + "'");
  }
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  out.path_prefix = std::string(path);
  return out;
}

Status ValidateLoadOptions(const LoadOptions& o) {
  if (o.model.empty()) return InvalidArgument("--model is required");
  if (o.num_prompts < 1) return InvalidArgument("--num-prompts must be at least 1");
  if (std::isnan(o.request_rate) || o.request_rate < 0) return InvalidArgument("--request-rate must be >= 0");
  if (!(o.burstiness > 0) || !std::isfinite(o.burstiness)) return InvalidArgument("--burstiness must be > 0");
  if (o.max_concurrency < 0) return InvalidArgument("--max-concurrency must be >= 0");
  if (o.input_len_min < 1 || o.input_len_max < o.input_len_min) {
    return InvalidArgument("input length range must satisfy 1 <= min <= max");
  }
  if (o.token_id_min < 0 || o.token_id_max < o.token_id_min) {
    return InvalidArgument("token id range must satisfy 0 <= min <= max");
  }
  if (o.output_len_min < 1 || o.output_len_max < o.output_len_min) {
    return InvalidArgument("output length range must satisfy 1 <= min <= max");
  }
  if (!(o.temperature >= 0)) return InvalidArgument("--temperature must be >= 0");
  if (!(o.timeout_s > 0)) return InvalidArgument("--timeout-s must be > 0");
  if (o.warmup_requests < 0) return InvalidArgument("--warmup must be >= 0");
  for (const auto& [name, v] : {std::pair{"--slo-ttft-ms", o.slo.ttft_ms}, std::pair{"--slo-tpot-ms", o.slo.tpot_ms},
                                std::pair{"--slo-e2e-ms", o.slo.e2e_ms}}) {
    if (v && !(*v > 0)) return InvalidArgument(std::string(name) + " must be > 0");
  }
  double scheduled = 0;
  for (const RatePhase& p : o.rate_schedule) {
    if (!(p.duration_s > 0) || !(p.rate >= 0) || !std::isfinite(p.rate)) {
      return InvalidArgument("--rate-schedule: each phase needs a duration > 0 and a finite rate >= 0");
    }
    scheduled += p.duration_s * p.rate;
  }
  if (!o.rate_schedule.empty() && !(scheduled > 0)) return InvalidArgument("--rate-schedule sends no requests");
  std::vector<std::string> names;
  for (const LoadTier& t : o.tiers) {
    if (t.name.empty()) return InvalidArgument("--tier: a tier needs a name");
    if (!(t.share > 0)) return InvalidArgument("--tier " + t.name + ": the share must be > 0");
    if (std::find(names.begin(), names.end(), t.name) != names.end()) {
      return InvalidArgument("--tier " + t.name + " is given twice");
    }
    names.push_back(t.name);
  }
  return ParseHttpUrl(o.url).status();
}

// ---------------------------------------------------------------------------------------
// Arrival schedule and statistics

std::vector<double> ArrivalOffsets(int n, double rate, double burstiness, uint64_t seed) {
  if (n <= 0) return {};
  std::vector<double> offsets(static_cast<size_t>(n), 0.0);
  if (!(rate > 0) || std::isinf(rate)) return offsets;
  std::mt19937_64 rng(seed);
  // Mean shape * scale = 1 / rate; the coefficient of variation is 1 / sqrt(shape).
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  for (size_t i = 1; i < offsets.size(); ++i) offsets[i] = offsets[i - 1] + gap(rng);
  return offsets;
}

double Percentile(std::span<const double> sorted, double q) {
  if (sorted.empty()) return 0;
  double pos = std::clamp(q, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  double frac = pos - static_cast<double>(lo);
  return sorted[lo] + frac * (sorted[hi] - sorted[lo]);
}

Distribution Summarize(std::vector<double> values) {
  Distribution d;
  d.count = values.size();
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  double ss = 0;
  for (double v : values) ss += (v - d.mean) * (v - d.mean);
  d.std = std::sqrt(ss / static_cast<double>(values.size()));
  d.p50 = Percentile(values, 50);
  d.p90 = Percentile(values, 90);
  d.p95 = Percentile(values, 95);
  d.p99 = Percentile(values, 99);
  d.max = values.back();
  return d;
}

bool MeetsSlo(const RequestRecord& r, const SloTargets& slo) {
  if (!r.success) return false;
  if (slo.ttft_ms && r.ttft_ms.value_or(r.e2e_ms) > *slo.ttft_ms) return false;
  if (slo.tpot_ms && r.tpot_ms.value_or(0.0) > *slo.tpot_ms) return false;
  if (slo.e2e_ms && r.e2e_ms > *slo.e2e_ms) return false;
  return true;
}

BenchmarkSummary SummarizeRun(const std::vector<RequestRecord>& records, double duration_s, const SloTargets& slo) {
  BenchmarkSummary s;
  s.num_requests = static_cast<int>(records.size());
  s.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const RequestRecord& r : records) {
    if (!r.success) {
      ++s.failed;
      ++s.failures[r.error_class];
      continue;
    }
    ++s.completed;
    s.total_input_tokens += r.prompt_tokens;
    s.total_output_tokens += r.output_tokens;
    if (r.ttft_ms) ttft.push_back(*r.ttft_ms);
    if (r.tpot_ms) tpot.push_back(*r.tpot_ms);
    itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
    e2e.push_back(r.e2e_ms);
    if (MeetsSlo(r, slo)) ++s.good_requests;
  }
  if (duration_s > 0) {
    s.request_throughput = s.completed / duration_s;
    s.output_throughput = static_cast<double>(s.total_output_tokens) / duration_s;
    s.total_token_throughput = static_cast<double>(s.total_input_tokens + s.total_output_tokens) / duration_s;
    if (slo.any()) s.goodput = s.good_requests / duration_s;
  } else if (slo.any()) {
    s.goodput = 0.0;
  }
  s.ttft_ms = Summarize(std::move(ttft));
  s.tpot_ms = Summarize(std::move(tpot));
  s.itl_ms = Summarize(std::move(itl));
  s.e2e_ms = Summarize(std::move(e2e));
  return s;
}

// ---------------------------------------------------------------------------------------
// Server-Sent Events

void SseParser::Feed(std::string_view bytes, std::vector<SseEvent>& out) {
  for (char c : bytes) {
    if (skip_lf_) {
      skip_lf_ = false;
      if (c == '\n') continue;  // the LF of a CRLF already ended the line
    }
    if (c == '\r' || c == '\n') {
      skip_lf_ = c == '\r';
      ProcessLine(line_, out);
      line_.clear();
    } else {
      line_.push_back(c);
    }
  }
}

void SseParser::ProcessLine(std::string_view line, std::vector<SseEvent>& out) {
  if (line.empty()) {  // dispatch
    if (has_data_) out.push_back(SseEvent{event_, data_});
    has_data_ = false;
    data_.clear();
    event_.clear();
    return;
  }
  if (line.front() == ':') return;  // comment, e.g. a keep-alive ping
  size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
  } else if (field == "event") {
    event_ = std::string(value);
  }
}

// ---------------------------------------------------------------------------------------
// Requests

std::vector<PlannedRequest> PlanRequests(const LoadOptions& o, const std::vector<DatasetEntry>& texts, int count,
                                         uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> input_len(o.input_len_min, o.input_len_max);
  std::uniform_int_distribution<int> output_len(o.output_len_min, o.output_len_max);
  std::uniform_int_distribution<int> token_id(o.token_id_min, o.token_id_max);
  std::uniform_int_distribution<size_t> word(0, kWords.size() - 1);
  std::vector<PlannedRequest> plan(static_cast<size_t>(std::max(count, 0)));
  for (size_t i = 0; i < plan.size(); ++i) {
    PlannedRequest& p = plan[i];
    int len = input_len(rng);
    p.max_tokens = output_len(rng);
    p.seed = seed + i;
    if (!texts.empty()) {
      p.prompt_text = texts[i % texts.size()].text;
      p.input = texts[i % texts.size()].input;
    } else if (o.endpoint == LoadEndpoint::kCompletions) {
      p.prompt_ids.resize(static_cast<size_t>(len));
      for (int& id : p.prompt_ids) id = token_id(rng);
      p.prompt_tokens = len;
    } else {
      for (int w = 0; w < len; ++w) {
        if (w > 0) p.prompt_text.push_back(' ');
        p.prompt_text.append(kWords[word(rng)]);
      }
    }
  }
  return plan;
}

std::string RequestBody(const PlannedRequest& p, const LoadOptions& o) {
  nlohmann::json body;
  body["model"] = o.model;
  switch (o.endpoint) {
    case LoadEndpoint::kCompletions:
      if (p.prompt_ids.empty()) {
        body["prompt"] = p.prompt_text;
      } else {
        body["prompt"] = p.prompt_ids;
      }
      body["max_tokens"] = p.max_tokens;
      body["temperature"] = o.temperature;
      body["stream"] = o.stream;
      if (o.stream) body["stream_options"] = {{"include_usage", true}};
      if (o.ignore_eos) body["ignore_eos"] = true;
      body["seed"] = p.seed;
      break;
    case LoadEndpoint::kEmbeddings:
      body["input"] = p.input.is_null() ? nlohmann::json(p.prompt_text) : p.input;
      break;
    case LoadEndpoint::kClassify:
      body["input"] = p.input.is_null() ? nlohmann::json::array({p.prompt_text}) : p.input;
      break;
  }
  for (const auto& [key, value] : o.extra_body.items()) body[key] = value;
  return body.dump();
}

Result<std::vector<DatasetEntry>> LoadDataset(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open dataset '" + path + "'");
  std::vector<DatasetEntry> entries;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("text") && j["text"].is_string()) {
      entries.push_back({j["text"].get<std::string>(), nullptr});
    } else if (j.is_object() && j.contains("input") && !j["input"].is_null()) {
      entries.push_back({std::string(), j["input"]});
    } else {
      return InvalidArgument(
          fmt::format("{}:{}: expected a JSON object with a \"text\" string or an \"input\"", path, line_no));
    }
  }
  if (entries.empty()) return InvalidArgument("dataset '" + path + "' has no lines");
  return entries;
}

Result<std::vector<std::string>> LoadDatasetTexts(const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(std::vector<DatasetEntry> entries, LoadDataset(path));
  std::vector<std::string> texts;
  for (DatasetEntry& e : entries) {
    if (!e.input.is_null()) return InvalidArgument("dataset '" + path + "' has \"input\" lines; expected texts");
    texts.push_back(std::move(e.text));
  }
  return texts;
}


}  // namespace ferry::tools
