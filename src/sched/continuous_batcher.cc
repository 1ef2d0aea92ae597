#include "sched/continuous_batcher.h"

#include <pthread.h>

#include <algorithm>
#include <exception>

#include "core/logging.h"
#include "engine/engine.h"

namespace ferry::sched {

ContinuousBatcher::ContinuousBatcher(EngineCore& core, BatcherObserver* observer)
    : core_(core), options_(core.options()) {
  core_.SetObserver(observer);
}

ContinuousBatcher::~ContinuousBatcher() { Stop(std::chrono::milliseconds(0)); }

Status ContinuousBatcher::Start() {
  FERRY_RETURN_IF_ERROR(options_.Validate());
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return FailedPrecondition("batcher '" + name() + "' already started");
  accepting_ = true;
  stop_ = false;
  free_blocks_ = core_.cache().num_free_blocks();
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

Result<uint64_t> ContinuousBatcher::Submit(GenerationRequest request) { return Enqueue(request, true); }

Result<uint64_t> ContinuousBatcher::SubmitMoved(GenerationRequest& request) { return Enqueue(request, false); }

Result<uint64_t> ContinuousBatcher::Enqueue(GenerationRequest& request, bool check_limits) {
  FERRY_RETURN_IF_ERROR(core_.Validate(request));  // reads only what is fixed at creation
  if (!request.on_event) return InvalidArgument("request without an event handler");
  const int64_t prompt_len = static_cast<int64_t>(request.prompt.size());
  uint64_t handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!accepting_) return Unavailable("the server is shutting down");
    if (check_limits && queued_requests_ + 1 > options_.max_queue_requests) {
      return ResourceExhausted("the queue of model '" + name() + "' is full (" +
                               std::to_string(options_.max_queue_requests) + " requests waiting)");
    }
    if (check_limits && queued_tokens_ + prompt_len > options_.max_queue_tokens) {
      return ResourceExhausted("the queue of model '" + name() + "' is full (" + std::to_string(queued_tokens_) +
                               " prompt tokens waiting)");
    }
    // Only the requests the scheduler runs first count: a higher tier jumps the queue of a
    // lower one, so a backlog of lower-priority requests does not refuse it.
    const int ahead = check_limits && options_.max_queue_time_ms > 0 && queued_requests_ > 0
                          ? QueuedAtOrAboveLocked(request.priority)
                          : 0;
    if (ahead > 0) {
      const double rate = admit_rate_.load();
      const double wait_ms = rate > 0 ? 1000.0 * (ahead + 1) / rate : 0;
      if (wait_ms > options_.admit_wait_fraction * static_cast<double>(options_.max_queue_time_ms)) {
        return ResourceExhausted("the queue of model '" + name() + "' would hold this request about " +
                                 std::to_string(static_cast<int64_t>(wait_ms / 1000 + 0.5)) +
                                 " s before it starts, too close to max_queue_time_ms (" +
                                 std::to_string(options_.max_queue_time_ms) + " ms); retry later");
      }
    }
    handle = next_handle_++;
    queued_requests_ += 1;
    queued_tokens_ += prompt_len;
    live_.insert(handle);
    inbox_by_priority_[request.priority] += 1;
    inbox_.push_back(Arrival{handle, std::move(request)});
  }
  cv_.notify_one();
  return handle;
}

std::vector<GenerationRequest> ContinuousBatcher::TakeWaiting(std::function<bool(const GenerationRequest&)> movable,
                                                              std::chrono::milliseconds timeout) {
  // The scheduler thread fills `taken` unless the caller gave up first (then it takes
  // nothing, so no request is lost between the two).
  struct Exchange {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    bool abandoned = false;
    std::vector<GenerationRequest> taken;
  };
  auto x = std::make_shared<Exchange>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable() || stop_) return {};
    tasks_.push_back([this, x, movable = std::move(movable)] {
      std::lock_guard<std::mutex> xl(x->mu);
      if (x->abandoned) return;
      TakeInbox();
      auto moved = core_.TakeUnstarted([&](const GenerationRequest& r) { return r.movable && movable(r); });
      for (auto& [handle, request] : moved) {
        auto h = handlers_.find(handle);
        if (h != handlers_.end()) {
          request.on_event = std::move(h->second);
          handlers_.erase(h);
        }
        progress_.erase(handle);
        {
          std::lock_guard<std::mutex> lock(mu_);
          live_.erase(handle);
        }
        x->taken.push_back(std::move(request));
      }
      x->done = true;
      x->cv.notify_all();
    });
  }
  cv_.notify_one();
  std::unique_lock<std::mutex> xl(x->mu);
  if (!x->cv.wait_for(xl, timeout, [&] { return x->done; })) {
    x->abandoned = true;
    return {};
  }
  return std::move(x->taken);
}

