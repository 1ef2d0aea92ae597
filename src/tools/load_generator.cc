#include "tools/load_generator.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <random>

namespace ferry::tools {

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

using Clock = std::chrono::steady_clock;

double MsBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

double SecondsBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != std::tolower(static_cast<unsigned char>(prefix[i]))) {
      return false;
    }
  }
  return true;
}

std::string Truncate(std::string_view s, size_t n) {
  if (s.size() <= n) return std::string(s);
  return std::string(s.substr(0, n)) + "...";
}

// The message of an OpenAI error body ({"error": {"message": ...}}), or the start of the
// body when it is something else.
std::string ErrorMessageFromBody(std::string_view body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    auto it = j.find("error");
    if (it != j.end()) {
      if (it->is_string()) return it->get<std::string>();
      if (it->is_object() && it->contains("message") && (*it)["message"].is_string()) {
        return (*it)["message"].get<std::string>();
      }
    }
    if (j.contains("message") && j["message"].is_string()) return j["message"].get<std::string>();
  }
  return Truncate(body, 200);
}

// Words for synthetic encoder inputs: common, short, one token each in most vocabularies.
constexpr std::array<std::string_view, 32> kWords = {
    "the",  "people", "river", "water", "light", "house", "night", "stone", "field", "bread", "city",
    "king", "land",   "voice", "hand",  "day",   "word",  "fire",  "tree",  "road",  "sea",   "hill",
    "gate", "time",   "heart", "eye",   "gold",  "sun",   "wind",  "door",  "song",  "ship"};

// Integral JSON field of an object, or nullopt.
std::optional<int64_t> IntField(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<int64_t>();
}

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

std::vector<PlannedRequest> PlanRequests(const LoadOptions& o, const std::vector<std::string>& texts, int count,
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
      p.prompt_text = texts[i % texts.size()];
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
      body["input"] = p.prompt_text;
      break;
    case LoadEndpoint::kClassify:
      body["input"] = nlohmann::json::array({p.prompt_text});
      break;
  }
  return body.dump();
}

Result<std::vector<std::string>> LoadDatasetTexts(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open dataset '" + path + "'");
  std::vector<std::string> texts;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
      return InvalidArgument(fmt::format("{}:{}: expected a JSON object with a \"text\" string", path, line_no));
    }
    texts.push_back(j["text"].get<std::string>());
  }
  if (texts.empty()) return InvalidArgument("dataset '" + path + "' has no lines");
  return texts;
}

// ---------------------------------------------------------------------------------------
// The HTTP client

namespace {

// One keep-alive connection with its read buffer.
struct Connection {
  explicit Connection(asio::io_context& ioc) : stream(ioc) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
};

// What every request of a run shares: the io_context, the server's address, the request
// headers and the idle keep-alive connections. Owned by the thread that runs the
// io_context; every handler runs on it, so nothing here is locked.
class HttpClient {
 public:
  HttpClient(const LoadOptions& options, HttpUrl url)
      : options_(options),
        url_(std::move(url)),
        target_(url_.path_prefix + std::string(LoadEndpointPath(options.endpoint))) {
    host_header_ = url_.host.find(':') != std::string::npos ? "[" + url_.host + "]" : url_.host;
    if (url_.port != "80") host_header_ += ":" + url_.port;
  }

  const LoadOptions& options() const { return options_; }
  asio::io_context& ioc() { return ioc_; }
  const tcp::resolver::results_type& endpoints() const { return endpoints_; }
  std::string address() const { return host_header_; }

  Status Resolve() {
    tcp::resolver resolver(ioc_);
    beast::error_code ec;
    endpoints_ = resolver.resolve(url_.host, url_.port, ec);
    if (ec) return Unavailable("cannot resolve " + address() + ": " + ec.message());
    return Status::Ok();
  }

