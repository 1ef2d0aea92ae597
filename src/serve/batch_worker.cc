#include "serve/batch_worker.h"

#include <unistd.h>

#include <chrono>

#include "batch/input_file.h"
#include "core/logging.h"

namespace ferry::serve {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
}

std::string Key(const batch::Entry& e) { return e.batch_id + "/" + std::to_string(e.index); }

std::string DefaultConsumer() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + "-" + std::to_string(getpid()) + "-" + batch::NewId("").substr(0, 8);
}

}  // namespace

BatchWorker::BatchWorker(batch::Store& store, const batch::QueueOptions& options, MetricsRegistry& registry,
                         Dispatch dispatch, std::function<int()> capacity)
    : store_(store),
      options_(options),
      dispatch_(std::move(dispatch)),
      capacity_(std::move(capacity)),
      consumer_(options.consumer.empty() ? DefaultConsumer() : options.consumer),
      requests_gauge_(registry.AddGauge("ferry:batch_requests",
                                        "Batch requests by state: queued, running (on this server), completed, "
                                        "failed, cancelled",
                                        {"state"})),
      jobs_gauge_(registry.AddGauge("ferry:batch_jobs", "Batches by status", {"state"})) {}

BatchWorker::~BatchWorker() { Stop(0); }

void BatchWorker::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void BatchWorker::Wake() {
  std::lock_guard<std::mutex> lock(mu_);
  wake_ = true;
  cv_.notify_all();
}

void BatchWorker::ValidateBatches() {
  Result<std::vector<batch::BatchInfo>> got = store_.LeaseValidation(consumer_, 4);
  if (!got.ok()) {
    FERRY_LOG_WARN("batch worker: batches to validate: {}", got.status().message());
    return;
  }
  for (const batch::BatchInfo& b : *got) {
    json errors = nullptr;
    std::vector<batch::Entry> entries;
    Result<std::string> content = store_.FileContent(b.tenant, b.input_file_id);
    if (!content.ok() && content.status().code() != StatusCode::kNotFound) {
      FERRY_LOG_WARN("batch {}: reading its input file: {}", b.id, content.status().message());
      continue;  // the store is away: validated again later
    }
    if (!content.ok()) {
      errors = {{"object", "list"},
                {"data", json::array({{{"code", "file_not_found"},
                                       {"message", "the input file " + b.input_file_id + " was deleted or expired"},
                                       {"param", "input_file_id"},
                                       {"line", nullptr}}})}};
    } else {
      batch::InputCheck check =
          batch::CheckInputFile(*content, options_.max_requests_per_batch, b.endpoint, 100, model_check_);
      if (check.ok()) {
        entries = std::move(check.entries);
        for (batch::Entry& e : entries) e.batch_id = b.id;
      } else {
        // OpenAI's way: the batch fails with its lines' errors and runs nothing.
        json data = json::array();
        for (const batch::LineError& le : check.errors) data.push_back(le.ToJson());
        errors = {{"object", "list"}, {"data", data}};
      }
    }
    Status st = store_.FinishValidation(b.id, entries, errors);
    if (!st.ok()) {
      FERRY_LOG_WARN("batch {}: recording its validation: {}", b.id, st.message());
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    validated_total_ += 1;
  }
}

void BatchWorker::Stop(int64_t timeout_ms) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
    // Running requests finish within the budget (the batchers drain them too).
    cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [this] { return running_.empty(); });
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  RecordPending();  // what finished while stopping, one last try
}

batch::EntryResult BatchWorker::ToResult(const batch::Entry& entry, const BatchResponse& r) {
  json body = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) body = r.body;
  json line = {{"id", batch::NewId("batch_req_")},
               {"custom_id", entry.custom_id},
               {"response", {{"status_code", r.status}, {"request_id", r.request_id}, {"body", body}}},
               {"error", nullptr}};
  batch::EntryResult out;
  out.outcome = r.status >= 200 && r.status < 300 ? batch::Outcome::kSucceeded : batch::Outcome::kFailed;
  out.line = line.dump(-1, ' ', false, json::error_handler_t::replace);
  return out;
}

