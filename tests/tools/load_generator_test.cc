#include "tools/load_generator.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "io/temp_dir.h"

namespace ferry::tools {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// ---------------------------------------------------------------------------------------
// Arrival schedule

struct GapStats {
  double mean = 0;
  double cv = 0;
};

GapStats Gaps(const std::vector<double>& offsets) {
  std::vector<double> gaps;
  for (size_t i = 1; i < offsets.size(); ++i) gaps.push_back(offsets[i] - offsets[i - 1]);
  GapStats s;
  s.mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / static_cast<double>(gaps.size());
  double ss = 0;
  for (double g : gaps) ss += (g - s.mean) * (g - s.mean);
  s.cv = std::sqrt(ss / static_cast<double>(gaps.size())) / s.mean;
  return s;
}

TEST(LoadGenArrivalTest, GammaGapsHaveTheRequestedMeanAndVariation) {
  constexpr double kRate = 8.0;
  for (double burstiness : {1.0, 0.5, 4.0}) {
    SCOPED_TRACE(burstiness);
    std::vector<double> offsets = ArrivalOffsets(20001, kRate, burstiness, /*seed=*/42);
    ASSERT_EQ(offsets.size(), 20001u);
    EXPECT_EQ(offsets[0], 0.0);
    EXPECT_TRUE(std::is_sorted(offsets.begin(), offsets.end()));
    GapStats s = Gaps(offsets);
    EXPECT_NEAR(s.mean, 1.0 / kRate, 0.03 / kRate);
    double want_cv = 1.0 / std::sqrt(burstiness);
    EXPECT_NEAR(s.cv, want_cv, 0.05 * want_cv);
  }
}

TEST(LoadGenArrivalTest, ReproducibleForOneSeed) {
  EXPECT_EQ(ArrivalOffsets(100, 5.0, 1.0, 7), ArrivalOffsets(100, 5.0, 1.0, 7));
  EXPECT_NE(ArrivalOffsets(100, 5.0, 1.0, 7), ArrivalOffsets(100, 5.0, 1.0, 8));
}

TEST(LoadGenArrivalTest, InfiniteOrZeroRateSendsEverythingAtOnce) {
  for (double rate : {std::numeric_limits<double>::infinity(), 0.0}) {
    std::vector<double> offsets = ArrivalOffsets(50, rate, 1.0, 1);
    ASSERT_EQ(offsets.size(), 50u);
    for (double o : offsets) EXPECT_EQ(o, 0.0);
  }
  EXPECT_TRUE(ArrivalOffsets(0, 1.0, 1.0, 1).empty());
}

// ---------------------------------------------------------------------------------------
// Statistics

TEST(LoadGenStatsTest, PercentileInterpolatesBetweenRanks) {
  std::vector<double> v(100);
  std::iota(v.begin(), v.end(), 1.0);  // 1..100
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 50.5);
  EXPECT_DOUBLE_EQ(Percentile(v, 90), 90.1);
  EXPECT_DOUBLE_EQ(Percentile(v, 99), 99.01);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 100.0);
  std::vector<double> one = {7.0};
  EXPECT_DOUBLE_EQ(Percentile(one, 99), 7.0);
  EXPECT_DOUBLE_EQ(Percentile(std::vector<double>{}, 50), 0.0);
  std::vector<double> two = {10.0, 20.0};
  EXPECT_DOUBLE_EQ(Percentile(two, 25), 12.5);
}

TEST(LoadGenStatsTest, SummarizeSortsAndUsesPopulationStd) {
  Distribution d = Summarize({4.0, 1.0, 3.0, 2.0});
  EXPECT_EQ(d.count, 4u);
  EXPECT_DOUBLE_EQ(d.mean, 2.5);
  EXPECT_DOUBLE_EQ(d.std, std::sqrt(1.25));
  EXPECT_DOUBLE_EQ(d.p50, 2.5);
  EXPECT_DOUBLE_EQ(d.max, 4.0);
  EXPECT_EQ(Summarize({}).count, 0u);
}

