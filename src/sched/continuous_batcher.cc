#include "sched/continuous_batcher.h"

#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <exception>

#include "core/logging.h"

namespace ferry::sched {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kNone: break;
  }
  return "none";
}

namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The chosen token's log-probability and the top k, from one row of logits.
TokenOutput MakeTokenOutput(int32_t token, std::span<const float> row, int top_k, std::vector<float>& scratch) {
  TokenOutput out;
  out.token = token;
  if (top_k < 0) return out;
  engine::Sampler::LogSoftmax(row, scratch);
  out.logprob = scratch[token];
  if (top_k > 0) {
    std::vector<int32_t> ids(scratch.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    const size_t k = std::min<size_t>(static_cast<size_t>(top_k), ids.size());
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      return scratch[a] > scratch[b] || (scratch[a] == scratch[b] && a < b);
    });
    for (size_t i = 0; i < k; ++i) out.top_logprobs.emplace_back(ids[i], scratch[ids[i]]);
  }
  return out;
}

bool AllFinite(std::span<const float> row) {
  for (float v : row) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

}  // namespace

ContinuousBatcher::ContinuousBatcher(std::string name, engine::StepExecutor& executor, int vocab_size,
                                     int max_seq_len, const ContinuousBatchingOptions& options,
                                     BatcherObserver* observer)
    : name_(std::move(name)),
      executor_(executor),
      cache_(executor.cache()),
      vocab_size_(vocab_size),
      max_seq_len_(max_seq_len),
      options_(options),
      observer_(observer) {
  step_ = [this](const std::vector<engine::SeqStep>& steps) { return executor_.Step(steps); };
}

ContinuousBatcher::~ContinuousBatcher() { Stop(std::chrono::milliseconds(0)); }

Status ContinuousBatcher::Start() {
  FERRY_RETURN_IF_ERROR(options_.Validate());
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return FailedPrecondition("batcher '" + name_ + "' already started");
  accepting_ = true;
  stop_ = false;
  free_blocks_ = cache_.num_free_blocks();
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

Result<uint64_t> ContinuousBatcher::Submit(GenerationRequest request) {
  const int64_t prompt_len = static_cast<int64_t>(request.prompt.size());
  if (prompt_len == 0) return InvalidArgument("the prompt is empty");
  if (request.max_tokens < 1) return InvalidArgument("max_tokens must be at least 1");
  FERRY_RETURN_IF_ERROR(request.sampling.Validate());
  if (prompt_len + request.max_tokens > max_seq_len_) {
    return OutOfRange("this model's maximum context length is " + std::to_string(max_seq_len_) +
                      " tokens; the request has " + std::to_string(prompt_len) + " prompt tokens and asks for " +
                      std::to_string(request.max_tokens) + " more");
  }
  for (int32_t id : request.prompt) {
    if (id < 0 || id >= vocab_size_) {
      return InvalidArgument("prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                             std::to_string(vocab_size_) + ")");
    }
  }
  if (!request.on_event) return InvalidArgument("request without an event handler");
  auto seq = std::make_unique<Seq>();
  seq->prompt_len = static_cast<int32_t>(prompt_len);
  seq->tokens = request.prompt;
  seq->req = std::move(request);
  uint64_t handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!accepting_) return Unavailable("the server is shutting down");
    if (queued_requests_ + 1 > options_.max_queue_requests) {
      return ResourceExhausted("the queue of model '" + name_ + "' is full (" +
                               std::to_string(options_.max_queue_requests) + " requests waiting)");
    }
    if (queued_tokens_ + prompt_len > options_.max_queue_tokens) {
      return ResourceExhausted("the queue of model '" + name_ + "' is full (" + std::to_string(queued_tokens_) +
                               " prompt tokens waiting)");
    }
    handle = next_handle_++;
    seq->handle = handle;
    seq->seed = seq->req.sampling.seed.value_or(handle * 0x9E3779B97F4A7C15ull);
    seq->sampler = engine::Sampler(seq->seed);
    if (options_.default_timeout_ms > 0 && !seq->req.deadline) {
      seq->req.deadline = seq->req.arrival + std::chrono::milliseconds(options_.default_timeout_ms);
    }
    queued_requests_ += 1;
    queued_tokens_ += prompt_len;
    live_[handle] = true;
    inbox_.push_back(std::move(seq));
  }
  cv_.notify_one();
  return handle;
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

