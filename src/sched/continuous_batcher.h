// Continuous (iteration-level) batching for one served decoder: a scheduler thread that
// runs the model's EngineCore step after step, lets requests join and leave between steps,
// and hands each step's events to the requests' handlers. The events are raw (token ids and
// log-probabilities); turning them into text and responses happens off this thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "sched/engine_core.h"
#include "sched/core_share.h"
#include "sched/step_turns.h"

namespace ferry::sched {

struct BatcherSnapshot {
  int running = 0;
  int waiting = 0;
  int64_t waiting_tokens = 0;
  int kv_free_blocks = 0;
  int kv_blocks = 0;
  uint64_t steps = 0;
  uint64_t preemptions = 0;
  int64_t step_pacing_us = 0;  // SetStepPacing's interval; 0 = off
  uint64_t paced_waits = 0;    // waits the pacing made between steps (counted as each starts)
  double paced_seconds = 0;    // the total length of those that ended
  uint64_t turn_waits = 0;     // steps that waited for their turn on a shared device (SetStepTurns)
  int compute_threads = 0;     // under a core share (SetCoreShare): its last step's threads; 0 = none
  double turn_wait_seconds = 0;  // the total of those waits
};

// Thread-safe: Submit/Cancel/Snapshot from any thread; the loop owns the core (its KV cache
// and executor) while running.
class ContinuousBatcher {
 public:
  ContinuousBatcher(EngineCore& core, BatcherObserver* observer = nullptr);
  ~ContinuousBatcher();

  // Replaces the core's step function (tests inject faults; call before Start()).
  void SetStepFunction(StepFunction step) { core_.SetStepFunction(std::move(step)); }

  Status Start();
  // Validates and queues. InvalidArgument/OutOfRange for a request that can never run;
  // ResourceExhausted when the waiting queue is full (requests or prompt tokens);
  // Unavailable after Stop(). On success the handle identifies it for Cancel.
  Result<uint64_t> Submit(GenerationRequest request);
  // Queues a request moved here from another batcher (TakeWaiting): validated, but not held
  // to the queue limits, since it was admitted once already. On failure `request` is left
  // intact for the caller to finish.
  Result<uint64_t> SubmitMoved(GenerationRequest& request);
  // Moves out the requests waiting here that have never been scheduled and that `movable`
  // accepts (only those with GenerationRequest::movable set are offered), in queue order,
  // each with its event handler: they are no longer this batcher's and get no event from
  // it. Runs on the scheduler thread between steps; waits up to `timeout` for that and
  // takes nothing when it does not come (or the batcher is not running).
  std::vector<GenerationRequest> TakeWaiting(std::function<bool(const GenerationRequest&)> movable,
                                             std::chrono::milliseconds timeout);
  // Whether `request` could ever run here (reads only what is fixed at creation).
  Status Validate(const GenerationRequest& request) const { return core_.Validate(request); }
  // Frees the request's KV blocks and queue slot at whatever stage it is in; its final
  // event reports kAbort. False when the handle is unknown or already finished.
  bool Cancel(uint64_t handle);
  // Stops accepting, lets running and queued requests finish for up to `timeout`, then
  // cancels what is left and joins the thread.
  void Stop(std::chrono::milliseconds timeout);

  // Step pacing (0 = off, the default): while nothing waits to start (no new arrival, no
  // request queued in the core, no sequence still prefilling), a step starts no sooner than
  // `min_interval` after the previous one started, so a variant serving a trickle of traffic
  // leaves the device to others. An arrival, a cancel, Stop or a request's deadline ends a
  // paced wait at once; with anything waiting the loop runs flat out. Takes effect at once
  // (a shorter interval ends a wait early). Any thread.
  void SetStepPacing(std::chrono::microseconds min_interval);
  // Steps take turns with the other loops holding `turns` (nullptr: none, the default), so
  // that models sharing one device step one at a time. Any thread; from the next step.
  void SetStepTurns(std::shared_ptr<StepTurns> turns);
  // Steps run on this loop's share of the cores held by `share` (nullptr: none, the default),
  // at most `max_threads` (0: no cap of its own): the loop is a member while it has work and
  // sets its engine's compute threads to the share before each step. Call before the first
  // request.
  void SetCoreShare(std::shared_ptr<CoreShare> share, int max_threads = 0);
  std::chrono::microseconds step_pacing() const { return std::chrono::microseconds(step_pacing_us_.load()); }