RequestRecord Completed(double ttft_ms, std::optional<double> tpot_ms, double e2e_ms, int64_t out_tokens = 10) {
  RequestRecord r;
  r.success = true;
  r.http_status = 200;
  r.streamed = true;
  r.ttft_ms = ttft_ms;
  r.tpot_ms = tpot_ms;
  r.e2e_ms = e2e_ms;
  r.prompt_tokens = 100;
  r.output_tokens = out_tokens;
  return r;
}

TEST(LoadGenStatsTest, GoodputCountsCompletedRequestsMeetingEveryTarget) {
  std::vector<RequestRecord> records = {
      Completed(50, 10, 200),              // meets all
      Completed(150, 10, 300),             // TTFT too slow
      Completed(50, 30, 400),              // TPOT too slow
      Completed(50, std::nullopt, 60, 1),  // one token: no TPOT, meets
      Completed(90, 19, 1200),             // E2E too slow
  };
  RequestRecord failed;
  failed.success = false;
  failed.http_status = 429;
  failed.error_class = "http_429";
  failed.e2e_ms = 1;
  records.push_back(failed);  // fast, but failed

  SloTargets slo;
  slo.ttft_ms = 100;
  slo.tpot_ms = 20;
  slo.e2e_ms = 1000;
  BenchmarkSummary s = SummarizeRun(records, 2.0, slo);
  EXPECT_EQ(s.completed, 5);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.failures.at("http_429"), 1);
  EXPECT_EQ(s.good_requests, 2);
  ASSERT_TRUE(s.goodput.has_value());
  EXPECT_DOUBLE_EQ(*s.goodput, 1.0);
  EXPECT_DOUBLE_EQ(s.request_throughput, 2.5);
  EXPECT_EQ(s.total_input_tokens, 500);
  EXPECT_EQ(s.total_output_tokens, 41);
  EXPECT_DOUBLE_EQ(s.output_throughput, 20.5);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 270.5);
  EXPECT_EQ(s.tpot_ms.count, 4u);

  SloTargets ttft_only;
  ttft_only.ttft_ms = 100;
  EXPECT_EQ(SummarizeRun(records, 2.0, ttft_only).good_requests, 4);
  EXPECT_FALSE(SummarizeRun(records, 2.0, SloTargets{}).goodput.has_value());
}

// ---------------------------------------------------------------------------------------
// Server-Sent Events

std::vector<SseEvent> FeedSplit(std::string_view stream, const std::vector<size_t>& cuts) {
  SseParser parser;
  std::vector<SseEvent> events;
  size_t from = 0;
  for (size_t cut : cuts) {
    parser.Feed(stream.substr(from, cut - from), events);
    from = cut;
  }
  parser.Feed(stream.substr(from), events);
  return events;
}

void ExpectEvents(const std::vector<SseEvent>& got, const std::vector<SseEvent>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].event, want[i].event) << i;
    EXPECT_EQ(got[i].data, want[i].data) << i;
  }
}

constexpr std::string_view kStream =
    ": keep-alive\r\n"
    "data: {\"a\":1}\r\n\r\n"
    "data: line one\n"
    "data:line two\n"
    "id: 7\n"
    "\n"
    "\n"  // a blank line with no data dispatches nothing
    "event: usage\r"
    "data: x\r"
    "\r"
    "data\n\n"  // a field name alone: empty data, still an event
    "data: [DONE]\r\n\r\n"
    "data: unfinished";  // no blank line yet: not dispatched

const std::vector<SseEvent> kWant = {
    {"", "{\"a\":1}"}, {"", "line one\nline two"}, {"usage", "x"}, {"", ""}, {"", "[DONE]"}};

TEST(LoadGenSseTest, WholeStream) { ExpectEvents(FeedSplit(kStream, {}), kWant); }

TEST(LoadGenSseTest, ByteByByte) {
  std::vector<size_t> cuts(kStream.size());
  std::iota(cuts.begin(), cuts.end(), size_t{0});
  ExpectEvents(FeedSplit(kStream, cuts), kWant);
}

TEST(LoadGenSseTest, EverySplitIntoThreePieces) {
  for (size_t i = 0; i <= kStream.size(); ++i) {
    for (size_t j = i; j <= kStream.size(); ++j) {
      SCOPED_TRACE(::testing::Message() << "cuts " << i << ", " << j);
      ExpectEvents(FeedSplit(kStream, {i, j}), kWant);
      if (HasFailure()) return;
    }
  }
}