BatcherSnapshot ContinuousBatcher::Snapshot() const {
  BatcherSnapshot s;
  s.running = running_count_.load();
  s.waiting = waiting_count_.load();
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.waiting_tokens = queued_tokens_;
  }
  s.kv_free_blocks = free_blocks_.load();
  s.kv_blocks = cache_.num_blocks();
  s.steps = steps_.load();
  s.preemptions = preemptions_.load();
  return s;
}

void ContinuousBatcher::Loop() {
  const std::string thread_name = ("sched:" + name_).substr(0, 15);
  pthread_setname_np(pthread_self(), thread_name.c_str());
  for (;;) {
    TakeInbox();
    ExpireDeadlines();
    bool stopping;
    Clock::time_point deadline;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping = stop_;
      deadline = stop_deadline_;
    }
    if (stopping && (seqs_.empty() || Clock::now() >= deadline)) {
      TakeInbox();  // a request submitted just before Stop is cancelled with the rest
      std::vector<uint64_t> left;
      for (auto& [handle, seq] : seqs_) left.push_back(handle);
      for (uint64_t h : left) Finish(*seqs_.at(h), FinishReason::kAbort);
      UpdateCounters();
      return;
    }
    if (seqs_.empty()) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(100),
                   [this] { return stop_ || !inbox_.empty() || !cancels_.empty(); });
      continue;
    }
    if (!RunIteration()) {
      // Nothing could be scheduled (every running sequence blocked): wait briefly for a
      // cancellation or a deadline to change the picture.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(5), [this] { return stop_ || !cancels_.empty(); });
    }
  }
}

void ContinuousBatcher::TakeInbox() {
  std::deque<std::unique_ptr<Seq>> arrivals;
  std::vector<uint64_t> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    arrivals.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (auto& seq : arrivals) {
    seq->arrival_order = arrival_counter_++;
    const uint64_t h = seq->handle;
    waiting_.push_back(h);
    seqs_.emplace(h, std::move(seq));
  }
  for (uint64_t h : cancels) {
    auto it = seqs_.find(h);
    if (it != seqs_.end()) Finish(*it->second, FinishReason::kAbort);
  }
  UpdateCounters();
}

void ContinuousBatcher::ExpireDeadlines() {
  const Clock::time_point now = Clock::now();
  std::vector<Seq*> expired;
  for (auto& [handle, seq] : seqs_) {
    if (seq->req.deadline && now >= *seq->req.deadline) expired.push_back(seq.get());
  }
  for (Seq* s : expired) Fail(*s, DeadlineExceeded("request timed out"), "timeout");
}

bool ContinuousBatcher::RunIteration() {
  PlanInput in;
  in.free_blocks = cache_.num_free_blocks();
  in.block_tokens = cache_.config().block_tokens;
  in.max_num_seqs = options_.max_num_seqs;
  in.token_budget = options_.max_num_batched_tokens;
  auto view = [this](const Seq& s) {
    SeqView v;
    v.handle = s.handle;
    v.priority = s.req.priority;
    v.arrival = s.arrival_order;
    v.num_tokens = static_cast<int32_t>(s.tokens.size());
    v.num_computed = s.num_computed;
    v.blocks_held = static_cast<int32_t>(cache_.BlockTable(static_cast<int64_t>(s.handle)).size());
    return v;
  };
  for (uint64_t h : running_) in.running.push_back(view(*seqs_.at(h)));
  for (uint64_t h : waiting_) in.waiting.push_back(view(*seqs_.at(h)));
  const Decision d = PlanStep(in);

  for (uint64_t h : d.preempted) {
    Seq& s = *seqs_.at(h);
    cache_.Free(static_cast<int64_t>(h));
    s.num_computed = 0;
    s.state = RequestState::kQueued;
    running_.erase(std::remove(running_.begin(), running_.end(), h), running_.end());
    waiting_.push_front(h);
    std::lock_guard<std::mutex> lock(mu_);
    queued_requests_ += 1;
    queued_tokens_ += static_cast<int64_t>(s.tokens.size());
  }
  if (!d.preempted.empty()) {
    preemptions_ += d.preempted.size();
    if (observer_ != nullptr) observer_->OnPreemption(static_cast<int>(d.preempted.size()));
    FERRY_LOG_DEBUG("{}: preempted {} sequences (recompute)", name_, d.preempted.size());
  }
  for (uint64_t h : d.admitted) {
    Seq& s = *seqs_.at(h);
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), h));
    running_.push_back(h);
    s.state = RequestState::kRunning;
    std::lock_guard<std::mutex> lock(mu_);
    queued_requests_ -= 1;
    queued_tokens_ -= static_cast<int64_t>(s.tokens.size());
  }
  UpdateCounters();
  if (d.steps.empty()) return false;

  std::vector<Seq*> seqs;
  std::vector<int32_t> counts;
  for (const ScheduledStep& st : d.steps) {
    seqs.push_back(seqs_.at(st.handle).get());
    counts.push_back(st.num_new_tokens);
  }
  const Clock::time_point t0 = Clock::now();
  Tensor logits;
  Status status = RunSteps(seqs, counts, logits);
  if (!status.ok() && seqs.size() > 1) {
    // Fault isolation: rerun each request alone so only the bad one fails.
    FERRY_LOG_WARN("{}: step of {} sequences failed ({}); retrying each alone", name_, seqs.size(),
                   status.message());
    for (size_t i = 0; i < seqs.size(); ++i) {
      Tensor one;
      Status st = RunSteps({seqs[i]}, {counts[i]}, one);
      if (!st.ok()) Fail(*seqs[i], st, "engine_error");
    }
  } else if (!status.ok()) {
    Fail(*seqs[0], status, "engine_error");
  }
  steps_ += 1;
  if (observer_ != nullptr) {
    StepStats stats;
    stats.num_seqs = static_cast<int>(seqs.size());
    stats.num_tokens = d.tokens;
    stats.seconds = Seconds(Clock::now() - t0);
    stats.running = static_cast<int>(running_.size());
    stats.waiting = static_cast<int>(waiting_.size());
    stats.kv_usage = 1.0 - static_cast<double>(cache_.num_free_blocks()) / std::max(1, cache_.num_blocks());
    observer_->OnStep(stats);
  }
  UpdateCounters();
  return true;
}

