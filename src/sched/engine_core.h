// The one decoder generation loop. Requests go in; each Step() plans a ragged batch
// (PlanStep), reserves its KV blocks, runs it on the step executor (which samples) and
// returns what every request produced. No threads: `ferry generate`, `ferry eval`,
// `ferry bench model` and warm-up drive it directly, and the server's ContinuousBatcher runs
// it on its scheduler thread.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "engine/step_executor.h"
#include "sched/batching_options.h"
#include "sched/generation_request.h"
#include "sched/schedule_policy.h"
#include "sched/step_time_model.h"

namespace ferry::sched {

// Runs one ragged step; the default is StepExecutor::Step (tests wrap it to inject faults).
using StepFunction = std::function<Result<std::vector<engine::SeqResult>>(const std::vector<engine::SeqStep>&)>;

struct StepStats {
  int num_seqs = 0;
  int num_tokens = 0;
  int token_budget = 0;  // the step's token budget (max_num_batched_tokens, or less under max_step_ms)
  double seconds = 0;
  int running = 0;
  int waiting = 0;
  double kv_usage = 0;  // used blocks / all blocks, after the step
};

// What is running and waiting, whenever it changes (steps, arrivals, finishes, cancels).
struct LoadState {
  int running = 0;
  int waiting = 0;
  double kv_usage = 0;  // used blocks / all blocks
};

// One request's progress as the continuous batcher delivers its events, for load monitors
// (the QoS controller). Times are measured on the scheduler thread from the request's
// arrival. The views are valid during the call only.
struct RequestProgress {
  std::string_view tier;
  std::optional<double> queue_seconds;  // first scheduled: arrival to its first step
  std::optional<double> ttft_seconds;   // first token: arrival to the step that produced it
  double token_gap_seconds = 0;         // later tokens: time since the previous token event, per token
  int new_tokens = 0;                   // tokens this event carries
  bool finished = false;
  std::string_view failure_reason;      // finished with an error: its metrics label ("engine_error", ...)
  int32_t prompt_tokens = 0;            // set when finished
  int32_t generated_tokens = 0;         // set when finished
};

// Metrics hooks, called on the thread that steps.
class BatcherObserver {
 public:
  virtual ~BatcherObserver() = default;
  virtual void OnStep(const StepStats& stats) = 0;
  virtual void OnPreemption(int count) = 0;
  // Also after requests leave between steps (a cancel with nothing left to run), so that
  // gauges do not keep the last step's values.
  virtual void OnState(const LoadState& state) { (void)state; }
  // A request was admitted with prefix caching on: `queried` tokens looked up, `hits` of
  // them found in the cache (and not computed again).
  virtual void OnPrefixCache(int64_t queried, int64_t hits) {
    (void)queried;
    (void)hits;
  }
  // After each event of a request the ContinuousBatcher delivers (not for GenerateAll),
  // when wants_requests() says so (the batcher then times every request's events).
  virtual void OnRequest(const RequestProgress& progress) { (void)progress; }
  virtual bool wants_requests() const { return false; }
};

struct EngineCoreOptions {
  ContinuousBatchingOptions batching;  // max_num_seqs, token budget, max_seq_len, block size
  int kv_seqs = 0;                     // the KV cache holds this many sequences of max_seq_len (0: max_num_seqs)
  bool step_graphs = true;             // decode steps as recorded graphs where the backend has them
  // GPU: this fraction of the device's memory is the model's budget (vLLM's
  // gpu_memory_utilization); the KV cache fills what the weights, the measured activation
  // peak of the largest step and a reserve leave of it. 0: kv_seqs sequences.
  double gpu_memory_utilization = 0;
  // Host: the model's budget; the KV cache holds kv_seqs sequences at most, fewer when the
  // weights and activations leave less. 0: kv_seqs sequences. (sched/kv_budget.h)
  int64_t host_memory_budget_bytes = 0;
};

// Thread-compatible: one thread at a time (the owner of the KV cache and the executor).
class EngineCore {
 public:
  // A core over `engine` with its own KV cache and step executor.
  static Result<std::unique_ptr<EngineCore>> Create(std::string name, std::shared_ptr<engine::Engine> engine,
                                                    const EngineCoreOptions& options);
  ~EngineCore();
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  // Whether `request` can ever run here: a clear InvalidArgument/OutOfRange otherwise. The
  // one place prompt token ids are checked against the vocabulary.
  Status Validate(const GenerationRequest& request) const;
  // Queues a validated request under a handle unique in this core.
  void Add(uint64_t handle, GenerationRequest request);
  // Ends a request at whatever stage it is in: its KV blocks are freed and `out` gets its
  // final event (kAbort, or the given reason and error). False for unknown handles.
  bool Finish(uint64_t handle, FinishReason reason, std::vector<GenerationEvent>& out, const Status& error = {},
              const std::string& failure_reason = {});
  // Removes the waiting requests that have never been scheduled (no KV blocks, no events
  // yet) and that `movable` accepts, in queue order, and returns them with their handles.
  std::vector<std::pair<uint64_t, GenerationRequest>> TakeUnstarted(
      const std::function<bool(const GenerationRequest&)>& movable);
  // Fails every request whose deadline has passed (DeadlineExceeded, "timeout"), and every
  // request still waiting for its first step after max_queue_time_ms (ResourceExhausted,
  // "queue_timeout").
  void ExpireDeadlines(Clock::time_point now, std::vector<GenerationEvent>& out);
  // One iteration: appends the events of this step to `out`. False when nothing could be
  // scheduled (every running sequence blocked on KV blocks) and nothing is in flight.
  //
  // With asynchronous scheduling (async_scheduling(); ContinuousBatchingOptions), an
  // iteration plans and launches the next step before it collects the one in flight, so the
  // host's work (planning, inputs, these events, the caller's) overlaps the device's: the
  // events appended are the previous launch's. A decode row whose input is the in-flight
  // token takes it on the device; a sequence that stops on that token has one extra token
  // computed and dropped; one that reaches max_tokens is not launched again. Requests that
  // need the host between tokens (structured outputs, prompt log-probabilities, kept logits,
  // repetition, presence or frequency penalties) make the steps synchronous while any is
  // here, as does a step that would preempt a sequence.
  bool Step(std::vector<GenerationEvent>& out);
  // Whether steps are launched asynchronously (the option, and a backend that can).
  bool async_scheduling() const { return async_; }
  // Makes steps synchronous while set (loops that take turns on a shared GPU: a turn must
  // end with the step's work done).
  void set_synchronous(bool synchronous) { synchronous_ = synchronous; }
  // Steps launched and not yet collected (0 or 1 between calls).
  int in_flight() const { return static_cast<int>(launched_.size()); }