TEST(LoadGenSseTest, CrAtTheEndOfOneReadAndLfAtTheStartOfTheNext) {
  SseParser parser;
  std::vector<SseEvent> events;
  parser.Feed("data: a\r", events);
  parser.Feed("\n\r", events);  // the LF completes the CRLF; the CR is the blank line
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "a");
  parser.Feed("\ndata: b\n\n", events);  // that LF belongs to the CR before it
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].data, "b");
}

// ---------------------------------------------------------------------------------------
// Options and requests

TEST(LoadGenOptionsTest, ParsesUrls) {
  Result<HttpUrl> u = ParseHttpUrl("http://127.0.0.1:8000");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, "8000");
  EXPECT_EQ(u->path_prefix, "");
  u = ParseHttpUrl("http://example.com/proxy/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "example.com");
  EXPECT_EQ(u->port, "80");
  EXPECT_EQ(u->path_prefix, "/proxy");
  u = ParseHttpUrl("http://[::1]:9000");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, "9000");
  EXPECT_FALSE(ParseHttpUrl("https://example.com").ok());
  EXPECT_FALSE(ParseHttpUrl("example.com:80").ok());
  EXPECT_FALSE(ParseHttpUrl("http://host:0").ok());
  EXPECT_FALSE(ParseHttpUrl("http://host:x1").ok());
  EXPECT_FALSE(ParseHttpUrl("http://:80").ok());
}

TEST(LoadGenOptionsTest, ParsesRequestRates) {
  EXPECT_TRUE(std::isinf(*ParseRequestRate("inf")));
  EXPECT_TRUE(std::isinf(*ParseRequestRate("Infinity")));
  EXPECT_TRUE(std::isinf(*ParseRequestRate("0")));
  EXPECT_DOUBLE_EQ(*ParseRequestRate("2.5"), 2.5);
  EXPECT_FALSE(ParseRequestRate("-1").ok());
  EXPECT_FALSE(ParseRequestRate("fast").ok());
  EXPECT_FALSE(ParseRequestRate("3x").ok());
}

TEST(LoadGenOptionsTest, ValidatesRanges) {
  LoadOptions o;
  o.model = "m";
  EXPECT_TRUE(ValidateLoadOptions(o).ok());
  LoadOptions bad = o;
  bad.model.clear();
  EXPECT_FALSE(ValidateLoadOptions(bad).ok());
  bad = o;
  bad.burstiness = 0;
  EXPECT_FALSE(ValidateLoadOptions(bad).ok());
  bad = o;
  bad.input_len_min = 10;
  bad.input_len_max = 5;
  EXPECT_FALSE(ValidateLoadOptions(bad).ok());
  bad = o;
  bad.slo.ttft_ms = -1;
  EXPECT_FALSE(ValidateLoadOptions(bad).ok());
}

TEST(LoadGenRequestTest, RandomPromptsHaveTheRequestedLengthsAndIds) {
  LoadOptions o;
  o.model = "m";
  o.input_len_min = 5;
  o.input_len_max = 9;
  o.output_len_min = 3;
  o.output_len_max = 4;
  o.token_id_min = 10;
  o.token_id_max = 20;
  std::vector<PlannedRequest> plan = PlanRequests(o, {}, 200, 3);
  ASSERT_EQ(plan.size(), 200u);
  std::vector<int> seen_lengths(10, 0);
  for (const PlannedRequest& p : plan) {
    ASSERT_GE(p.prompt_ids.size(), 5u);
    ASSERT_LE(p.prompt_ids.size(), 9u);
    EXPECT_EQ(p.prompt_tokens, static_cast<int>(p.prompt_ids.size()));
    ++seen_lengths[p.prompt_ids.size()];
    for (int id : p.prompt_ids) {
      EXPECT_GE(id, 10);
      EXPECT_LE(id, 20);
    }
    EXPECT_GE(p.max_tokens, 3);
    EXPECT_LE(p.max_tokens, 4);
  }
  for (int len = 5; len <= 9; ++len) EXPECT_GT(seen_lengths[len], 0) << len;
  EXPECT_EQ(PlanRequests(o, {}, 200, 3)[17].prompt_ids, plan[17].prompt_ids);

  nlohmann::json body = nlohmann::json::parse(RequestBody(plan[0], o));
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["prompt"].size(), plan[0].prompt_ids.size());
  EXPECT_EQ(body["max_tokens"], plan[0].max_tokens);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["temperature"], 0.0);
}