  // Connects once, so that a server that is not there is one clear error, not a run of
  // failed requests. The connection becomes the first idle one.
  Status Preflight() {
    auto conn = std::make_unique<Connection>(ioc_);
    beast::error_code result = asio::error::would_block;
    conn->stream.expires_after(
        std::chrono::milliseconds(static_cast<int64_t>(std::min(options_.timeout_s, 10.0) * 1000)));
    conn->stream.async_connect(endpoints_, [&result](beast::error_code ec, const tcp::endpoint&) { result = ec; });
    ioc_.restart();
    ioc_.run();
    if (result) return Unavailable("cannot connect to " + address() + ": " + result.message());
    conn->stream.expires_never();
    ReturnIdle(std::move(conn));
    return Status::Ok();
  }

  std::unique_ptr<Connection> TakeIdle() {
    if (idle_.empty()) return nullptr;
    std::unique_ptr<Connection> c = std::move(idle_.back());
    idle_.pop_back();
    return c;
  }

  void ReturnIdle(std::unique_ptr<Connection> c) {
    if (idle_.size() < kMaxIdle) idle_.push_back(std::move(c));
  }

  http::request<http::string_body> MakeRequest(std::string body) const {
    http::request<http::string_body> req{http::verb::post, target_, 11};
    req.set(http::field::host, host_header_);
    req.set(http::field::user_agent, "ferry-bench-serve");
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, options_.stream ? "text/event-stream" : "application/json");
    if (!options_.api_key.empty()) req.set(http::field::authorization, "Bearer " + options_.api_key);
    req.keep_alive(true);
    req.body() = std::move(body);
    req.prepare_payload();
    return req;
  }

 private:
  static constexpr size_t kMaxIdle = 4096;

  const LoadOptions& options_;
  HttpUrl url_;
  std::string target_;
  std::string host_header_;
  asio::io_context ioc_;  // declared before the connections, so destroyed after them
  tcp::resolver::results_type endpoints_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

// One request from sending to its record. Lives in a shared_ptr held by its pending
// handlers; runs on the client's io_context thread.
class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  // Receives the record and, when it can be reused, the connection.
  using Done = std::function<void(RequestRecord, std::unique_ptr<Connection>)>;

  Exchange(HttpClient& client, RequestRecord record, std::string body, Done done)
      : client_(client),
        record_(std::move(record)),
        request_(client.MakeRequest(std::move(body))),
        done_(std::move(done)) {}

  // Sends on `idle` when given (falling back to a fresh connection once if the server has
  // closed it meanwhile), else on a fresh connection. Timing starts here.
  void Start(std::unique_ptr<Connection> idle) {
    ResetClock();
    if (idle) {
      conn_ = std::move(idle);
      reused_ = true;
      Write();
    } else {
      Connect();
    }
  }

 private:
  static constexpr size_t kMaxBodyBytes = size_t{256} << 20;

