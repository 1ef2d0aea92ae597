// Continuous (iteration-level) batching for one decoder model: a scheduler thread that,
// every iteration, plans a ragged step (PlanStep), runs it on the step executor, samples,
// streams tokens out, and lets finished requests leave and new ones join between steps.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/kv_cache.h"
#include "engine/step_executor.h"
#include "sched/batching_options.h"
#include "sched/generation_request.h"
#include "sched/schedule_policy.h"

namespace ferry::sched {

// Runs one ragged step; the default wraps StepExecutor::Step (tests inject failures here).
using StepFunction = std::function<Result<Tensor>(const std::vector<engine::SeqStep>&)>;

struct StepStats {
  int num_seqs = 0;
  int num_tokens = 0;
  double seconds = 0;
  int running = 0;
  int waiting = 0;
  double kv_usage = 0;  // used blocks / all blocks, after the step
};

// Metrics hooks, called on the batcher thread.
class BatcherObserver {
 public:
  virtual ~BatcherObserver() = default;
  virtual void OnStep(const StepStats& stats) = 0;
  virtual void OnPreemption(int count) = 0;
};

struct BatcherSnapshot {
  int running = 0;
  int waiting = 0;
  int64_t waiting_tokens = 0;
  int kv_free_blocks = 0;
  int kv_blocks = 0;
  uint64_t steps = 0;
  uint64_t preemptions = 0;
};

// Thread-safe: Submit/Cancel/Snapshot from any thread; the loop owns the KV cache and
// the executor while running.
class ContinuousBatcher {
 public:
  // `max_seq_len`: the longest sequence (prompt + generated) the KV cache was sized for.
  ContinuousBatcher(std::string name, engine::StepExecutor& executor, int vocab_size, int max_seq_len,
                    const ContinuousBatchingOptions& options, BatcherObserver* observer = nullptr);
  ~ContinuousBatcher();

  // Replaces the step function (call before Start()).
  // A replaced step function returns host logits, so tokens are then sampled on the host.
  void SetStepFunction(StepFunction step) {
    step_ = std::move(step);
    custom_step_ = true;
  }

  Status Start();
  // Validates and queues. InvalidArgument/OutOfRange for a request that can never run;
  // ResourceExhausted when the waiting queue is full (requests or prompt tokens);
  // Unavailable after Stop(). On success the handle identifies it for Cancel.
  Result<uint64_t> Submit(GenerationRequest request);
  // Frees the request's KV blocks and queue slot at whatever stage it is in; its final
  // event reports kAbort. False when the handle is unknown or already finished.
  bool Cancel(uint64_t handle);
  // Stops accepting, lets running and queued requests finish for up to `timeout`, then
  // cancels what is left and joins the thread.
  void Stop(std::chrono::milliseconds timeout);

  BatcherSnapshot Snapshot() const;
  const std::string& name() const { return name_; }
  int max_seq_len() const { return max_seq_len_; }

 private:
  struct Seq {
    uint64_t handle = 0;
    uint64_t arrival_order = 0;
    GenerationRequest req;
    std::vector<int32_t> tokens;  // prompt + generated
    int32_t prompt_len = 0;
    int32_t generated = 0;
    int32_t num_computed = 0;
    int32_t prompt_logprob_rows = 0;  // prompt positions whose log-probabilities were emitted
    bool started = false;             // first scheduled (queue time reported)
    bool prompt_logprobs_done = false;
    RequestState state = RequestState::kQueued;
    engine::Sampler sampler{0};
    uint64_t seed = 0;  // the sampler's seed, also used by device sampling
    std::vector<TokenOutput> pending_prompt;
  };

  void Loop();
  void TakeInbox();
  void ExpireDeadlines();
  bool RunIteration();
  Status RunSteps(const std::vector<Seq*>& seqs, const std::vector<int32_t>& counts, Tensor& logits);
  void Finish(Seq& s, FinishReason reason);
  void Fail(Seq& s, const Status& error, const std::string& reason);
  void Deliver(Seq& s, GenerationEvent& event);
  // Appends the sampled token `next` and delivers it (row: its logits, when on the host).
  void Emit(Seq& s, int32_t next, std::span<const float> row);
  void Remove(uint64_t handle);
  void UpdateCounters();

  const std::string name_;
  engine::StepExecutor& executor_;
  engine::KvCache& cache_;
  const int vocab_size_;
  const int max_seq_len_;
  const ContinuousBatchingOptions options_;
  BatcherObserver* observer_;
  StepFunction step_;
  bool custom_step_ = false;
  std::vector<backend::TokenSampling> sampling_;  // device sampling settings, reused

  // Shared with submitters.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Seq>> inbox_;      // GUARDED_BY(mu_)
  std::vector<uint64_t> cancels_;               // GUARDED_BY(mu_)
  int64_t queued_tokens_ = 0;                   // GUARDED_BY(mu_): inbox + waiting prompt tokens
  int queued_requests_ = 0;                     // GUARDED_BY(mu_)
  bool accepting_ = false;                      // GUARDED_BY(mu_)
  bool stop_ = false;                           // GUARDED_BY(mu_)
  Clock::time_point stop_deadline_;             // GUARDED_BY(mu_)
  uint64_t next_handle_ = 1;                    // GUARDED_BY(mu_)
  std::unordered_map<uint64_t, bool> live_;     // GUARDED_BY(mu_): handles not yet finished

  // Owned by the loop thread.
  std::unordered_map<uint64_t, std::unique_ptr<Seq>> seqs_;
  std::vector<uint64_t> running_;
  std::deque<uint64_t> waiting_;  // preempted ones go back to the front
  uint64_t arrival_counter_ = 0;
  std::vector<float> logprob_scratch_;

  std::atomic<int> running_count_{0};
  std::atomic<int> waiting_count_{0};
  std::atomic<int> free_blocks_{0};
  std::atomic<uint64_t> steps_{0};
  std::atomic<uint64_t> preemptions_{0};
  std::thread thread_;
};

}  // namespace ferry::sched