TEST(LoadGenRequestTest, DatasetTextsAndEncoderBodies) {
  ferry::testing::TempDir dir;
  std::string path = dir.Write("d.jsonl", "{\"text\": \"first\"}\n\n{\"text\": \"second\", \"label\": 1}\n");
  Result<std::vector<std::string>> texts = LoadDatasetTexts(path);
  ASSERT_TRUE(texts.ok()) << texts.status().ToString();
  ASSERT_EQ(texts->size(), 2u);
  EXPECT_FALSE(LoadDatasetTexts(dir.Write("bad.jsonl", "{\"txt\": 1}\n")).ok());
  EXPECT_FALSE(LoadDatasetTexts(dir.File("missing.jsonl")).ok());

  LoadOptions o;
  o.model = "enc";
  o.endpoint = LoadEndpoint::kClassify;
  std::vector<PlannedRequest> plan = PlanRequests(o, LoadDataset(path).value(), 3, 0);
  EXPECT_EQ(plan[2].prompt_text, "first");
  nlohmann::json body = nlohmann::json::parse(RequestBody(plan[1], o));
  EXPECT_EQ(body["input"], nlohmann::json::array({"second"}));

  o.endpoint = LoadEndpoint::kEmbeddings;
  o.input_len_min = o.input_len_max = 6;
  plan = PlanRequests(o, {}, 1, 0);
  body = nlohmann::json::parse(RequestBody(plan[0], o));
  ASSERT_TRUE(body["input"].is_string());
  std::string text = body["input"];
  EXPECT_EQ(std::count(text.begin(), text.end(), ' '), 5);

  // Lines with an "input" are sent as they are (e.g. a batch of token-id arrays).
  auto inputs = LoadDataset(dir.Write("inputs.jsonl", "{\"input\": [[101, 7, 102], [101, 8, 102]]}\n{\"text\": \"x\"}\n"));
  ASSERT_TRUE(inputs.ok()) << inputs.status().ToString();
  o.endpoint = LoadEndpoint::kClassify;
  plan = PlanRequests(o, *inputs, 2, 0);
  EXPECT_EQ(nlohmann::json::parse(RequestBody(plan[0], o))["input"], nlohmann::json::parse("[[101, 7, 102], [101, 8, 102]]"));
  EXPECT_EQ(nlohmann::json::parse(RequestBody(plan[1], o))["input"], nlohmann::json::array({"x"}));
  EXPECT_FALSE(LoadDatasetTexts(dir.File("inputs.jsonl")).ok());
  o.endpoint = LoadEndpoint::kEmbeddings;
  plan = PlanRequests(o, {}, 1, 0);

  // --extra-body: long-input settings on every request.
  o.extra_body = {{"truncation", "chunk"}, {"chunk_tokens", 512}};
  body = nlohmann::json::parse(RequestBody(plan[0], o));
  EXPECT_EQ(body["truncation"], "chunk");
  EXPECT_EQ(body["chunk_tokens"], 512);
  EXPECT_EQ(body["model"], "enc");
}

// ---------------------------------------------------------------------------------------
// End to end against a small in-process server

constexpr int kChunks = 5;
constexpr int kChunkGapMs = 20;
constexpr int kPromptTokensInUsage = 33;