  void ResetClock() {
    start_ = Clock::now();
    deadline_ = start_ +
                std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(client_.options().timeout_s));
  }

  void Connect() {
    conn_ = std::make_unique<Connection>(client_.ioc());
    reused_ = false;
    conn_->stream.expires_at(deadline_);
    conn_->stream.async_connect(
        client_.endpoints(),
        [self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) { self->OnConnect(ec); });
  }

  void OnConnect(beast::error_code ec) {
    if (ec) return FailTransport(ec == beast::error::timeout ? "timeout" : "connect", ec);
    beast::error_code ignored;
    conn_->stream.socket().set_option(tcp::no_delay(true), ignored);
    Write();
  }

  void Write() {
    conn_->stream.expires_at(deadline_);
    http::async_write(conn_->stream, request_,
                      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnWrite(ec); });
  }

  void OnWrite(beast::error_code ec) {
    if (ec) {
      if (RetryFresh(ec)) return;
      return FailTransport(ec == beast::error::timeout ? "timeout" : "io", ec);
    }
    parser_.emplace();
    // kMaxBodyBytes bounds what is kept instead. Not boost::none: Boost 1.74 compares a
    // Content-Length against the unset optional and rejects every sized body.
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    conn_->stream.expires_at(deadline_);
    http::async_read_header(conn_->stream, conn_->buffer, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  // An idle keep-alive connection may have been closed by the server since its last use;
  // that shows as a failed write or a reply that never starts. Retry such a request once
  // on a fresh connection, timing it from the retry: the stale socket is a client artifact.
  bool RetryFresh(beast::error_code ec) {
    if (!reused_ || retried_ || ec == beast::error::timeout) return false;
    retried_ = true;
    conn_.reset();
    ResetClock();
    Connect();
    return true;
  }

  void OnHeader(beast::error_code ec) {
    if (ec) {
      if (RetryFresh(ec)) return;
      return FailTransport(ec == beast::error::timeout ? "timeout" : "io", ec);
    }
    const auto& msg = parser_->get();
    record_.http_status = static_cast<int>(msg.result_int());
    beast::string_view content_type = msg[http::field::content_type];
    streaming_ = record_.http_status == 200 &&
                 StartsWithNoCase(std::string_view(content_type.data(), content_type.size()), "text/event-stream");
    record_.streamed = streaming_;
    ReadBody();
  }

  // Reads whatever has arrived (async_read_some), so each chunk is timed when it arrives.
  void ReadBody() {
    if (parser_->is_done()) return Finish(Clock::now());
    auto& body = parser_->get().body();
    body.data = chunk_.data();
    body.size = chunk_.size();
    conn_->stream.expires_at(deadline_);
    http::async_read_some(conn_->stream, conn_->buffer, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); });
  }

  void OnBody(beast::error_code ec) {
    Clock::time_point now = Clock::now();
    if (ec == http::error::need_buffer) ec = {};  // chunk_ is full; not an error
    size_t got = chunk_.size() - parser_->get().body().size;
    if (got > 0) HandleBytes(std::string_view(chunk_.data(), got), now);
    if (ec) return FailTransport(ec == beast::error::timeout ? "timeout" : "io", ec);
    ReadBody();
  }

  void HandleBytes(std::string_view bytes, Clock::time_point now) {
    if (!streaming_) {
      if (body_.size() + bytes.size() > kMaxBodyBytes) {
        body_overflow_ = true;
      } else {
        body_.append(bytes);
      }
      return;
    }
    events_.clear();
    sse_.Feed(bytes, events_);
    for (const SseEvent& ev : events_) HandleEvent(ev, now);
  }

  void HandleEvent(const SseEvent& ev, Clock::time_point now) {
    if (ev.data == "[DONE]") return;
    nlohmann::json j = nlohmann::json::parse(ev.data, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) {
      NoteStreamError("bad_response", "unparsable stream event: " + Truncate(ev.data, 200));
      return;
    }
    if (j.contains("error")) {
      NoteStreamError("stream_error", ErrorMessageFromBody(ev.data));
      return;
    }
    std::string_view text = ChunkText(j);
    if (!text.empty() || HasTokenIds(j)) {
      if (record_.content_chunks == 0) {
        record_.ttft_ms = MsBetween(start_, now);
      } else {
        record_.itl_ms.push_back(MsBetween(last_chunk_, now));
      }
      ++record_.content_chunks;
      last_chunk_ = now;
    }
    ReadUsage(j);
  }

  // ferry's extension for models served without a tokenizer: the chunk's token ids.
  static bool HasTokenIds(const nlohmann::json& j) {
    auto choices = j.find("choices");
    if (choices == j.end() || !choices->is_array() || choices->empty() || !(*choices)[0].is_object()) return false;
    auto ids = (*choices)[0].find("token_ids");
    return ids != (*choices)[0].end() && ids->is_array() && !ids->empty();
  }

  // choices[0].text (completions), or choices[0].delta.content (chat).
  static std::string_view ChunkText(const nlohmann::json& j) {
    auto choices = j.find("choices");
    if (choices == j.end() || !choices->is_array() || choices->empty() || !(*choices)[0].is_object()) return {};
    const nlohmann::json& c = (*choices)[0];
    auto text = c.find("text");
    if (text != c.end() && text->is_string()) return text->get_ref<const std::string&>();
    auto delta = c.find("delta");
    if (delta != c.end() && delta->is_object()) {
      auto content = delta->find("content");
      if (content != delta->end() && content->is_string()) return content->get_ref<const std::string&>();
    }
    return {};
  }

  void ReadUsage(const nlohmann::json& j) {
    auto usage = j.find("usage");
    if (usage == j.end() || !usage->is_object()) return;
    if (auto n = IntField(*usage, "completion_tokens")) usage_output_tokens_ = *n;
    if (auto n = IntField(*usage, "prompt_tokens")) usage_prompt_tokens_ = *n;
  }

  void NoteStreamError(std::string error_class, std::string message) {
    if (!stream_error_class_.empty()) return;
    stream_error_class_ = std::move(error_class);
    stream_error_ = std::move(message);
  }

  void Finish(Clock::time_point now) {
    record_.e2e_ms = MsBetween(start_, now);
    if (record_.http_status != 200) {
      record_.error_class = fmt::format("http_{}", record_.http_status);
      record_.error = ErrorMessageFromBody(body_);
    } else if (streaming_) {
      if (!stream_error_class_.empty()) {
        record_.error_class = stream_error_class_;
        record_.error = stream_error_;
      }
    } else {
      ParseWholeBody();
    }
    record_.success = record_.error_class.empty();
    if (record_.success) {
      if (usage_prompt_tokens_) record_.prompt_tokens = *usage_prompt_tokens_;
      record_.output_tokens = usage_output_tokens_.value_or(record_.content_chunks);
      if (!record_.ttft_ms) record_.ttft_ms = record_.e2e_ms;
      if (streaming_ && record_.content_chunks > 0 && record_.output_tokens > 1) {
        record_.tpot_ms = (record_.e2e_ms - *record_.ttft_ms) / static_cast<double>(record_.output_tokens - 1);
      }
    }
    bool reusable = parser_->is_done() && parser_->get().keep_alive() && conn_->buffer.size() == 0;
    Complete(reusable ? std::move(conn_) : nullptr);
  }

  void ParseWholeBody() {
    if (body_overflow_) {
      record_.error_class = "bad_response";
      record_.error = "response body larger than " + std::to_string(kMaxBodyBytes) + " bytes";
      return;
    }
    nlohmann::json j = nlohmann::json::parse(body_, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() && !j.is_array()) {
      record_.error_class = "bad_response";
      record_.error = "unparsable response: " + Truncate(body_, 200);
      return;
    }
    if (j.is_object() && j.contains("error")) {
      record_.error_class = "bad_response";
      record_.error = ErrorMessageFromBody(body_);
      return;
    }
    if (j.is_object()) {
      if (!ChunkText(j).empty()) record_.content_chunks = 1;
      ReadUsage(j);
    }
  }

  void FailTransport(const char* error_class, beast::error_code ec) {
    record_.e2e_ms = MsBetween(start_, Clock::now());
    record_.error_class = error_class;
    record_.error = ec.message();
    record_.success = false;
    Complete(nullptr);  // the connection is closed with conn_
  }

  void Complete(std::unique_ptr<Connection> reusable) {
    Done done = std::move(done_);
    done(std::move(record_), std::move(reusable));
  }

  HttpClient& client_;
  RequestRecord record_;
  http::request<http::string_body> request_;
  Done done_;
  std::unique_ptr<Connection> conn_;
  bool reused_ = false;
  bool retried_ = false;
  Clock::time_point start_;
  Clock::time_point deadline_;
  Clock::time_point last_chunk_;
  std::optional<http::response_parser<http::buffer_body>> parser_;
  std::array<char, 16384> chunk_;
  bool streaming_ = false;
  SseParser sse_;
  std::vector<SseEvent> events_;
  std::string body_;  // non-streamed replies, error bodies included
  bool body_overflow_ = false;
  std::string stream_error_class_;
  std::string stream_error_;
  std::optional<int64_t> usage_output_tokens_;
  std::optional<int64_t> usage_prompt_tokens_;
};

