// Every route's request validation, in process, without sockets: the first byte picks the
// route, the second the method and the credentials, the rest is the body. Each request must
// get exactly one complete answer (a 4xx with an OpenAI error object for bad input, never a
// 5xx "internal error"). Requests still running after a moment are cancelled the way a
// disconnecting client cancels them, and must then finish too.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>

#include "fuzz_server.h"

namespace {

using namespace std::chrono_literals;

class CaptureWriter : public ferry::serve::ResponseWriter {
 public:
  void Send(int status, std::string content_type, std::string body, Headers) override {
    std::lock_guard<std::mutex> lock(mu_);
    FUZZ_CHECK(!started_);
    started_ = true;
    status_ = status;
    body_ = std::move(body);
    json_ = content_type == "application/json";
    done_ = true;
    on_disconnect_ = nullptr;  // as the listener does once a response is complete
    cv_.notify_all();
  }
  void StartStream(int status, std::string, Headers) override {
    std::lock_guard<std::mutex> lock(mu_);
    FUZZ_CHECK(!started_);
    started_ = true;
    status_ = status;
  }
  void Write(std::string data) override {
    std::lock_guard<std::mutex> lock(mu_);
    FUZZ_CHECK(started_ && !done_);
  }
  void End() override {
    std::lock_guard<std::mutex> lock(mu_);
    FUZZ_CHECK(started_ && !done_);
    done_ = true;
    on_disconnect_ = nullptr;
    cv_.notify_all();
  }
  void OnDisconnect(std::function<void()> callback) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (done_) return;
    if (disconnected_) {
      lock.unlock();
      callback();
      return;
    }
    on_disconnect_ = std::move(callback);
  }
  bool disconnected() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return disconnected_;
  }

  bool WaitDone(std::chrono::milliseconds within) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, within, [&] { return done_; });
  }
  void Disconnect() {
    std::function<void()> cb;
    {
      std::lock_guard<std::mutex> lock(mu_);
      disconnected_ = true;
      cb = std::move(on_disconnect_);
    }
    if (cb) cb();
  }
  // Checked once the answer is complete.
  void CheckAnswer() {
    std::lock_guard<std::mutex> lock(mu_);
    FUZZ_CHECK(status_ >= 200 && status_ < 600);
    if (status_ >= 400 && json_) {
      const auto j = nlohmann::json::parse(body_, nullptr, /*allow_exceptions=*/false);
      FUZZ_CHECK(j.is_object() && j.contains("error") && j["error"].contains("message") &&
                 j["error"].contains("type"));
      // Bad input is a 4xx; a 500 is a bug. 503 (overload, shutting down) and 429 are fine.
      FUZZ_CHECK(status_ != 500);
    }
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false, done_ = false, disconnected_ = false, json_ = false;
  int status_ = 0;
  std::string body_;
  std::function<void()> on_disconnect_;
};

// New routes go at the end, so that the seeds' first bytes keep their routes.
const char* const kRoutes[] = {"/v1/completions",      "/v1/embeddings",         "/v1/classify",  "/v1/models",
                               "/v1/models/kjv-decoder", "/admin/status",        "/health/ready", "/metrics",
                               "/v1/token-classify",   "/v1/score",              "/v1/chat/completions",
                               "/tokenize",            "/detokenize"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  ferry::serve::Server& server = ferry::fuzz::FuzzServer();
  ferry::serve::HttpRequest req;
  req.path = kRoutes[data[0] % (sizeof(kRoutes) / sizeof(kRoutes[0]))];
  req.target = req.path;
  req.method = (data[1] & 3) == 3 ? "GET" : "POST";
  switch ((data[1] >> 2) & 3) {
    case 0: req.headers["authorization"] = std::string("Bearer ") + ferry::fuzz::kTenantKey; break;
    case 1: req.headers["authorization"] = std::string("Bearer ") + ferry::fuzz::kAdminKey; break;
    case 2: req.headers["authorization"] = "Bearer sk-wrong"; break;
    default: break;
  }
  req.headers["host"] = "127.0.0.1";
  req.body.assign(reinterpret_cast<const char*>(data) + 2, size - 2);
  req.remote = "127.0.0.1:1";
  auto writer = std::make_shared<CaptureWriter>();
  server.Handle(std::move(req), writer);
  if (!writer->WaitDone(200ms)) {
    writer->Disconnect();
    FUZZ_CHECK(writer->WaitDone(30s));  // a cancelled request ends, always
  }
  writer->CheckAnswer();
  return 0;
}