void ContinuousBatcher::RunTasks() {
  std::deque<std::function<void()>> tasks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks.swap(tasks_);
  }
  for (auto& t : tasks) t();
}

bool ContinuousBatcher::Cancel(uint64_t handle) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (live_.count(handle) == 0) return false;
    cancels_.push_back(handle);
  }
  cv_.notify_one();
  return true;
}

void ContinuousBatcher::Stop(std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    accepting_ = false;
    if (!stop_) {
      stop_ = true;
      stop_deadline_ = Clock::now() + timeout;
    }
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

int ContinuousBatcher::QueuedAtOrAboveLocked(int64_t priority) const {
  int n = 0;
  for (const auto* counts : {&queued_by_priority_, &inbox_by_priority_}) {
    for (const auto& [p, count] : *counts) {
      if (p > priority) break;
      n += count;
    }
  }
  return n;
}

int64_t ContinuousBatcher::EstimatedWaitMs() const {
  const double rate = admit_rate_.load();
  std::lock_guard<std::mutex> lock(mu_);
  if (rate <= 0 || queued_requests_ == 0) return 0;
  return static_cast<int64_t>(1000.0 * queued_requests_ / rate);
}

void ContinuousBatcher::SetStepPacing(std::chrono::microseconds min_interval) {
  step_pacing_us_ = std::max<int64_t>(0, min_interval.count());
  {
    std::lock_guard<std::mutex> lock(mu_);  // a loop about to wait sees the new value or the notification
  }
  cv_.notify_one();
}

BatcherSnapshot ContinuousBatcher::Snapshot() const {
  BatcherSnapshot s;
  s.running = running_count_.load();
  s.waiting = waiting_count_.load();
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.waiting_tokens = queued_tokens_;
  }
  s.kv_free_blocks = free_blocks_.load();
  s.kv_blocks = core_.cache().num_blocks();
  s.steps = steps_.load();
  s.preemptions = preemptions_.load();
  s.step_pacing_us = step_pacing_us_.load();
  s.paced_waits = paced_waits_.load();
  s.paced_seconds = static_cast<double>(paced_us_.load()) * 1e-6;
  s.turn_waits = turn_waits_.load();
  s.turn_wait_seconds = static_cast<double>(turn_wait_us_.load()) * 1e-6;
  s.compute_threads = share_threads_.load(std::memory_order_relaxed);
  return s;
}

void ContinuousBatcher::SetStepTurns(std::shared_ptr<StepTurns> turns) {
  std::lock_guard<std::mutex> lock(mu_);
  turns_ = std::move(turns);
}

void ContinuousBatcher::SetCoreShare(std::shared_ptr<CoreShare> share, int max_threads) {
  std::lock_guard<std::mutex> lock(mu_);
  share_member_ = share != nullptr ? share->Join(max_threads) : -1;
  share_ = std::move(share);
}