// A small HTTP/1.1 server: accepts on one thread and serves each connection on its own
// thread with blocking Beast calls. /v1/completions answers a request whose "seed" is
// 3 mod 4 with 429, a seed 9 mod 10 by stalling for a second, an unknown model with
// 404, and anything else with five text chunks kChunkGapMs apart (streamed) or one JSON
// body. The destructor shuts every socket down, so every thread ends promptly.
class FakeServer {
 public:
  FakeServer() : acceptor_(ioc_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    acceptor_.non_blocking(true);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  ~FakeServer() {
    stop_ = true;
    accept_thread_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& s : sockets_) ::shutdown(s->native_handle(), SHUT_RDWR);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()); }
  int connections() const { return connections_.load(); }
  int max_in_flight() const { return max_in_flight_.load(); }

 private:
  void AcceptLoop() {
    while (!stop_) {
      auto socket = std::make_shared<tcp::socket>(ioc_);
      beast::error_code ec;
      acceptor_.accept(*socket, ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      if (ec) return;
      ++connections_;
      std::lock_guard<std::mutex> lock(mu_);
      sockets_.push_back(socket);
      threads_.emplace_back([this, socket] { Serve(*socket); });
    }
  }

  void Serve(tcp::socket& socket) {
    beast::flat_buffer buffer;
    for (;;) {
      http::request<http::string_body> req;
      beast::error_code ec;
      http::read(socket, buffer, req, ec);
      if (ec) return;
      int now = ++in_flight_;
      int seen = max_in_flight_.load();
      while (now > seen && !max_in_flight_.compare_exchange_weak(seen, now)) {
      }
      bool ok = Respond(socket, req);
      --in_flight_;
      if (!ok || !req.keep_alive()) return;
    }
  }

  static bool WriteAll(tcp::socket& socket, std::string_view bytes) {
    beast::error_code ec;
    asio::write(socket, asio::buffer(bytes.data(), bytes.size()), ec);
    return !ec;
  }

  static bool WriteChunk(tcp::socket& socket, std::string_view payload) {
    char size[32];
    std::snprintf(size, sizeof(size), "%zx\r\n", payload.size());
    return WriteAll(socket, std::string(size) + std::string(payload) + "\r\n");
  }

  static bool Reply(tcp::socket& socket, int status, std::string_view reason, std::string_view extra_headers,
                    const std::string& body) {
    return WriteAll(socket, "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) +
                                "\r\nContent-Type: application/json\r\n" + std::string(extra_headers) +
                                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  }

  bool Respond(tcp::socket& socket, const http::request<http::string_body>& req) {
    nlohmann::json body = nlohmann::json::parse(req.body(), nullptr, false);
    if (!body.is_object()) return Reply(socket, 400, "Bad Request", "", R"({"error":{"message":"bad json"}})");
    if (body.value("model", "") != "m") {
      return Reply(socket, 404, "Not Found", "", R"({"error":{"message":"model not found","type":"not_found"}})");
    }
    int64_t seed = body.value("seed", int64_t{0});
    if (seed % 4 == 3) {
      return Reply(socket, 429, "Too Many Requests", "Retry-After: 1\r\n",
                   R"({"error":{"message":"queue full","type":"rate_limit","param":null,"code":429}})");
    }
    if (seed % 10 == 9) {
      for (int i = 0; i < 100 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return false;
    }
    // Names the key it was called with, as ferry names the variant that served a request.
    std::string key(req[http::field::authorization]);
    if (key.rfind("Bearer ", 0) == 0) key = key.substr(7);
    const std::string variant_header = "X-Ferry-Variant: " + (key.empty() ? std::string("none") : key) + "\r\n";
    const std::string usage = R"({"prompt_tokens":)" + std::to_string(kPromptTokensInUsage) +
                              R"(,"completion_tokens":5,"total_tokens":)" + std::to_string(kPromptTokensInUsage + 5) +
                              "}";
    if (!body.value("stream", false)) {
      return Reply(socket, 200, "OK", variant_header,
                   R"({"id":"c","object":"text_completion",)"
                   R"("choices":[{"index":0,"text":"abcde","finish_reason":"length"}],"usage":)" +
                       usage + "}");
    }
    if (!WriteAll(socket, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + variant_header +
                              "Transfer-Encoding: chunked\r\n\r\n")) {
      return false;
    }
    if (!WriteChunk(socket, ": ping\n\n")) return false;
    for (int k = 0; k < kChunks; ++k) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kChunkGapMs));
      std::string event = "data: {\"choices\":[{\"index\":0,\"text\":\"t" + std::to_string(k) + "\"}]}\r\n\r\n";
      // Split each event over two HTTP chunks written back to back.
      size_t half = event.size() / 2;
      if (!WriteChunk(socket, event.substr(0, half)) || !WriteChunk(socket, event.substr(half))) return false;
    }
    return WriteChunk(socket, "data: {\"choices\":[],\"usage\":" + usage + "}\n\ndata: [DONE]\n\n") &&
           WriteAll(socket, "0\r\n\r\n");
  }

  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<std::shared_ptr<tcp::socket>> sockets_;  // closed only when the server is destroyed
  std::vector<std::thread> threads_;
  std::atomic<int> connections_{0};
  std::atomic<int> in_flight_{0};
  std::atomic<int> max_in_flight_{0};
};