  BatcherSnapshot Snapshot() const;
  // How long a request submitted now would wait before its first step, from the requests
  // ahead of it and the recent rate at which requests leave the queue; 0 when nothing waits
  // or the rate is not known yet.
  int64_t EstimatedWaitMs() const;
  const std::string& name() const { return core_.name(); }
  int max_seq_len() const { return core_.max_seq_len(); }

 private:
  struct Arrival {
    uint64_t handle = 0;
    GenerationRequest request;
  };

  // What the observer's OnRequest needs to time a request's events (loop thread).
  struct Progress {
    std::string tier;
    Clock::time_point arrival;
    Clock::time_point last_token;
    bool first_token = false;
  };

  void Loop();
  // After a step that started at `step_start`: waits out the step pacing, if any applies.
  void PacedWait(Clock::time_point step_start);
  void TakeInbox();
  void RunTasks();
  Result<uint64_t> Enqueue(GenerationRequest& request, bool check_limits);
  void Deliver(std::vector<GenerationEvent>& events);
  void ReportProgress(const GenerationEvent& event, Clock::time_point now);
  void Publish();
  // Queued requests (the inbox and the core's waiting ones) that run no later than a new
  // request of `priority`. Needs mu_.
  int QueuedAtOrAboveLocked(int64_t priority) const;

  EngineCore& core_;
  const ContinuousBatchingOptions options_;

  // Shared with submitters.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Arrival> inbox_;                   // GUARDED_BY(mu_)
  std::vector<uint64_t> cancels_;               // GUARDED_BY(mu_)
  std::deque<std::function<void()>> tasks_;     // GUARDED_BY(mu_): run by the loop between steps
  int64_t queued_tokens_ = 0;                   // GUARDED_BY(mu_): inbox + waiting prompt tokens
  int queued_requests_ = 0;                     // GUARDED_BY(mu_): inbox + waiting requests
  std::map<int64_t, int> queued_by_priority_;   // GUARDED_BY(mu_): the core's waiting requests by priority (as of the last Publish)
  std::map<int64_t, int> inbox_by_priority_;    // GUARDED_BY(mu_): the inbox's requests by priority
  bool accepting_ = false;                      // GUARDED_BY(mu_)
  bool stop_ = false;                           // GUARDED_BY(mu_)
  Clock::time_point stop_deadline_;             // GUARDED_BY(mu_)
  uint64_t next_handle_ = 1;                    // GUARDED_BY(mu_)
  std::unordered_set<uint64_t> live_;           // GUARDED_BY(mu_): handles not yet finished

  // Owned by the loop thread.
  std::unordered_map<uint64_t, std::function<EventAction(GenerationEvent&)>> handlers_;
  std::unordered_map<uint64_t, Progress> progress_;  // only while an observer is set
  std::vector<GenerationEvent> events_;

  std::atomic<int> running_count_{0};
  std::atomic<int> waiting_count_{0};
  std::atomic<int> free_blocks_{0};
  std::atomic<uint64_t> steps_{0};
  std::atomic<uint64_t> preemptions_{0};
  std::atomic<int64_t> step_pacing_us_{0};
  std::atomic<uint64_t> paced_waits_{0};
  std::atomic<int64_t> paced_us_{0};
  std::shared_ptr<StepTurns> turns_;  // GUARDED_BY(mu_); the loop copies it before each step
  std::atomic<uint64_t> turn_waits_{0};
  std::shared_ptr<CoreShare> share_;  // GUARDED_BY(mu_); the loop copies it before each step
  int share_member_ = -1;             // GUARDED_BY(mu_)
  std::atomic<int> share_threads_{0};  // written by the loop: the threads it last set
  std::atomic<int64_t> turn_wait_us_{0};
  LoadState published_;  // owned by the loop: the last state the observer saw
  // Admission rate (requests/s leaving the queue), smoothed over windows in which requests
  // were waiting; written by the loop.
  std::atomic<double> admit_rate_{0};
  Clock::time_point rate_since_{};
  uint64_t rate_admitted_ = 0;
  bool rate_window_waited_ = false;
  std::thread thread_;
};

}  // namespace ferry::sched