// Runs one step over `seqs` and consumes its logits: sampling, streaming, finishing.
Status ContinuousBatcher::RunSteps(const std::vector<Seq*>& seqs, const std::vector<int32_t>& counts,
                                   Tensor& logits) {
  std::vector<engine::SeqStep> steps(seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = *seqs[i];
    engine::SeqStep& st = steps[i];
    st.seq_id = static_cast<int64_t>(s.handle);
    st.start_pos = s.num_computed;
    st.tokens = std::span<const int32_t>(s.tokens.data() + s.num_computed, counts[i]);
    st.all_logits = s.req.prompt_logprobs && !s.prompt_logprobs_done && s.num_computed < s.prompt_len;
  }
  // Where the logits live on a GPU and nobody asked for log-probabilities, tokens are sampled
  // there and only their ids come back.
  const bool device_sampling =
      !custom_step_ && executor_.model().backend().samples_on_device() &&
      std::none_of(seqs.begin(), seqs.end(), [](const Seq* s) { return s->req.logprobs >= 0; }) &&
      std::none_of(steps.begin(), steps.end(), [](const engine::SeqStep& st) { return st.all_logits; });
  if (device_sampling) {
    sampling_.resize(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      const Seq& s = *seqs[i];
      const engine::SamplingParams& sp = s.req.sampling;
      sampling_[i] = backend::TokenSampling{sp.temperature, sp.top_k, sp.top_p, sp.min_p, sp.repetition_penalty,
                                            s.seed, static_cast<uint64_t>(s.generated), std::span(s.tokens)};
    }
    Result<std::vector<int32_t>> sampled = [&]() -> Result<std::vector<int32_t>> {
      try {
        return executor_.StepAndSample(steps, sampling_);
      } catch (const std::exception& e) {
        return Internal(std::string("step failed: ") + e.what());
      }
    }();
    if (!sampled.ok()) return sampled.status();
    for (size_t i = 0; i < seqs.size(); ++i) {
      Seq& s = *seqs[i];
      s.num_computed += counts[i];
      if (s.num_computed < static_cast<int32_t>(s.tokens.size())) continue;  // mid-prefill chunk
      const int32_t next = (*sampled)[i];
      if (next < 0) {
        Fail(s, Internal("the model produced non-finite logits for this request"), "nonfinite_logits");
        continue;
      }
      Emit(s, next, {});
    }
    return Status::Ok();
  }
  Result<Tensor> result = [&]() -> Result<Tensor> {
    try {
      return step_(steps);
    } catch (const std::exception& e) {
      return Internal(std::string("step failed: ") + e.what());
    }
  }();
  if (!result.ok()) return result.status();
  logits = std::move(result).value();
  const float* rows = logits.data<float>();
  const int V = vocab_size_;
  int64_t row = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = *seqs[i];
    const int32_t n = counts[i];
    const int32_t first = s.num_computed;
    s.num_computed += n;
    const bool has_all = steps[i].all_logits;
    const int64_t nrows = has_all ? n : 1;
    const float* last = rows + (row + nrows - 1) * V;
    if (has_all) {
      // Row for position q scores prompt token q + 1.
      if (s.pending_prompt.empty()) s.pending_prompt.push_back(TokenOutput{s.tokens[0], 0.0f, {}});
      for (int32_t q = first; q < first + n; ++q) {
        if (q + 1 >= s.prompt_len) break;
        std::span<const float> r(rows + (row + (q - first)) * V, V);
        s.pending_prompt.push_back(MakeTokenOutput(s.tokens[q + 1], r, std::max(0, s.req.logprobs), logprob_scratch_));
      }
    }
    row += nrows;
    if (s.num_computed < static_cast<int32_t>(s.tokens.size())) continue;  // mid-prefill chunk
    std::span<const float> r(last, V);
    if (!AllFinite(r)) {
      Fail(s, Internal("the model produced non-finite logits for this request"), "nonfinite_logits");
      continue;
    }
    Emit(s, s.sampler.Sample(r, s.req.sampling, s.tokens), r);
  }
  return Status::Ok();
}