// A progress bar on stderr, redrawn at most ten times a second; on a non-terminal one line
// per tenth of the run.
class ProgressBar {
 public:
  ProgressBar(int total, bool enabled) : total_(total), enabled_(enabled), tty_(::isatty(STDERR_FILENO) == 1) {}

  void Update(int done, int failed, double elapsed_s) {
    if (!enabled_) return;
    Clock::time_point now = Clock::now();
    bool last = done == total_;
    if (tty_) {
      if (!last && now - last_draw_ < std::chrono::milliseconds(100)) return;
      constexpr int kWidth = 30;
      int filled = total_ > 0 ? done * kWidth / total_ : kWidth;
      std::fprintf(stderr, "\r[%s%s] %d/%d  failed %d  %.1fs%s", std::string(filled, '#').c_str(),
                   std::string(kWidth - filled, '.').c_str(), done, total_, failed, elapsed_s, last ? "\n" : "");
    } else {
      int tenth = total_ > 0 ? done * 10 / total_ : 10;
      if (tenth == last_tenth_ && !last) return;
      last_tenth_ = tenth;
      std::fprintf(stderr, "%d/%d requests done, %d failed, %.1fs\n", done, total_, failed, elapsed_s);
    }
    std::fflush(stderr);
    last_draw_ = now;
  }