LoadOptions TestOptions(const FakeServer& server) {
  LoadOptions o;
  o.url = server.url();
  o.model = "m";
  o.input_len_min = o.input_len_max = 16;
  o.output_len_min = o.output_len_max = 5;
  o.timeout_s = 10;
  o.progress = false;
  return o;
}

TEST(LoadGenEndToEndTest, MeasuresEveryChunkAndCountsFailuresByStatus) {
  FakeServer server;
  LoadOptions o = TestOptions(server);
  o.num_prompts = 8;  // seeds 0..7: 3 and 7 get 429
  Result<BenchmarkReport> report = RunLoadBenchmark(o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const BenchmarkSummary& s = report->summary;
  EXPECT_EQ(s.num_requests, 8);
  EXPECT_EQ(s.completed, 6);
  EXPECT_EQ(s.failed, 2);
  EXPECT_EQ(s.failures.at("http_429"), 2);
  EXPECT_EQ(report->peak_in_flight, 8);
  for (const RequestRecord& r : report->records) {
    SCOPED_TRACE(r.index);
    if (r.index % 4 == 3) {
      EXPECT_FALSE(r.success);
      EXPECT_EQ(r.http_status, 429);
      EXPECT_EQ(r.error, "queue full");
      continue;
    }
    ASSERT_TRUE(r.success) << r.error_class << ": " << r.error;
    EXPECT_TRUE(r.streamed);
    EXPECT_EQ(r.content_chunks, kChunks);
    EXPECT_EQ(r.output_tokens, 5);
    EXPECT_EQ(r.prompt_tokens, kPromptTokensInUsage);
    ASSERT_TRUE(r.ttft_ms.has_value());
    // Each chunk is timed when it arrives: the first after one gap, then one gap apart.
    // A chunk handled late (the client thread descheduled on a busy machine) shortens one
    // gap and lengthens the one before, so single gaps get slack and their sum none.
    EXPECT_GE(*r.ttft_ms, kChunkGapMs * 0.9);
    ASSERT_EQ(r.itl_ms.size(), static_cast<size_t>(kChunks - 1));
    for (double itl : r.itl_ms) {
      EXPECT_GE(itl, kChunkGapMs * 0.5);
      EXPECT_LT(itl, 1000);
    }
    EXPECT_GE(std::accumulate(r.itl_ms.begin(), r.itl_ms.end(), 0.0), (kChunks - 1) * kChunkGapMs * 0.95);
    EXPECT_GE(r.e2e_ms, kChunks * kChunkGapMs * 0.9);
    ASSERT_TRUE(r.tpot_ms.has_value());
    EXPECT_NEAR(*r.tpot_ms, (r.e2e_ms - *r.ttft_ms) / 4, 1e-9);
  }
  EXPECT_EQ(s.itl_ms.count, 6u * (kChunks - 1));
  EXPECT_GE(s.itl_ms.mean, kChunkGapMs * 0.95);
  EXPECT_EQ(s.total_output_tokens, 30);
  EXPECT_EQ(s.total_input_tokens, 6 * kPromptTokensInUsage);
  EXPECT_GT(s.duration_s, 0.0);

  nlohmann::json j = ReportToJson(*report, /*include_requests=*/true);
  EXPECT_EQ(j["failures"]["http_429"], 2);
  EXPECT_EQ(j["requests"].size(), 8u);
  EXPECT_NE(FormatReport(*report).find("http_429"), std::string::npos);
}

TEST(LoadGenEndToEndTest, ConcurrencyCapIsAClosedLoopOnKeptAliveConnections) {
  FakeServer server;
  LoadOptions o = TestOptions(server);
  o.num_prompts = 6;
  o.seed = 100;  // seeds 100..105: 103 gets 429
  o.max_concurrency = 2;
  Result<BenchmarkReport> report = RunLoadBenchmark(o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->summary.completed, 5);
  EXPECT_EQ(report->peak_in_flight, 2);
  EXPECT_LE(server.max_in_flight(), 2);
  // The pre-flight connection and one more, each reused: not one connection per request.
  EXPECT_LE(server.connections(), 3);
}

// A closed loop wider than the open-file limit would count its own failed connects as the
// server's failures: refused before any request.
TEST(LoadGenEndToEndTest, AConcurrencyPastTheOpenFileLimitIsRefused) {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_max == RLIM_INFINITY || limit.rlim_max > 1'000'000) GTEST_SKIP() << "no open-file limit to exceed";
  FakeServer server;
  LoadOptions o = TestOptions(server);
  o.num_prompts = 2;
  o.max_concurrency = static_cast<int>(limit.rlim_max) + 1;
  Result<BenchmarkReport> report = RunLoadBenchmark(o);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(report.status().message().find("ulimit -n"), std::string::npos) << report.status().ToString();
  EXPECT_EQ(server.connections(), 0);
}

