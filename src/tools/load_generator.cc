#include "tools/load_generator.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
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

#include "core/file_limit.h"

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

// Integral JSON field of an object, or nullopt.
std::optional<int64_t> IntField(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<int64_t>();
}

}  // namespace

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

  // `api_key` overrides the run's key (a tier's own); empty: the run's.
  http::request<http::string_body> MakeRequest(std::string body, const std::string& api_key = {}) const {
    http::request<http::string_body> req{http::verb::post, target_, 11};
    req.set(http::field::host, host_header_);
    req.set(http::field::user_agent, "ferry-bench-serve");
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, options_.stream ? "text/event-stream" : "application/json");
    const std::string& key = api_key.empty() ? options_.api_key : api_key;
    if (!key.empty()) req.set(http::field::authorization, "Bearer " + key);
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

  Exchange(HttpClient& client, RequestRecord record, std::string body, const std::string& api_key, Done done)
      : client_(client),
        record_(std::move(record)),
        request_(client.MakeRequest(std::move(body), api_key)),
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
    if (!client_.options().variant_header.empty()) {
      auto variant = msg.find(client_.options().variant_header);
      if (variant != msg.end()) record_.variant = std::string(variant->value());
    }
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
        ProgressBar* progress, std::vector<int> tiers = {}, std::vector<int> phases = {})
      : client_(client),
        plan_(plan),
        offsets_(std::move(offsets)),
        tiers_(std::move(tiers)),
        phases_(std::move(phases)),
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
    const LoadOptions& o = client_.options();
    std::string api_key;
    if (i < tiers_.size() && !o.tiers.empty()) {
      const LoadTier& tier = o.tiers[static_cast<size_t>(tiers_[i])];
      record.tier = tier.name;
      api_key = tier.api_key;
    }
    if (i < phases_.size()) record.phase = phases_[i];
    auto exchange = std::make_shared<Exchange>(
        client_, std::move(record), RequestBody(plan_[i], o), api_key,
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
  std::vector<int> tiers_;   // per request: index into the options' tiers
  std::vector<int> phases_;  // per request: its rate-schedule phase
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

// Descriptors the client keeps for itself besides its connections.
constexpr int64_t kClientReservedFiles = 32;

}  // namespace

Result<BenchmarkReport> RunLoadBenchmark(const LoadOptions& options) {
  constexpr uint64_t kWarmupSeed = 1'000'003;
  FERRY_RETURN_IF_ERROR(ValidateLoadOptions(options));
  Result<HttpUrl> url = ParseHttpUrl(options.url);
  if (!url.ok()) return url.status();
  std::vector<DatasetEntry> texts;
  if (!options.dataset_path.empty()) {
    FERRY_ASSIGN_OR_RETURN(texts, LoadDataset(options.dataset_path));
    for (const DatasetEntry& e : texts) {
      if (!e.input.is_null() && options.endpoint == LoadEndpoint::kCompletions) {
        return InvalidArgument("dataset '" + options.dataset_path + "': \"input\" lines are for encoder endpoints");
      }
    }
  }
  // A closed loop wider than the descriptors would report its own failed connects as the
  // server's failures.
  const int64_t file_limit = RaiseFileLimit();
  if (file_limit >= 0 && options.max_concurrency > file_limit - kClientReservedFiles) {
    return FailedPrecondition(fmt::format(
        "--max-concurrency {} needs as many connections, but this process may open only {} files; raise the "
        "limit (ulimit -n) or lower the concurrency",
        options.max_concurrency, file_limit));
  }

  HttpClient client(options, *url);
  FERRY_RETURN_IF_ERROR(client.Resolve());
  FERRY_RETURN_IF_ERROR(client.Preflight());

  if (options.warmup_requests > 0) {
    // Different prompts from the timed ones, so no prefix cache is warmed for them.
    std::vector<PlannedRequest> plan =
        PlanRequests(options, texts, options.warmup_requests, options.seed + kWarmupSeed);
    // With tiers, warm-up requests go out with the first tier's key.
    Batch warmup(client, plan, std::vector<double>(plan.size(), 0.0), options.max_concurrency, nullptr,
                 std::vector<int>(plan.size(), 0));
    warmup.Run();
    if (warmup.failed() == static_cast<int>(plan.size())) {
      const RequestRecord& r = warmup.records().front();
      return FailedPrecondition(
          fmt::format("all {} warm-up requests failed; the first with {}: {}", plan.size(), r.error_class, r.error));
    }
  }

  std::vector<int> phases;
  std::vector<double> offsets =
      options.rate_schedule.empty()
          ? ArrivalOffsets(options.num_prompts, options.request_rate, options.burstiness, options.seed)
          : ScheduleOffsets(options.rate_schedule, options.burstiness, options.seed, &phases);
  const int n = static_cast<int>(offsets.size());
  if (n == 0) return InvalidArgument("the rate schedule produced no arrivals");
  std::vector<PlannedRequest> plan = PlanRequests(options, texts, n, options.seed);
  ProgressBar progress(n, options.progress);
  Batch batch(client, plan, std::move(offsets), options.max_concurrency, &progress,
              AssignTiers(n, options.tiers, options.seed), std::move(phases));
  const double started_unix_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  batch.Run();

  BenchmarkReport report;
  report.options = options;
  report.started_unix_s = started_unix_s;
  report.records = std::move(batch.records());
  report.summary = SummarizeRun(report.records, batch.duration_s(), options.slo);
  report.peak_in_flight = batch.peak_in_flight();
  if (!options.tiers.empty() || !options.rate_schedule.empty()) {
    // A scheduled run lasts as long as its schedule, however early its last request ends.
    double scheduled_s = 0;
    for (const RatePhase& p : options.rate_schedule) scheduled_s += p.duration_s;
    report.tiers = SummarizeTiers(options, report.records, std::max(batch.duration_s(), scheduled_s));
  }
  return report;
}


}  // namespace ferry::tools