 private:
  int total_;
  bool enabled_;
  bool tty_;
  Clock::time_point last_draw_{};
  int last_tenth_ = -1;
};

// Sends planned requests at their offsets, holding arrivals while `max_concurrency`
// requests are in flight, and collects their records. Runs on the client's thread.
class Batch {
 public:
  Batch(HttpClient& client, const std::vector<PlannedRequest>& plan, std::vector<double> offsets, int max_concurrency,
        ProgressBar* progress)
      : client_(client),
        plan_(plan),
        offsets_(std::move(offsets)),
        max_concurrency_(max_concurrency),
        progress_(progress),
        timer_(client.ioc()),
        records_(plan.size()) {}

  // Returns when every request has finished (each is bounded by the request timeout).
  void Run() {
    client_.ioc().restart();
    asio::post(client_.ioc(), [this] {
      start_ = Clock::now();
      end_ = start_;
      Arrive();
    });
    client_.ioc().run();
  }

  std::vector<RequestRecord>& records() { return records_; }
  double duration_s() const { return SecondsBetween(start_, end_); }
  int peak_in_flight() const { return peak_in_flight_; }
  int failed() const { return failed_; }

 private:
  Clock::time_point Due(size_t i) const {
    return start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(offsets_[i]));
  }

  void Arrive() {
    Clock::time_point now = Clock::now();
    while (next_ < plan_.size() && Due(next_) <= now) ready_.push_back(next_++);
    Pump();
    if (next_ < plan_.size()) {
      timer_.expires_at(Due(next_));
      timer_.async_wait([this](beast::error_code ec) {
        if (!ec) Arrive();
      });
    }
  }

  void Pump() {
    while (!ready_.empty() && (max_concurrency_ <= 0 || in_flight_ < max_concurrency_)) {
      size_t i = ready_.front();
      ready_.pop_front();
      Dispatch(i);
    }
  }

  void Dispatch(size_t i) {
    ++in_flight_;
    peak_in_flight_ = std::max(peak_in_flight_, in_flight_);
    RequestRecord record;
    record.index = static_cast<int>(i);
    record.scheduled_s = offsets_[i];
    record.start_s = SecondsBetween(start_, Clock::now());
    record.prompt_tokens = plan_[i].prompt_tokens;
    auto exchange = std::make_shared<Exchange>(
        client_, std::move(record), RequestBody(plan_[i], client_.options()),
        [this](RequestRecord r, std::unique_ptr<Connection> conn) { OnDone(std::move(r), std::move(conn)); });
    exchange->Start(client_.TakeIdle());
  }

  void OnDone(RequestRecord record, std::unique_ptr<Connection> conn) {
    --in_flight_;
    ++finished_;
    if (!record.success) ++failed_;
    if (conn) client_.ReturnIdle(std::move(conn));
    size_t i = static_cast<size_t>(record.index);
    records_[i] = std::move(record);
    end_ = Clock::now();
    if (progress_) progress_->Update(finished_, failed_, SecondsBetween(start_, end_));
    Pump();
  }

  HttpClient& client_;
  const std::vector<PlannedRequest>& plan_;
  std::vector<double> offsets_;
  int max_concurrency_;
  ProgressBar* progress_;
  asio::steady_timer timer_;
  std::vector<RequestRecord> records_;
  Clock::time_point start_;
  Clock::time_point end_;
  size_t next_ = 0;
  std::deque<size_t> ready_;
  int in_flight_ = 0;
  int peak_in_flight_ = 0;
  int finished_ = 0;
  int failed_ = 0;
};