TEST(LoadGenEndToEndTest, RequestsLeaveOnTheirSchedule) {
  FakeServer server;
  LoadOptions o = TestOptions(server);
  o.num_prompts = 6;
  o.seed = 20;  // seeds 20..25: 23 gets 429
  o.request_rate = 40;
  o.stream = false;
  Result<BenchmarkReport> report = RunLoadBenchmark(o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  std::vector<double> offsets = ArrivalOffsets(6, 40, 1.0, 20);
  for (const RequestRecord& r : report->records) {
    EXPECT_DOUBLE_EQ(r.scheduled_s, offsets[static_cast<size_t>(r.index)]);
    EXPECT_GE(r.start_s, r.scheduled_s - 1e-6);
    EXPECT_LT(r.start_s, r.scheduled_s + 0.5);
    if (r.index == 3) continue;
    ASSERT_TRUE(r.success) << r.error_class << ": " << r.error;
    EXPECT_FALSE(r.streamed);
    EXPECT_EQ(r.output_tokens, 5);
    EXPECT_EQ(r.ttft_ms, r.e2e_ms);
    EXPECT_FALSE(r.tpot_ms.has_value());
    EXPECT_TRUE(r.itl_ms.empty());
  }
  EXPECT_GE(report->summary.duration_s, offsets.back());
  EXPECT_EQ(report->summary.completed, 5);
}

TEST(LoadGenEndToEndTest, RateScheduleAndTiersAreReportedPerTierPhaseAndVariant) {
  FakeServer server;
  LoadOptions o = TestOptions(server);
  o.seed = 4;
  o.timeout_s = 2;  // seeds 9 mod 10 stall
  o.rate_schedule = {{0.5, 40}, {0.25, 0}, {0.5, 120}};  // about 20, 0 and 60 requests
  o.tiers = {{"gold", 0.25, "key-gold", {}}, {"silver", 0.75, "key-silver", {}}};
  o.tiers[0].slo.ttft_ms = 10000;
  o.slo.ttft_ms = 1;  // silver falls back to the run's target, which nothing meets
  Result<BenchmarkReport> report = RunLoadBenchmark(o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  std::vector<int> phases;
  const std::vector<double> offsets = ScheduleOffsets(o.rate_schedule, 1.0, 4, &phases);
  const std::vector<int> tiers = AssignTiers(static_cast<int>(offsets.size()), o.tiers, 4);
  ASSERT_EQ(report->records.size(), offsets.size());
  for (const RequestRecord& r : report->records) {
    const size_t i = static_cast<size_t>(r.index);
    EXPECT_DOUBLE_EQ(r.scheduled_s, offsets[i]);
    EXPECT_EQ(r.phase, phases[i]);
    EXPECT_NE(r.phase, 1);  // the silent phase sends nothing
    EXPECT_EQ(r.tier, o.tiers[static_cast<size_t>(tiers[i])].name);
    if (r.success) {
      EXPECT_EQ(r.variant, "key-" + r.tier);  // each tier's own key went out
    }
  }
  ASSERT_EQ(report->tiers.size(), 2u);
  const TierReport& gold = report->tiers[0];
  const TierReport& silver = report->tiers[1];
  EXPECT_EQ(gold.tier, "gold");
  EXPECT_EQ(gold.summary.num_requests + silver.summary.num_requests, static_cast<int>(offsets.size()));
  EXPECT_GT(gold.summary.num_requests, 0);
  EXPECT_GT(silver.summary.num_requests, gold.summary.num_requests);
  // Seeds 3 mod 4 get a 429: those miss their SLO; the rest of gold meets its 10 s target.
  EXPECT_EQ(gold.summary.good_requests, gold.summary.completed);
  EXPECT_NEAR(gold.slo_attainment, static_cast<double>(gold.summary.completed) / gold.summary.num_requests, 1e-12);
  EXPECT_EQ(silver.summary.good_requests, 0);
  EXPECT_EQ(silver.slo_attainment, 0.0);
  ASSERT_EQ(gold.variants.count("key-gold"), 1u);
  EXPECT_DOUBLE_EQ(gold.variants.at("key-gold").token_share, 1.0);
  ASSERT_EQ(gold.phases.size(), 3u);
  EXPECT_EQ(gold.phases[1].requests, 0);
  EXPECT_DOUBLE_EQ(gold.phases[2].start_s, 0.75);
  EXPECT_EQ(gold.phases[0].requests + gold.phases[2].requests, gold.summary.num_requests);
  EXPECT_NEAR(gold.phases[2].goodput, gold.phases[2].good / 0.5, 1e-12);
  EXPECT_GT(report->started_unix_s, 1.6e9);
  const nlohmann::json j = ReportToJson(*report, /*include_requests=*/true);
  EXPECT_EQ(j["tiers"][0]["tier"], "gold");
  EXPECT_EQ(j["tiers"][0]["phases"].size(), 3u);
  EXPECT_EQ(j["config"]["rate_schedule"][2]["rate"], 120);
  EXPECT_EQ(j["requests"][0]["tier"], report->records[0].tier);
  const std::string table = FormatReport(*report);
  EXPECT_NE(table.find("tier gold"), std::string::npos);
  EXPECT_NE(table.find("served by key-silver"), std::string::npos);
}

TEST(LoadGenEndToEndTest, TimedOutRequestsAreCountedNotFatal) {
  FakeServer server;
  LoadOptions o = TestOptions(server);
  o.num_prompts = 3;
  o.seed = 8;  // seeds 8, 9, 10: 9 stalls
  o.timeout_s = 0.3;
  Result<BenchmarkReport> report = RunLoadBenchmark(o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->summary.completed, 2);
  EXPECT_EQ(report->summary.failures.at("timeout"), 1);
  EXPECT_FALSE(report->records[1].success);
  EXPECT_LT(report->records[1].e2e_ms, 900);
}

TEST(LoadGenEndToEndTest, WarmUpFailingEntirelyIsAnError) {
  FakeServer server;
  LoadOptions o = TestOptions(server);
  o.model = "missing";
  o.warmup_requests = 2;
  Result<BenchmarkReport> report = RunLoadBenchmark(o);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(report.status().message().find("model not found"), std::string::npos) << report.status().ToString();
}

TEST(LoadGenEndToEndTest, ConnectionRefusedIsAClearError) {
  unsigned short port = 0;
  {
    asio::io_context ioc;
    tcp::acceptor probe(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    port = probe.local_endpoint().port();
  }  // closed: nothing listens there now
  LoadOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(port);
  o.model = "m";
  o.progress = false;
  o.timeout_s = 5;
  Result<BenchmarkReport> report = RunLoadBenchmark(o);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(report.status().message().find("cannot connect"), std::string::npos) << report.status().ToString();
}

}  // namespace
}  // namespace ferry::tools