void ContinuousBatcher::Emit(Seq& s, int32_t next, std::span<const float> row) {
  GenerationEvent ev;
  ev.tokens.push_back(MakeTokenOutput(next, row, s.req.logprobs, logprob_scratch_));
  s.tokens.push_back(next);
  s.generated += 1;
  const bool eos = !s.req.ignore_eos &&
                   std::find(s.req.stop_ids.begin(), s.req.stop_ids.end(), next) != s.req.stop_ids.end();
  if (eos) {
    ev.finished = true;
    ev.finish_reason = FinishReason::kStop;
  } else if (s.generated >= s.req.max_tokens || static_cast<int>(s.tokens.size()) >= max_seq_len_) {
    ev.finished = true;
    ev.finish_reason = FinishReason::kLength;
  }
  Deliver(s, ev);
}

void ContinuousBatcher::Deliver(Seq& s, GenerationEvent& ev) {
  if (!s.started) {
    s.started = true;
    ev.queue_seconds = Seconds(Clock::now() - s.req.arrival);
  }
  if (!s.pending_prompt.empty() && !s.prompt_logprobs_done) {
    ev.prompt_tokens = std::move(s.pending_prompt);
    s.pending_prompt.clear();
  }
  if (s.req.prompt_logprobs && !ev.tokens.empty()) s.prompt_logprobs_done = true;
  ev.prompt_tokens_count = s.prompt_len;
  ev.generated_tokens_count = s.generated;
  EventAction action = EventAction::kContinue;
  try {
    action = s.req.on_event(ev);
  } catch (const std::exception& e) {
    FERRY_LOG_ERROR("{}: event handler of request {} threw: {}", name_, s.req.id, e.what());
    action = EventAction::kStop;
  }
  if (ev.finished) {
    Remove(s.handle);
    return;
  }
  if (action == EventAction::kStop) Finish(s, FinishReason::kStop);
}

void ContinuousBatcher::Finish(Seq& s, FinishReason reason) {
  GenerationEvent ev;
  ev.finished = true;
  ev.finish_reason = reason;
  Deliver(s, ev);
}

void ContinuousBatcher::Fail(Seq& s, const Status& error, const std::string& reason) {
  GenerationEvent ev;
  ev.finished = true;
  ev.finish_reason = FinishReason::kAbort;
  ev.error = error;
  ev.failure_reason = reason;
  Deliver(s, ev);
}

// Frees everything the request holds; `s` is destroyed.
void ContinuousBatcher::Remove(uint64_t handle) {
  auto it = seqs_.find(handle);
  if (it == seqs_.end()) return;
  Seq& s = *it->second;
  cache_.Free(static_cast<int64_t>(handle));
  running_.erase(std::remove(running_.begin(), running_.end(), handle), running_.end());
  auto w = std::find(waiting_.begin(), waiting_.end(), handle);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (w != waiting_.end()) {
      queued_requests_ -= 1;
      queued_tokens_ -= static_cast<int64_t>(s.tokens.size());
    }
    live_.erase(handle);
  }
  if (w != waiting_.end()) waiting_.erase(w);
  seqs_.erase(it);
}

void ContinuousBatcher::UpdateCounters() {
  running_count_ = static_cast<int>(running_.size());
  waiting_count_ = static_cast<int>(waiting_.size());
  free_blocks_ = cache_.num_free_blocks();
}

}  // namespace ferry::sched