// Each connection is a file descriptor: let a wide run use the hard limit, not the soft one.
void RaiseFileLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

Result<BenchmarkReport> RunLoadBenchmark(const LoadOptions& options) {
  constexpr uint64_t kWarmupSeed = 1'000'003;
  FERRY_RETURN_IF_ERROR(ValidateLoadOptions(options));
  Result<HttpUrl> url = ParseHttpUrl(options.url);
  if (!url.ok()) return url.status();
  std::vector<std::string> texts;
  if (!options.dataset_path.empty()) {
    FERRY_ASSIGN_OR_RETURN(texts, LoadDatasetTexts(options.dataset_path));
  }
  RaiseFileLimit();

  HttpClient client(options, *url);
  FERRY_RETURN_IF_ERROR(client.Resolve());
  FERRY_RETURN_IF_ERROR(client.Preflight());

  if (options.warmup_requests > 0) {
    // Different prompts from the timed ones, so no prefix cache is warmed for them.
    std::vector<PlannedRequest> plan =
        PlanRequests(options, texts, options.warmup_requests, options.seed + kWarmupSeed);
    Batch warmup(client, plan, std::vector<double>(plan.size(), 0.0), options.max_concurrency, nullptr);
    warmup.Run();
    if (warmup.failed() == static_cast<int>(plan.size())) {
      const RequestRecord& r = warmup.records().front();
      return FailedPrecondition(
          fmt::format("all {} warm-up requests failed; the first with {}: {}", plan.size(), r.error_class, r.error));
    }
  }

  std::vector<PlannedRequest> plan = PlanRequests(options, texts, options.num_prompts, options.seed);
  ProgressBar progress(options.num_prompts, options.progress);
  Batch batch(client, plan, ArrivalOffsets(options.num_prompts, options.request_rate, options.burstiness, options.seed),
              options.max_concurrency, &progress);
  batch.Run();

  BenchmarkReport report;
  report.options = options;
  report.records = std::move(batch.records());
  report.summary = SummarizeRun(report.records, batch.duration_s(), options.slo);
  report.peak_in_flight = batch.peak_in_flight();
  return report;
}

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
  row("Request rate (req/s):",
      RateText(o.request_rate) +
          (std::isinf(o.request_rate) || o.request_rate <= 0 ? "" : fmt::format(", burstiness {:g}", o.burstiness)));
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
                          {"content_chunks", r.content_chunks}});
    }
    j["requests"] = std::move(requests);
  }
  return j;
}

}  // namespace ferry::tools
