#include "serve/encoder_job.h"

#include <chrono>
#include <mutex>

namespace ferry::serve {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Thread-safe: callbacks arrive from the batcher's thread, the canceller's and the client's.
class EncoderJob : public std::enable_shared_from_this<EncoderJob> {
 public:
  EncoderJob(std::shared_ptr<RequestContext> ctx, ServedModel& model, ThreadPool& workers, EncoderJobSpec spec)
      : ctx_(std::move(ctx)), model_(model), workers_(workers), spec_(std::move(spec)),
        tier_(ctx_->metrics().ForTier(model.name(), ctx_->principal().tier, /*decoder=*/false)) {}

  void Start() {
    const size_t n = spec_.items.size();
    if (n == 0) {
      workers_.Submit([self = shared_from_this()] { self->Finish(); });
      return;
    }
    rows_.resize(n);
    remaining_ = static_cast<int>(n);
    ctx_->SetLog("model", model_.name());
    ctx_->SetLog("inputs", spec_.inputs);
    if (static_cast<int>(n) != spec_.inputs) ctx_->SetLog("windows", n);
    auto self = shared_from_this();
    ctx_->writer().OnDisconnect([self] { self->CancelAll(); });
    std::vector<std::shared_ptr<sched::BatchItem>> items;
    std::vector<std::shared_ptr<EncoderWork>> works;
    items.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      auto work = std::make_shared<EncoderWork>();
      work->kind = spec_.kind;
      work->input = std::move(spec_.items[i]);
      work->tier = ctx_->principal().tier;
      work->arrival = ctx_->arrival();
      // The request's queue time is its first item's wait (items are queued in order).
      if (i == 0) work->queue_time = tier_.request_queue_time_seconds;
      work->done = [self, i](Result<std::vector<float>> r) { self->OnDone(i, std::move(r)); };
      auto item = std::make_shared<sched::BatchItem>();
      item->priority_level = spec_.priority;
      item->timeout_us = spec_.timeout_us;
      item->payload = work;
      item->on_reject = [work](const Status& s) { work->Complete(s); };
      items.push_back(std::move(item));
      works.push_back(std::move(work));
    }
    spec_.items.clear();
    Result<std::vector<uint64_t>> ids = model_.encoder()->EnqueueGroup(items);
    if (!ids.ok()) {
      // Nothing was queued: the request fails as a whole.
      for (auto& work : works) work->Complete(ids.status());
      return;
    }
    bool cancel = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ids_ = std::move(ids).value();
      cancel = cancelled_;  // the client left (or an item failed) before the ids were known
    }
    if (cancel) CancelAll();
  }

 private:
  // Cancels every queued item. Cancelling calls on_reject on this thread, which re-enters
  // OnDone, so the lock is not held meanwhile.
  void CancelAll() {
    std::vector<uint64_t> ids;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      ids = ids_;
    }
    if (!ids.empty()) model_.encoder()->CancelAll(ids);
  }

  void OnDone(size_t i, Result<std::vector<float>> r) {
    bool cancel_rest = false;
    bool last = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (r.ok()) {
        rows_[i] = std::move(r).value();
      } else if (error_.ok()) {
        error_ = r.status();
        cancel_rest = true;
      }
      last = --remaining_ == 0;
    }
    if (cancel_rest) CancelAll();  // the request fails as a whole
    if (!last) return;
    // The last item is in: merge and answer off the batcher's thread.
    auto self = shared_from_this();
    workers_.Submit([self] { self->Finish(); });
  }

  void Finish() {
    const std::string& name = model_.name();
    const std::string& tier = ctx_->principal().tier;
    tier_.e2e_request_latency_seconds->Observe(std::chrono::duration<double>(Clock::now() - ctx_->arrival()).count());
    tier_.prompt_tokens->Inc(static_cast<double>(spec_.prompt_tokens));
    tier_.request_prompt_tokens->Observe(static_cast<double>(spec_.prompt_tokens));
    ctx_->SetLog("prompt_tokens", spec_.prompt_tokens);
    ctx_->CountTokens(spec_.prompt_tokens);  // rate limits: the tokens the model read, every window's
    Status error;
    {
      std::lock_guard<std::mutex> lock(mu_);
      error = error_;
    }
    Result<json> body = error.ok() ? spec_.finish(rows_) : Result<json>(error);
    if (!body.ok()) {
      const Status& s = body.status();
      const ApiError e = FromStatus(s);
      const std::string_view reason = e.http_status == 429                            ? kFailureRejectedQueueFull
                                      : s.code() == StatusCode::kDeadlineExceeded     ? kFailureTimeout
                                      : s.code() == StatusCode::kCancelled            ? kFailureCancelled
                                      : e.http_status == 400                          ? kFailureInvalidRequest
                                                                                      : kFailureEngineError;
      ctx_->metrics().RecordFailure(name, tier, reason);
      ctx_->ReplyError(e);
      return;
    }
    ctx_->metrics().RecordSuccess(name, tier, kFinishedStop);
    ctx_->ReplyJson(200, *body);
  }

  std::shared_ptr<RequestContext> ctx_;
  ServedModel& model_;
  ThreadPool& workers_;
  EncoderJobSpec spec_;  // items are moved into the queue
  ServerMetrics::TierMetrics tier_;
  std::mutex mu_;
  std::vector<uint64_t> ids_;             // GUARDED_BY(mu_)
  bool cancelled_ = false;                // GUARDED_BY(mu_)
  std::vector<std::vector<float>> rows_;  // GUARDED_BY(mu_) until remaining_ is 0
  int remaining_ = 0;                     // GUARDED_BY(mu_)
  Status error_;                          // GUARDED_BY(mu_)
};

}  // namespace

void RunEncoderJob(std::shared_ptr<RequestContext> ctx, ServedModel& model, ThreadPool& workers, EncoderJobSpec spec) {
  std::make_shared<EncoderJob>(std::move(ctx), model, workers, std::move(spec))->Start();
}

}  // namespace ferry::serve