  bool empty() const { return seqs_.empty(); }
  bool Contains(uint64_t handle) const { return seqs_.count(handle) != 0; }
  int running() const { return static_cast<int>(running_.size()); }
  int waiting() const { return static_cast<int>(waiting_.size()); }
  int64_t waiting_tokens() const { return waiting_tokens_; }
  // The waiting requests by priority (lower runs first).
  std::map<int64_t, int> WaitingByPriority() const;
  uint64_t steps() const { return steps_; }
  uint64_t admitted() const { return admitted_; }  // requests that left the queue for their first step
  uint64_t preemptions() const { return preemptions_; }
  // Prefix caching: prompt tokens looked up at admission, and those found.
  int64_t prefix_queried_tokens() const { return prefix_queried_; }
  int64_t prefix_hit_tokens() const { return prefix_hits_; }
  // Structured outputs: time spent finding grammar masks and advancing grammar states.
  double grammar_seconds() const { return grammar_seconds_; }
  // The learned step time (seconds against tokens per step) behind the max_step_ms budget.
  const StepTimeModel& step_time() const { return step_time_; }

  const std::string& name() const { return name_; }
  int max_seq_len() const { return max_seq_len_; }
  const ContinuousBatchingOptions& options() const { return options_; }
  engine::Engine& engine() const { return *engine_; }
  engine::KvCache& cache() { return *cache_; }
  engine::StepExecutor& executor() { return *executor_; }

  void SetStepFunction(StepFunction step) { step_ = std::move(step); }
  void SetObserver(BatcherObserver* observer) { observer_ = observer; }
  BatcherObserver* observer() const { return observer_; }
  LoadState load() const;
  // The earliest deadline among the requests here (running or waiting); none without one.
  std::optional<Clock::time_point> NextDeadline() const;
  // Whether a running sequence is still prefilling: it has yet to produce its first token,
  // or has tokens to compute again after a preemption.
  bool Prefilling() const;