void ContinuousBatcher::Loop() {
  const std::string thread_name = ("sched:" + name()).substr(0, 15);
  pthread_setname_np(pthread_self(), thread_name.c_str());
  for (;;) {
    TakeInbox();
    RunTasks();
    core_.ExpireDeadlines(Clock::now(), events_);
    Deliver(events_);
    Publish();
    bool stopping;
    Clock::time_point deadline;
    std::shared_ptr<StepTurns> turns;
    std::shared_ptr<CoreShare> share;
    int member = -1;
    bool arrived = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping = stop_;
      deadline = stop_deadline_;
      turns = turns_;
      share = share_;
      member = share_member_;
      arrived = !inbox_.empty();
    }
    // A request accepted before Stop may still be in the inbox (submitted after this
    // iteration took it, just before Stop): it runs within the grace period like the rest,
    // rather than being cut because the core happened to be empty.
    if (stopping && ((core_.empty() && !arrived) || Clock::now() >= deadline)) {
      TakeInbox();  // past the deadline, what is still in the inbox is cancelled with the rest
      RunTasks();
      // Cut short by the server, not by its client: an error, so that a stream ends with an
      // error event rather than looking complete.
      const Status shutdown = Unavailable("the server is shutting down; the request was stopped before it finished");
      for (const auto& [handle, handler] : handlers_) {
        core_.Finish(handle, FinishReason::kAbort, events_, shutdown, "shutdown");
      }
      Deliver(events_);
      Publish();
      if (share != nullptr) share->Idle(member);
      return;
    }
    if (core_.empty()) {
      if (share != nullptr) share->Idle(member);
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(100),
                   [this] { return stop_ || !inbox_.empty() || !cancels_.empty() || !tasks_.empty(); });
      continue;
    }
    if (share != nullptr) {
      const int threads = share->Busy(member);
      if (threads != share_threads_.load(std::memory_order_relaxed)) {
        core_.engine().backend().SetThreads(threads);
        share_threads_.store(threads, std::memory_order_relaxed);
      }
    }
    const Clock::time_point step_start = Clock::now();
    core_.set_synchronous(turns != nullptr);
    bool stepped;
    if (turns != nullptr) {
      std::chrono::microseconds waited{0};
      const StepTurns::Turn turn = turns->Take(waited);
      if (waited.count() > 0) {
        turn_waits_ += 1;
        turn_wait_us_ += waited.count();
      }
      stepped = core_.Step(events_);
    } else {
      stepped = core_.Step(events_);
    }
    Deliver(events_);
    Publish();
    if (stepped) {
      PacedWait(step_start);
    } else {
      // Nothing could be scheduled (every running sequence blocked): wait briefly for a
      // cancellation or a deadline to change the picture.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(5), [this] { return stop_ || !cancels_.empty(); });
    }
  }
}

void ContinuousBatcher::PacedWait(Clock::time_point step_start) {
  // Only sequences that are decoding, with nobody waiting to start: an arrival, a queued
  // request and a prompt still prefilling are never paced (time to first token is not), and
  // a queue never builds up behind the pacing.
  if (step_pacing_us_.load() <= 0 || core_.empty() || core_.waiting() > 0 || core_.Prefilling()) return;
  const std::optional<Clock::time_point> deadline = core_.NextDeadline();  // ExpireDeadlines runs on time
  const Clock::time_point began = Clock::now();
  bool waited = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (stop_ || !inbox_.empty() || !cancels_.empty() || !tasks_.empty()) break;
      const int64_t pace_us = step_pacing_us_.load();  // re-read: SetStepPacing wakes the wait
      if (pace_us <= 0) break;
      Clock::time_point until = step_start + std::chrono::microseconds(pace_us);
      if (deadline && *deadline < until) until = *deadline;
      if (Clock::now() >= until) break;
      if (!waited) paced_waits_ += 1;  // counted as it starts: a wait in progress shows
      waited = true;
      cv_.wait_until(lock, until);
    }
  }
  if (waited) paced_us_ += std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - began).count();
}

void ContinuousBatcher::TakeInbox() {
  std::deque<Arrival> arrivals;
  std::vector<uint64_t> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    arrivals.swap(inbox_);
    inbox_by_priority_.clear();
    cancels.swap(cancels_);
  }
  for (Arrival& a : arrivals) {
    handlers_[a.handle] = std::move(a.request.on_event);
    a.request.on_event = nullptr;
    if (core_.observer() != nullptr && core_.observer()->wants_requests()) {
      progress_[a.handle] = Progress{a.request.tier, a.request.arrival, {}, false};
    }
    core_.Add(a.handle, std::move(a.request));
  }
  for (uint64_t h : cancels) core_.Finish(h, FinishReason::kAbort, events_);
  Deliver(events_);
  Publish();
}