json BatchWorker::StatusJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {{"backend", store_.backend()},     {"consumer", consumer_},
          {"running", running_.size()},      {"max_in_flight", options_.max_in_flight},
          {"max_in_flight_under_load", options_.max_in_flight_under_load}, {"width_now", capacity_()},
          {"results_pending", pending_.size()}, {"retrying", retry_.size()},
          {"leased_total", leased_total_},   {"recorded_total", recorded_total_},
          {"validated_total", validated_total_}, {"files_expired_total", files_expired_total_},
          {"duplicates_total", duplicates_total_}, {"last_error", last_error_}};
}

void BatchWorker::RecordPending() {
  for (;;) {
    std::pair<batch::Entry, batch::EntryResult> item;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (pending_.empty()) return;
      item = pending_.front();
    }
    Result<bool> wrote = store_.Complete(item.first, item.second);
    std::lock_guard<std::mutex> lock(mu_);
    if (!wrote.ok()) {
      last_error_ = wrote.status().message();
      return;  // kept; retried on the next turn
    }
    pending_.pop_front();
    (*wrote ? recorded_total_ : duplicates_total_) += 1;
  }
}

void BatchWorker::Refresh() {
  Result<batch::QueueCounts> c = store_.Counts();
  if (!c.ok()) return;
  for (const char* s : batch::kAllStatuses) {
    auto it = c->jobs.find(s);
    jobs_gauge_.WithLabels({s}).Set(static_cast<double>(it == c->jobs.end() ? 0 : it->second));
  }
  int64_t running;
  {
    std::lock_guard<std::mutex> lock(mu_);
    running = static_cast<int64_t>(running_.size());
  }
  const int64_t done = c->completed + c->failed + c->cancelled;
  requests_gauge_.WithLabels({"queued"}).Set(static_cast<double>(std::max<int64_t>(c->requests_total - done - running, 0)));
  requests_gauge_.WithLabels({"running"}).Set(static_cast<double>(running));
  requests_gauge_.WithLabels({"completed"}).Set(static_cast<double>(c->completed));
  requests_gauge_.WithLabels({"failed"}).Set(static_cast<double>(c->failed));
  requests_gauge_.WithLabels({"cancelled"}).Set(static_cast<double>(c->cancelled));
}