 private:
  struct Seq {
    uint64_t handle = 0;
    uint64_t arrival_order = 0;
    GenerationRequest req;
    std::vector<int32_t> tokens;  // prompt + generated
    int32_t prompt_len = 0;
    int32_t generated = 0;
    int32_t num_computed = 0;
    bool started = false;             // first scheduled (queue time reported)
    bool admitted_once = false;       // has left the waiting queue at least once
    bool prompt_logprobs_done = false;
    RequestState state = RequestState::kQueued;
    uint64_t seed = 0;
    std::vector<int32_t> stop_set;  // the ids that end it: EOS (unless ignore_eos) and stop_token_ids
    std::vector<uint64_t> block_hashes;  // prefix caching: chained hashes of the full blocks of `tokens`
    int prefix_blocks = 0;               // while waiting: blocks found in the prefix cache
    std::vector<TokenOutput> pending_prompt;
    // Structured outputs (req.grammar): the state after the generated tokens, and this
    // step's allowed ids (the grammar's mask, plus the stop ids where it accepts).
    structured::TokenMatcher::State grammar_state = 0;
    std::shared_ptr<const structured::TokenMask> mask;
    std::vector<uint64_t> mask_words;
    bool grammar_stuck = false;  // no token of the vocabulary can continue
    bool grammar_ended = false;  // complete, and no token can continue: ends without this step's token
    // Asynchronous steps: tokens drawn for it in launched, uncollected steps, and its row in
    // the latest launch (where the next step's decode row takes its input from).
    int32_t in_flight = 0;
    int32_t launch_row = -1;
    bool host_bound = false;  // needs the host between tokens (see Step)
  };
  // A launched, uncollected step: its rows, in order.
  struct LaunchedStep {
    std::vector<uint64_t> handles;
    std::vector<uint64_t> orders;  // arrival_order: a handle reused by then is not this sequence
    std::vector<int32_t> starts;   // num_computed before the step
    std::vector<int32_t> counts;
    std::vector<char> sample;
    int tokens = 0;
    int token_budget = 0;
    Clock::time_point launched_at;
  };

  EngineCore() = default;
  // The synchronous step (the whole of Step without asynchronous scheduling).
  bool StepSync(std::vector<GenerationEvent>& out);
  bool StepAsync(std::vector<GenerationEvent>& out);
  // Plans the next step: the running sequences with `ahead` tokens in flight counted as
  // known, except those that reach their length limit with them (launched no more).
  Decision Plan(PlanInput& in);
  // Moves the plan's admitted requests to running (adopting their cached prefixes).
  void Admit(const Decision& d);
  // Collects the oldest launched step, appending its events.
  void CollectLaunched(std::vector<GenerationEvent>& out);
  // Collects every launched step.
  bool DrainLaunched(std::vector<GenerationEvent>& out);
  // A row's sampling settings, for its (generated + in_flight)-th token.
  void FillSampling(const Seq& s, engine::SeqStep& st) const;
  // The sampled token `r` of a sequence whose row completed its known tokens: appended, and
  // its event, stop and length checks.
  void TakeToken(Seq& s, engine::SeqResult& r, std::vector<GenerationEvent>& out);
  void ReportStep(int seqs, int tokens, int token_budget, double seconds);
  // Runs one step over `seqs`, appending their events; a failed step changes nothing.
  Status RunSteps(const std::vector<Seq*>& seqs, const std::vector<int32_t>& counts,
                  std::vector<GenerationEvent>& out);
  GenerationEvent& NewEvent(Seq& s, std::vector<GenerationEvent>& out);
  void ApplyMask(Seq& s, engine::SeqStep& st);
  void Fail(Seq& s, const Status& error, const std::string& reason, std::vector<GenerationEvent>& out);
  void Remove(uint64_t handle);

  std::string name_;
  std::shared_ptr<engine::Engine> engine_;
  std::unique_ptr<engine::KvCache> cache_;
  std::unique_ptr<engine::StepExecutor> executor_;
  ContinuousBatchingOptions options_;
  int max_seq_len_ = 0;
  int vocab_size_ = 0;
  StepFunction step_;
  BatcherObserver* observer_ = nullptr;

  std::unordered_map<uint64_t, std::unique_ptr<Seq>> seqs_;
  std::vector<uint64_t> running_;
  std::deque<uint64_t> waiting_;  // preempted ones go back to the front
  int64_t waiting_tokens_ = 0;
  uint64_t arrival_counter_ = 0;
  uint64_t steps_ = 0;
  uint64_t preemptions_ = 0;
  int64_t prefix_queried_ = 0;
  int64_t prefix_hits_ = 0;
  uint64_t admitted_ = 0;
  StepTimeModel step_time_;
  double grammar_seconds_ = 0;
  bool async_ = false;
  bool synchronous_ = false;
  int host_bound_ = 0;               // sequences here with Seq::host_bound
  std::deque<LaunchedStep> launched_;
  Clock::time_point last_collect_;   // when the previous launched step was collected
  static constexpr int32_t kPlaceholder = 0;
  std::vector<engine::SeqStep> step_scratch_;
};

// Offline generation through a core: adds every request, steps until all have finished,
// and returns each request's events merged into one (tokens, prompt tokens, logits, the
// final reason and error). For the CLI, tools and tests.
Result<std::vector<GenerationEvent>> GenerateAll(EngineCore& core, std::vector<GenerationRequest> requests);

}  // namespace ferry::sched