// Hands each event to its request's handler, in order. A handler that asks to stop ends
// its request with finish reason "stop" (its final event follows at once).
void ContinuousBatcher::Deliver(std::vector<GenerationEvent>& events) {
  const bool timed = !progress_.empty();
  const Clock::time_point now = events.empty() || !timed ? Clock::time_point() : Clock::now();
  for (size_t i = 0; i < events.size(); ++i) {
    const uint64_t handle = events[i].handle;
    const bool finished = events[i].finished;
    if (timed) ReportProgress(events[i], now);
    auto it = handlers_.find(handle);
    if (it == handlers_.end()) continue;
    EventAction action = EventAction::kContinue;
    try {
      action = it->second(events[i]);
    } catch (const std::exception& e) {
      FERRY_LOG_ERROR("{}: the event handler of request {} threw: {}", name(), handle, e.what());
      action = EventAction::kStop;
    }
    if (finished) {
      handlers_.erase(it);
      std::lock_guard<std::mutex> lock(mu_);
      live_.erase(handle);
      continue;
    }
    if (action == EventAction::kStop) core_.Finish(handle, FinishReason::kStop, events);  // appended: delivered next
  }
  events.clear();
}

// Times one event of a request for the observer: queue wait on its first event, time to
// first token and the gaps between token events, and the outcome when it finishes.
void ContinuousBatcher::ReportProgress(const GenerationEvent& ev, Clock::time_point now) {
  auto it = progress_.find(ev.handle);
  if (it == progress_.end()) return;
  Progress& p = it->second;
  RequestProgress r;
  r.tier = p.tier;
  if (ev.queue_seconds > 0) r.queue_seconds = ev.queue_seconds;
  r.new_tokens = static_cast<int>(ev.tokens.size());
  if (r.new_tokens > 0) {
    if (!p.first_token) {
      p.first_token = true;
      r.ttft_seconds = std::chrono::duration<double>(now - p.arrival).count();
    } else {
      r.token_gap_seconds = std::chrono::duration<double>(now - p.last_token).count() / r.new_tokens;
    }
    p.last_token = now;
  }
  if (ev.finished) {
    r.finished = true;
    r.failure_reason = ev.error.ok() ? std::string_view() : std::string_view(ev.failure_reason);
    r.prompt_tokens = ev.prompt_tokens_count;
    r.generated_tokens = ev.generated_tokens_count;
  }
  core_.observer()->OnRequest(r);
  if (ev.finished) progress_.erase(it);
}

void ContinuousBatcher::Publish() {
  const LoadState state = core_.load();
  if (core_.observer() != nullptr &&
      (state.running != published_.running || state.waiting != published_.waiting ||
       state.kv_usage != published_.kv_usage)) {
    core_.observer()->OnState(state);
  }
  published_ = state;
  // The admission rate, over windows of at least 250 ms in which someone was waiting (an
  // idle queue says nothing about how fast it empties).
  const Clock::time_point now = Clock::now();
  rate_window_waited_ = rate_window_waited_ || state.waiting > 0;
  if (rate_since_ == Clock::time_point{}) {
    rate_since_ = now;
    rate_admitted_ = core_.admitted();
  } else if (now - rate_since_ >= std::chrono::milliseconds(250)) {
    const double seconds = std::chrono::duration<double>(now - rate_since_).count();
    const double rate = static_cast<double>(core_.admitted() - rate_admitted_) / seconds;
    if (rate_window_waited_) {
      const double old = admit_rate_.load();
      admit_rate_ = old > 0 ? 0.7 * old + 0.3 * rate : rate;
    }
    rate_since_ = now;
    rate_admitted_ = core_.admitted();
    rate_window_waited_ = state.waiting > 0;
  }
  running_count_ = core_.running();
  waiting_count_ = core_.waiting();
  free_blocks_ = core_.cache().num_free_blocks();
  steps_ = core_.steps();
  preemptions_ = core_.preemptions();
  // Only admission by estimated wait reads it (Enqueue).
  std::map<int64_t, int> waiting_by_priority;
  if (options_.max_queue_time_ms > 0) waiting_by_priority = core_.WaitingByPriority();
  std::lock_guard<std::mutex> lock(mu_);
  int64_t inbox_tokens = 0;
  for (const Arrival& a : inbox_) inbox_tokens += static_cast<int64_t>(a.request.prompt.size());
  queued_requests_ = static_cast<int>(inbox_.size()) + core_.waiting();
  queued_tokens_ = inbox_tokens + core_.waiting_tokens();
  queued_by_priority_ = std::move(waiting_by_priority);
}

}  // namespace ferry::sched