void BatchWorker::Loop() {
  int64_t last_renew = NowMs(), last_maintain = 0, last_validate = 0, backoff_ms = 0;
  const int64_t renew_every = std::max<int64_t>(options_.lease_ms / 3, 50);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    RecordPending();
    const int width = capacity_();
    bool woken;
    {
      std::lock_guard<std::mutex> lock(mu_);
      woken = wake_;
      wake_ = false;
    }
    // New batches first (a check is quick next to running their requests), at once when a
    // batch was just created, else every poll_ms; and only once the server serves: whether
    // a model is served is known only then.
    if (width > 0 && (woken || NowMs() - last_validate >= options_.poll_ms)) {
      ValidateBatches();
      last_validate = NowMs();
    }
    const int64_t now = NowMs();
    if (now - last_renew >= renew_every) {
      std::vector<batch::Entry> running;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto& [k, e] : running_) running.push_back(e);
      }
      Status st = store_.Renew(consumer_, running);
      if (!st.ok()) FERRY_LOG_WARN("batch worker: renewing leases: {}", st.message());
      last_renew = now;
    }
    if (now - last_maintain >= 1000) {
      Status st = store_.Maintain();
      if (!st.ok()) FERRY_LOG_WARN("batch worker: {}", st.message());
      Result<int64_t> swept = store_.SweepExpiredFiles(batch::NowUnix());
      if (!swept.ok()) {
        FERRY_LOG_WARN("batch worker: deleting expired files: {}", swept.status().message());
      } else if (*swept > 0) {
        std::lock_guard<std::mutex> lock(mu_);
        files_expired_total_ += *swept;
      }
      Refresh();
      last_maintain = now;
    }
    // Requests refused for load (429/503) go again once due.
    std::vector<batch::Entry> to_run;
    int capacity = 0;
    bool has_pending;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (!retry_.empty() && retry_.front().first <= now) {
        to_run.push_back(retry_.front().second);
        retry_.pop_front();
      }
      capacity = width - static_cast<int>(running_.size()) - static_cast<int>(retry_.size()) -
                 static_cast<int>(to_run.size());
      has_pending = !pending_.empty();
    }
    bool leased_any = false;
    if (capacity > 0 && !has_pending && now >= backoff_ms) {
      Result<std::vector<batch::Entry>> got = store_.Lease(consumer_, capacity);
      if (!got.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        last_error_ = got.status().message();
        backoff_ms = now + options_.poll_ms;  // the store reconnects with its own backoff
      } else {
        leased_any = !got->empty();
        std::lock_guard<std::mutex> lock(mu_);
        leased_total_ += static_cast<int64_t>(got->size());
        for (batch::Entry& e : *got) {
          if (!e.skip.empty()) {
            pending_.push_back({e, batch::EntryResult{batch::Outcome::kCancelled, batch::SkippedLine(e, e.skip)}});
          } else if (e.attempts > options_.max_attempts) {
            FERRY_LOG_WARN("batch {}: request '{}' failed after {} attempts (queue.max_attempts); not run again",
                           e.batch_id, e.custom_id, options_.max_attempts);
            pending_.push_back(
                {e, batch::EntryResult{batch::Outcome::kFailed, batch::ExhaustedLine(e, options_.max_attempts)}});
          } else {
            to_run.push_back(std::move(e));
          }
        }
      }
    }
    for (batch::Entry& e : to_run) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        running_[Key(e)] = e;
      }
      dispatch_(e, [this, e](BatchResponse r) {
        std::lock_guard<std::mutex> lock(mu_);
        running_.erase(Key(e));
        if ((r.status == 429 || r.status == 503) && !stop_) {
          retry_.push_back({NowMs() + 500, e});  // overloaded or not ready: again, later
        } else if (!(r.status == 503 && stop_)) {
          pending_.push_back({e, ToResult(e, r)});
        }  // shutting down: left to its lease, run again elsewhere
        cv_.notify_all();
      });
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (stop_) return;
    const bool more = leased_any && static_cast<int>(running_.size() + retry_.size()) < width;
    if (!more && pending_.empty()) {
      cv_.wait_for(lock, std::chrono::milliseconds(options_.poll_ms),
                   [this] { return stop_ || wake_ || !pending_.empty(); });
    } else if (!pending_.empty() && !last_error_.empty()) {
      // The store failed: retry after a pause, not in a spin.
      cv_.wait_for(lock, std::chrono::milliseconds(options_.poll_ms), [this] { return stop_; });
      last_error_.clear();
    }
  }
}

}  // namespace ferry::serve

namespace ferry::serve {

namespace {

class CaptureWriter final : public ResponseWriter {
 public:
  CaptureWriter(std::string request_id, std::function<void(BatchResponse)> done)
      : request_id_(std::move(request_id)), done_(std::move(done)) {}
  ~CaptureWriter() override {
    if (!delivered_) Deliver(500, R"({"error":{"message":"the request ended without a response","type":"server_error","param":null,"code":null}})");
  }
  void Send(int status, std::string /*content_type*/, std::string body, Headers /*headers*/) override {
    Deliver(status, std::move(body));
  }
  void StartStream(int status, std::string /*content_type*/, Headers /*headers*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    stream_status_ = status;
  }
  void Write(std::string data) override {
    std::lock_guard<std::mutex> lock(mu_);
    stream_ += data;
  }
  void End() override {
    std::string body;
    int status;
    {
      std::lock_guard<std::mutex> lock(mu_);
      body = std::move(stream_);
      status = stream_status_;
    }
    Deliver(status, std::move(body));
  }
  void OnDisconnect(std::function<void()> /*callback*/) override {}  // a batch request has no client to lose
  bool disconnected() const override { return false; }

 private:
  void Deliver(int status, std::string body) {
    std::function<void(BatchResponse)> done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (delivered_) return;
      delivered_ = true;
      done = std::move(done_);
    }
    done(BatchResponse{status, std::move(body), request_id_});
  }

  const std::string request_id_;
  std::mutex mu_;
  std::function<void(BatchResponse)> done_;
  bool delivered_ = false;
  int stream_status_ = 200;
  std::string stream_;
};

}  // namespace

std::shared_ptr<ResponseWriter> MakeCaptureWriter(std::string request_id, std::function<void(BatchResponse)> done) {
  return std::make_shared<CaptureWriter>(std::move(request_id), std::move(done));
}

}  // namespace ferry::serve
