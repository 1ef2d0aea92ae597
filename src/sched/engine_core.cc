#include "sched/engine_core.h"

#include <algorithm>
#include <exception>

#include "core/logging.h"
#include "sched/kv_sizing.h"

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

}  // namespace

Result<std::unique_ptr<EngineCore>> EngineCore::Create(std::string name, std::shared_ptr<engine::Engine> engine,
                                                       const EngineCoreOptions& options) {
  if (engine == nullptr || !engine->is_decoder()) return InvalidArgument("an engine core needs a decoder engine");
  FERRY_RETURN_IF_ERROR(options.batching.Validate());
  std::unique_ptr<EngineCore> core(new EngineCore());
  core->name_ = std::move(name);
  core->engine_ = std::move(engine);
  core->options_ = options.batching;
  const io::ModelConfig& c = core->engine_->config();
  int max_seq = options.batching.max_seq_len;
  if (max_seq <= 0 && core->engine_->build_info() != nullptr) {
    max_seq = core->engine_->build_info()->max_seq_len;
  }
  if (max_seq <= 0) max_seq = std::min(c.max_position_embeddings, 4096);
  max_seq = std::min(max_seq, c.max_position_embeddings);
  core->max_seq_len_ = max_seq;
  core->options_.max_seq_len = max_seq;
  core->vocab_size_ = c.vocab_size;

  const int kv_seqs = options.kv_seqs > 0 ? options.kv_seqs : options.batching.max_num_seqs;
  engine::KvCacheConfig kc;
  kc.num_layers = c.num_layers;
  kc.num_kv_heads = c.num_kv_heads;
  kc.head_dim = c.head_dim;
  kc.block_tokens = options.batching.kv_block_tokens;
  kc.dtype = core->engine_->backend().kv_cache_dtype();
  // max_num_seqs sequences of max_seq_len, or what the memory budget leaves (kv_sizing.h).
  KvSizingOptions sizing;
  sizing.gpu_memory_utilization = options.gpu_memory_utilization;
  sizing.host_memory_budget_bytes = options.host_memory_budget_bytes;
  sizing.default_seqs = kv_seqs;
  FERRY_ASSIGN_OR_RETURN(const KvBudgetDecision kv,
                         SizeKvCache(core->name_, *core->engine_, kc, options.batching, max_seq, sizing));
  kc.num_blocks = kv.blocks;
  kc.prefix_caching = options.batching.enable_prefix_caching;
  FERRY_ASSIGN_OR_RETURN(core->cache_, engine::KvCache::Create(kc, core->engine_->backend()));
  core->executor_ = std::make_unique<engine::StepExecutor>(*core->engine_->decoder(), *core->cache_);
  const AsyncScheduling async = options.batching.async_scheduling;
  core->async_ = async == AsyncScheduling::kOn ||
                 (async == AsyncScheduling::kAuto && core->engine_->backend().samples_on_device() &&
                  core->engine_->backend().patches_step_tokens());
  if (options.step_graphs) {
    core->executor_->SetGraphOptions(
        engine::StepGraphOptions{std::min(kv_seqs, options.batching.max_num_seqs), max_seq});
  }
  return core;
}

EngineCore::~EngineCore() {
  // Blocks go back before the cache dies (nothing observable, but the invariant holds).
  for (auto& [handle, seq] : seqs_) cache_->Free(static_cast<int64_t>(handle));
}

Status EngineCore::Validate(const GenerationRequest& request) const {
  const int64_t prompt_len = static_cast<int64_t>(request.prompt.size());
  if (prompt_len == 0) return InvalidArgument("the prompt is empty");
  if (request.max_tokens < 1) return InvalidArgument("max_tokens must be at least 1");
  if (request.min_tokens < 0 || request.min_tokens > request.max_tokens) {
    return InvalidArgument("min_tokens must be between 0 and max_tokens");
  }
  for (const auto& [id, bias] : request.sampling.logit_bias) {
    if (id >= vocab_size_) {
      return InvalidArgument("logit_bias token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                             std::to_string(vocab_size_) + ")");
    }
  }
  for (int32_t id : request.stop_token_ids) {
    if (id < 0 || id >= vocab_size_) {
      return InvalidArgument("stop_token_ids: " + std::to_string(id) + " is outside the vocabulary [0, " +
                             std::to_string(vocab_size_) + ")");
    }
  }
  FERRY_RETURN_IF_ERROR(request.sampling.Validate());
  if (request.grammar && request.grammar->vocab().size() != vocab_size_) {
    return InvalidArgument("the structured-output grammar was made for a vocabulary of " +
                           std::to_string(request.grammar->vocab().size()) + " ids; this model has " +
                           std::to_string(vocab_size_));
  }
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
  return Status::Ok();
}

void EngineCore::Add(uint64_t handle, GenerationRequest request) {
  auto seq = std::make_unique<Seq>();
  seq->handle = handle;
  seq->arrival_order = arrival_counter_++;
  seq->prompt_len = static_cast<int32_t>(request.prompt.size());
  seq->tokens = request.prompt;
  seq->seed = request.sampling.seed.value_or(handle * 0x9E3779B97F4A7C15ull);
  if (!request.ignore_eos) seq->stop_set = request.stop_ids;
  seq->stop_set.insert(seq->stop_set.end(), request.stop_token_ids.begin(), request.stop_token_ids.end());
  if (request.grammar) seq->grammar_state = request.grammar->initial();
  const engine::SamplingParams& sp = request.sampling;
  seq->host_bound = request.grammar != nullptr || request.prompt_logprobs || request.keep_logits ||
                    sp.repetition_penalty != 1.0f || sp.presence_penalty != 0.0f || sp.frequency_penalty != 0.0f;
  if (seq->host_bound) ++host_bound_;
  if (options_.default_timeout_ms > 0 && !request.deadline) {
    request.deadline = request.arrival + std::chrono::milliseconds(options_.default_timeout_ms);
  }
  seq->req = std::move(request);
  waiting_tokens_ += seq->prompt_len;
  waiting_.push_back(handle);
  seqs_.emplace(handle, std::move(seq));
}

GenerationEvent& EngineCore::NewEvent(Seq& s, std::vector<GenerationEvent>& out) {
  GenerationEvent& ev = out.emplace_back();
  ev.handle = s.handle;
  if (!s.started) {
    s.started = true;
    ev.queue_seconds = Seconds(Clock::now() - s.req.arrival);
  }
  if (!s.pending_prompt.empty() && !s.prompt_logprobs_done) {
    ev.prompt_tokens = std::move(s.pending_prompt);
    s.pending_prompt.clear();
  }
  ev.prompt_tokens_count = s.prompt_len;
  return ev;
}

bool EngineCore::Finish(uint64_t handle, FinishReason reason, std::vector<GenerationEvent>& out, const Status& error,
                        const std::string& failure_reason) {
  auto it = seqs_.find(handle);
  if (it == seqs_.end()) return false;
  Seq& s = *it->second;
  GenerationEvent& ev = NewEvent(s, out);
  ev.finished = true;
  ev.finish_reason = reason;
  ev.error = error;
  ev.failure_reason = failure_reason;
  ev.generated_tokens_count = s.generated;
  Remove(handle);
  return true;
}

void EngineCore::Fail(Seq& s, const Status& error, const std::string& reason, std::vector<GenerationEvent>& out) {
  Finish(s.handle, FinishReason::kAbort, out, error, reason);
}

void EngineCore::ExpireDeadlines(Clock::time_point now, std::vector<GenerationEvent>& out) {
  std::vector<uint64_t> expired;
  std::vector<uint64_t> waited_too_long;
  const auto max_wait = std::chrono::milliseconds(options_.max_queue_time_ms);
  for (auto& [handle, seq] : seqs_) {
    if (seq->req.deadline && now >= *seq->req.deadline) {
      expired.push_back(handle);
    } else if (options_.max_queue_time_ms > 0 && !seq->admitted_once && now - seq->req.arrival > max_wait) {
      waited_too_long.push_back(handle);
    }
  }
  for (uint64_t h : expired) Finish(h, FinishReason::kAbort, out, DeadlineExceeded("request timed out"), "timeout");
  const Status overloaded = ResourceExhausted(
      "the request waited longer than max_queue_time_ms (" + std::to_string(options_.max_queue_time_ms) +
      " ms) for model '" + name_ + "' to start it: the server is overloaded, retry later");
  for (uint64_t h : waited_too_long) Finish(h, FinishReason::kAbort, out, overloaded, "queue_timeout");
}

std::vector<std::pair<uint64_t, GenerationRequest>> EngineCore::TakeUnstarted(
    const std::function<bool(const GenerationRequest&)>& movable) {
  std::vector<std::pair<uint64_t, GenerationRequest>> out;
  const std::vector<uint64_t> waiting(waiting_.begin(), waiting_.end());
  for (uint64_t h : waiting) {
    Seq& s = *seqs_.at(h);
    if (s.admitted_once || s.started || !movable(s.req)) continue;
    out.emplace_back(h, std::move(s.req));
    Remove(h);
  }
  return out;
}

void EngineCore::Remove(uint64_t handle) {
  auto it = seqs_.find(handle);
  if (it == seqs_.end()) return;
  cache_->Free(static_cast<int64_t>(handle));
  if (it->second->host_bound) --host_bound_;
  running_.erase(std::remove(running_.begin(), running_.end(), handle), running_.end());
  auto w = std::find(waiting_.begin(), waiting_.end(), handle);
  if (w != waiting_.end()) {
    waiting_tokens_ -= static_cast<int64_t>(it->second->tokens.size());
    waiting_.erase(w);
  }
  seqs_.erase(it);
}

LoadState EngineCore::load() const {
  LoadState s;
  s.running = static_cast<int>(running_.size());
  s.waiting = static_cast<int>(waiting_.size());
  s.kv_usage = 1.0 - static_cast<double>(cache_->num_free_blocks()) / std::max(1, cache_->num_blocks());
  return s;
}

std::optional<Clock::time_point> EngineCore::NextDeadline() const {
  std::optional<Clock::time_point> next;
  for (const auto& [handle, seq] : seqs_) {
    if (seq->req.deadline && (!next || *seq->req.deadline < *next)) next = seq->req.deadline;
  }
  return next;
}

bool EngineCore::Prefilling() const {
  for (uint64_t h : running_) {
    auto it = seqs_.find(h);
    if (it == seqs_.end()) continue;
    const Seq& s = *it->second;
    const size_t known = s.tokens.size() + static_cast<size_t>(s.in_flight);
    if (s.generated + s.in_flight == 0 || static_cast<size_t>(s.num_computed) + 1 < known) return true;
  }
  return false;
}

Decision EngineCore::Plan(PlanInput& in) {
  in.free_blocks = cache_->num_free_blocks();
  in.block_tokens = cache_->config().block_tokens;
  in.max_num_seqs = options_.max_num_seqs;
  StepBudgetInput budget;
  budget.max_num_batched_tokens = options_.max_num_batched_tokens;
  budget.max_step_ms = options_.max_step_ms;
  budget.auto_factor = options_.max_step_factor;
  budget.block_tokens = in.block_tokens;
  budget.prefill_pending = !waiting_.empty();
  auto view = [this](const Seq& s) {
    SeqView v;
    v.handle = s.handle;
    v.priority = s.req.priority;
    v.arrival = s.arrival_order;
    v.sibling = s.req.sibling;
    v.num_tokens = static_cast<int32_t>(s.tokens.size()) + s.in_flight;
    v.num_computed = s.num_computed;
    v.blocks_held = static_cast<int32_t>(cache_->BlockTable(static_cast<int64_t>(s.handle)).size());
    return v;
  };
  for (uint64_t h : running_) {
    const Seq& s = *seqs_.at(h);
    if (s.in_flight > 0 && (s.generated + s.in_flight >= s.req.max_tokens ||
                            static_cast<int>(s.tokens.size()) + s.in_flight >= max_seq_len_)) {
      continue;  // its last token is in flight
    }
    const SeqView v = view(s);
    const int64_t left = v.num_tokens - v.num_computed;
    if (left == 1) ++budget.decodes;
    if (left > 1) budget.prefill_pending = true;
    in.running.push_back(v);
  }
  in.token_budget = StepTokenBudget(step_time_, budget);
  for (uint64_t h : waiting_) {
    Seq& s = *seqs_.at(h);
    SeqView v = view(s);
    s.prefix_blocks = 0;
    // Requests that want every prompt row's logits (echo with logprobs, kept logits) compute
    // their whole prompt; the others start after the longest cached prefix, leaving at least
    // the last token to compute (its logits pick the first new token).
    if (cache_->prefix_caching() && !s.req.prompt_logprobs && !s.req.keep_logits) {
      cache_->HashBlocks(s.tokens, s.block_hashes);
      const int max_blocks = (static_cast<int>(s.tokens.size()) - 1) / in.block_tokens;
      const engine::PrefixMatch m = cache_->FindCachedPrefix(s.block_hashes, s.tokens, max_blocks);
      s.prefix_blocks = m.blocks;
      v.num_computed = m.blocks * in.block_tokens;
      v.cached_free_blocks = m.free_blocks;
    }
    in.waiting.push_back(v);
  }
  return PlanStep(in);
}

void EngineCore::Admit(const Decision& d) {
  for (uint64_t h : d.admitted) {
    Seq& s = *seqs_.at(h);
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), h));
    running_.push_back(h);
    s.state = RequestState::kRunning;
    waiting_tokens_ -= static_cast<int64_t>(s.tokens.size());
    if (!s.admitted_once) {
      s.admitted_once = true;
      ++admitted_;
    }
    if (!cache_->prefix_caching()) continue;
    if (s.prefix_blocks > 0) {
      const Status adopted = cache_->AdoptPrefix(static_cast<int64_t>(h), s.block_hashes, s.tokens, s.prefix_blocks);
      if (adopted.ok()) {
        s.num_computed = s.prefix_blocks * cache_->config().block_tokens;
      } else {
        FERRY_LOG_WARN("{}: cached prefix not taken ({}); computing it", name_, adopted.message());
      }
    }
    prefix_queried_ += static_cast<int64_t>(s.tokens.size());
    prefix_hits_ += s.num_computed;
    if (observer_ != nullptr) observer_->OnPrefixCache(static_cast<int64_t>(s.tokens.size()), s.num_computed);
  }
}

void EngineCore::ReportStep(int seqs, int tokens, int token_budget, double seconds) {
  if (observer_ == nullptr) return;
  StepStats stats;
  stats.num_seqs = seqs;
  stats.num_tokens = tokens;
  stats.token_budget = token_budget;
  stats.seconds = seconds;
  stats.running = static_cast<int>(running_.size());
  stats.waiting = static_cast<int>(waiting_.size());
  stats.kv_usage = 1.0 - static_cast<double>(cache_->num_free_blocks()) / std::max(1, cache_->num_blocks());
  observer_->OnStep(stats);
}

bool EngineCore::Step(std::vector<GenerationEvent>& out) {
  if (!async_ || synchronous_ || step_ || host_bound_ > 0) {
    // A request that needs the host between tokens (or an injected step function): the
    // launched steps are collected first, then steps run one at a time.
    const bool collected = DrainLaunched(out);
    return StepSync(out) || collected;
  }
  return StepAsync(out);
}

bool EngineCore::StepSync(std::vector<GenerationEvent>& out) {
  PlanInput in;
  const Decision d = Plan(in);

  for (uint64_t h : d.preempted) {
    Seq& s = *seqs_.at(h);
    cache_->Free(static_cast<int64_t>(h));
    s.num_computed = 0;
    s.state = RequestState::kQueued;
    running_.erase(std::remove(running_.begin(), running_.end(), h), running_.end());
    waiting_.push_front(h);
    waiting_tokens_ += static_cast<int64_t>(s.tokens.size());
  }
  if (!d.preempted.empty()) {
    preemptions_ += d.preempted.size();
    if (observer_ != nullptr) observer_->OnPreemption(static_cast<int>(d.preempted.size()));
    FERRY_LOG_DEBUG("{}: preempted {} sequences (recompute)", name_, d.preempted.size());
  }
  Admit(d);
  if (d.steps.empty()) return false;

  // The scheduler owns the KV accounting: blocks for this step are reserved here, before the
  // executor runs (the plan made sure they are free).
  std::vector<Seq*> seqs;
  std::vector<int32_t> counts;
  for (const ScheduledStep& st : d.steps) {
    Seq& s = *seqs_.at(st.handle);
    Status reserved = cache_->Reserve(static_cast<int64_t>(s.handle), s.num_computed + st.num_new_tokens);
    if (!reserved.ok()) {
      Fail(s, Internal("KV blocks planned for the step could not be reserved: " + reserved.message()),
           "engine_error", out);
      continue;
    }
    seqs.push_back(&s);
    counts.push_back(st.num_new_tokens);
  }
  if (seqs.empty()) return true;
  const Clock::time_point t0 = Clock::now();
  Status status = RunSteps(seqs, counts, out);
  if (!status.ok() && seqs.size() > 1) {
    // Fault isolation: rerun each request alone so only the bad one fails.
    FERRY_LOG_WARN("{}: step of {} sequences failed ({}); retrying each alone", name_, seqs.size(),
                   status.message());
    for (size_t i = 0; i < seqs.size(); ++i) {
      Status st = RunSteps({seqs[i]}, {counts[i]}, out);
      if (!st.ok()) Fail(*seqs[i], st, "engine_error", out);
    }
  } else if (!status.ok()) {
    Fail(*seqs[0], status, "engine_error", out);
  }
  steps_ += 1;
  const double seconds = Seconds(Clock::now() - t0);
  if (status.ok()) step_time_.Add(d.tokens, seconds);
  ReportStep(static_cast<int>(seqs.size()), d.tokens, in.token_budget, seconds);
  return true;
}

bool EngineCore::StepAsync(std::vector<GenerationEvent>& out) {
  PlanInput in;
  const Decision d = Plan(in);
  if (!d.preempted.empty()) {
    // Preemption frees blocks a launched step may still be writing for sequences whose
    // tokens are not known yet: collect first, and plan again.
    const bool collected = DrainLaunched(out);
    return StepSync(out) || collected;
  }
  Admit(d);
  if (d.steps.empty()) {
    if (launched_.empty()) return false;
    CollectLaunched(out);
    return true;
  }
  LaunchedStep l;
  std::vector<engine::SeqStep>& steps = step_scratch_;
  steps.clear();
  for (const ScheduledStep& st : d.steps) {
    Seq& s = *seqs_.at(st.handle);
    Status reserved = cache_->Reserve(static_cast<int64_t>(s.handle), s.num_computed + st.num_new_tokens);
    if (reserved.ok() && s.in_flight > 0 && st.num_new_tokens != 1) {
      reserved = Internal("a sequence with a token in flight was planned " + std::to_string(st.num_new_tokens) +
                          " tokens");
    }
    if (!reserved.ok()) {
      Fail(s, Internal("KV blocks planned for the step could not be reserved: " + reserved.message()),
           "engine_error", out);
      continue;
    }
    engine::SeqStep& row = steps.emplace_back();
    row.seq_id = static_cast<int64_t>(s.handle);
    row.start_pos = s.num_computed;
    if (s.in_flight > 0) {
      row.tokens = std::span<const int32_t>(&kPlaceholder, 1);
      row.from_previous = s.launch_row;
    } else {
      row.tokens = std::span<const int32_t>(s.tokens.data() + s.num_computed, st.num_new_tokens);
    }
    row.sample = s.num_computed + st.num_new_tokens == static_cast<int32_t>(s.tokens.size()) + s.in_flight;
    FillSampling(s, row);
    l.handles.push_back(s.handle);
    l.orders.push_back(s.arrival_order);
    l.starts.push_back(s.num_computed);
    l.counts.push_back(st.num_new_tokens);
    l.sample.push_back(row.sample ? 1 : 0);
  }
  if (steps.empty()) return true;
  l.tokens = d.tokens;
  l.token_budget = in.token_budget;
  l.launched_at = Clock::now();
  Status launched;
  try {
    launched = executor_->Launch(steps);
  } catch (const std::exception& e) {
    launched = Internal(std::string("step failed: ") + e.what());
  }
  if (!launched.ok()) {
    // Nothing of this step was queued: collect what is in flight and run it synchronously
    // (which isolates a failing request).
    FERRY_LOG_WARN("{}: launching a step of {} sequences failed ({}); running it synchronously", name_,
                   steps.size(), launched.message());
    const bool collected = DrainLaunched(out);
    return StepSync(out) || collected;
  }
  for (size_t i = 0; i < l.handles.size(); ++i) {
    Seq& s = *seqs_.at(l.handles[i]);
    s.num_computed += l.counts[i];
    s.launch_row = l.sample[i] ? static_cast<int32_t>(i) : -1;
    if (l.sample[i]) s.in_flight += 1;
  }
  launched_.push_back(std::move(l));
  // The step before this one has been running all along: its results now.
  if (launched_.size() > 1) CollectLaunched(out);
  return true;
}

bool EngineCore::DrainLaunched(std::vector<GenerationEvent>& out) {
  const bool any = !launched_.empty();
  while (!launched_.empty()) CollectLaunched(out);
  return any;
}

void EngineCore::CollectLaunched(std::vector<GenerationEvent>& out) {
  LaunchedStep l = std::move(launched_.front());
  launched_.pop_front();
  Result<std::vector<engine::SeqResult>> result = executor_->Collect();
  const Clock::time_point now = Clock::now();
  // The device ran this step from when it was launched or the previous one ended, whichever
  // was later.
  const double seconds = Seconds(now - std::max(l.launched_at, last_collect_));
  last_collect_ = now;
  auto alive = [this](const LaunchedStep& step, size_t i) -> Seq* {
    auto it = seqs_.find(step.handles[i]);
    return it != seqs_.end() && it->second->arrival_order == step.orders[i] ? it->second.get() : nullptr;
  };
  if (!result.ok() || result->size() != l.handles.size()) {
    // The step failed on the device: what is still in flight is dropped, and its sequences
    // go back to where they were before it, for the next (synchronous, isolating) step.
    const Status error = result.ok() ? Internal("the step returned the wrong number of results") : result.status();
    FERRY_LOG_WARN("{}: a launched step of {} sequences failed ({}); running it again", name_, l.handles.size(),
                   error.message());
    executor_->Drain();
    launched_.push_front(std::move(l));
    for (const LaunchedStep& step : launched_) {
      for (size_t i = 0; i < step.handles.size(); ++i) {
        if (Seq* s = alive(step, i)) {
          s->num_computed = std::min(s->num_computed, step.starts[i]);
          s->in_flight = 0;
          s->launch_row = -1;
        }
      }
    }
    launched_.clear();
    return;
  }
  std::vector<engine::SeqResult>& results = result.value();
  for (size_t i = 0; i < l.handles.size(); ++i) {
    Seq* s = alive(l, i);
    if (s == nullptr) continue;  // finished (or cancelled) while this step ran: its row is dropped
    if (l.sample[i]) s->in_flight -= 1;
    if (cache_->prefix_caching()) {
      cache_->HashBlocks(s->tokens, s->block_hashes);
      cache_->CacheFullBlocks(static_cast<int64_t>(s->handle), s->block_hashes, s->tokens,
                              l.starts[i] + l.counts[i]);
    }
    if (!l.sample[i]) continue;  // a prefill chunk
    TakeToken(*s, results[i], out);
  }
  steps_ += 1;
  step_time_.Add(l.tokens, seconds);
  ReportStep(static_cast<int>(l.handles.size()), l.tokens, l.token_budget, seconds);
}

void EngineCore::FillSampling(const Seq& s, engine::SeqStep& st) const {
  const int32_t generated = s.generated + s.in_flight;
  st.logprobs = s.req.logprobs;
  st.keep_logits = s.req.keep_logits;
  const engine::SamplingParams& sp = s.req.sampling;
  st.sampling = backend::TokenSampling();
  st.sampling.temperature = sp.greedy() ? 0.0f : sp.temperature;
  st.sampling.top_k = sp.top_k;
  st.sampling.top_p = sp.top_p;
  st.sampling.min_p = sp.min_p;
  st.sampling.repetition_penalty = sp.repetition_penalty;
  st.sampling.seed = s.seed;
  st.sampling.counter = static_cast<uint64_t>(generated);
  st.sampling.history = std::span<const int32_t>(s.tokens);
  st.sampling.presence_penalty = sp.presence_penalty;
  st.sampling.frequency_penalty = sp.frequency_penalty;
  st.sampling.logit_bias = sp.logit_bias;
  if (generated < s.req.min_tokens) st.sampling.banned = s.stop_set;
}

// The row's allowed ids from its grammar state's mask (s.mask), plus the stop ids where the
// output is complete.
void EngineCore::ApplyMask(Seq& s, engine::SeqStep& st) {
  const structured::TokenMask& m = *s.mask;
  if (m.accepting && m.allowed == 0) {
    s.grammar_ended = true;  // this step's token will not be taken: leave the row unmasked
    return;
  }
  st.sampling.allowed = m.words;
  if (m.accepting && !s.stop_set.empty()) {
    // The output is complete here: the stop ids may end it.
    s.mask_words.assign(m.words.begin(), m.words.end());
    for (int32_t id : s.stop_set) s.mask_words[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
    st.sampling.allowed = s.mask_words;
  }
  s.grammar_stuck = m.allowed == 0;
}

Status EngineCore::RunSteps(const std::vector<Seq*>& seqs, const std::vector<int32_t>& counts,
                            std::vector<GenerationEvent>& out) {
  std::vector<engine::SeqStep>& steps = step_scratch_;
  steps.assign(seqs.size(), engine::SeqStep{});
  std::vector<size_t> unmasked;  // rows whose grammar state's mask is not known yet
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = *seqs[i];
    engine::SeqStep& st = steps[i];
    const int32_t first = s.num_computed;
    st.seq_id = static_cast<int64_t>(s.handle);
    st.start_pos = first;
    st.tokens = std::span<const int32_t>(s.tokens.data() + first, counts[i]);
    if (s.req.prompt_logprobs && !s.prompt_logprobs_done && first + 1 < s.prompt_len) {
      // Row q scores prompt token q + 1.
      const int32_t n = std::min(counts[i], s.prompt_len - 1 - first);
      st.targets = std::span<const int32_t>(s.tokens.data() + first + 1, n);
      st.top_logprobs = std::max(0, s.req.logprobs);
    }
    st.sample = first + counts[i] == static_cast<int32_t>(s.tokens.size());
    FillSampling(s, st);
    s.grammar_stuck = false;
    s.grammar_ended = false;
    if (st.sample && s.req.grammar) {
      // A mask already known is used now; a new one is found by the walk below while the
      // step's forward pass runs (on a GPU the host is otherwise idle then).
      const Clock::time_point g0 = Clock::now();
      s.mask = s.req.grammar->CachedMask(s.grammar_state);
      if (s.mask) {
        ApplyMask(s, st);
      } else {
        unmasked.push_back(i);
      }
      grammar_seconds_ += Seconds(Clock::now() - g0);
    }
  }
  const std::function<Status()> find_masks = [&]() -> Status {
    if (unmasked.empty()) return Status::Ok();
    const Clock::time_point g0 = Clock::now();
    for (size_t i : unmasked) {
      Seq& s = *seqs[i];
      s.mask = s.req.grammar->Mask(s.grammar_state);
      ApplyMask(s, steps[i]);
    }
    grammar_seconds_ += Seconds(Clock::now() - g0);
    return Status::Ok();
  };
  Result<std::vector<engine::SeqResult>> result = [&]() -> Result<std::vector<engine::SeqResult>> {
    try {
      if (!step_) return executor_->Step(steps, find_masks);
      FERRY_RETURN_IF_ERROR(find_masks());
      return step_(steps);
    } catch (const std::exception& e) {
      return Internal(std::string("step failed: ") + e.what());
    }
  }();
  if (!result.ok()) return result.status();
  std::vector<engine::SeqResult>& results = result.value();
  if (results.size() != seqs.size()) return Internal("the step returned the wrong number of results");
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = *seqs[i];
    engine::SeqResult& r = results[i];
    if (!r.targets.empty()) {
      if (s.pending_prompt.empty()) s.pending_prompt.push_back(TokenOutput{s.tokens[0], 0.0f, {}});
      for (TokenOutput& t : r.targets) s.pending_prompt.push_back(std::move(t));
    }
    s.num_computed += counts[i];
    if (cache_->prefix_caching()) {
      // Full blocks computed by now become findable (before a finished request frees them).
      cache_->HashBlocks(s.tokens, s.block_hashes);
      cache_->CacheFullBlocks(static_cast<int64_t>(s.handle), s.block_hashes, s.tokens, s.num_computed);
    }
    if (s.num_computed < static_cast<int32_t>(s.tokens.size())) {
      // Mid-prefill chunk: nothing to report yet, except kept logits.
      if (!r.logits.empty()) {
        GenerationEvent& ev = NewEvent(s, out);
        ev.logits = std::move(r.logits);
        ev.generated_tokens_count = s.generated;
      }
      continue;
    }
    TakeToken(s, r, out);
  }
  return Status::Ok();
}

void EngineCore::TakeToken(Seq& s, engine::SeqResult& r, std::vector<GenerationEvent>& out) {
  if (s.grammar_ended) {
    // The output was already complete, and no token can continue it: it ends before this
    // step's token (which is dropped), as it would have at its last token had its mask
    // been known then.
    GenerationEvent& ev = NewEvent(s, out);
    ev.generated_tokens_count = s.generated;
    ev.finished = true;
    ev.finish_reason = FinishReason::kStop;
    Remove(s.handle);
    return;
  }
  if (!r.finite || r.token < 0) {
    Fail(s, Internal("the model produced non-finite logits for this request"), "nonfinite_logits", out);
    return;
  }
  if (s.grammar_stuck) {
    Fail(s, InvalidArgument("no token of the model's vocabulary can continue the structured output here"), "grammar",
         out);
    return;
  }
  const int32_t next = r.token;
  const bool eos = std::find(s.stop_set.begin(), s.stop_set.end(), next) != s.stop_set.end();
  bool grammar_done = false;
  Status grammar_error;
  if (s.req.grammar && !eos) {
    const Clock::time_point g0 = Clock::now();
    s.grammar_state = s.req.grammar->Advance(s.grammar_state, next);
    if (s.grammar_state == structured::TokenMatcher::kDead) {
      grammar_error = Internal("the sampled token is outside the structured output's grammar");
    } else if (s.grammar_state == structured::TokenMatcher::kTooLarge) {
      grammar_error = ResourceExhausted("the structured output's grammar needs more parser states than the limit");
    } else {
      // Found now rather than next step: a complete output ends here, without another step.
      // A complete output that no token of the vocabulary continues (while the grammar
      // still allows more bytes) is known only with its mask; an unknown mask is not
      // walked here, on the critical path, but in the next step (ApplyMask).
      if (s.req.grammar->Finished(s.grammar_state)) {
        grammar_done = true;
      } else if (const auto m = s.req.grammar->CachedMask(s.grammar_state)) {
        grammar_done = m->accepting && m->allowed == 0;
      }
    }
    grammar_seconds_ += Seconds(Clock::now() - g0);
  }
  GenerationEvent& ev = NewEvent(s, out);
  r.sampled.token = next;
  ev.tokens.push_back(std::move(r.sampled));
  ev.logits = std::move(r.logits);
  if (s.req.prompt_logprobs) s.prompt_logprobs_done = true;
  s.tokens.push_back(next);
  s.generated += 1;
  ev.generated_tokens_count = s.generated;
  if (eos || grammar_done) {
    ev.finished = true;
    ev.finish_reason = FinishReason::kStop;
  } else if (s.generated >= s.req.max_tokens || static_cast<int>(s.tokens.size()) >= max_seq_len_) {
    ev.finished = true;
    ev.finish_reason = FinishReason::kLength;
  }
  if (ev.finished) {
    Remove(s.handle);
  } else if (!grammar_error.ok()) {
    Fail(s, grammar_error, "grammar", out);
  }
}

Result<std::vector<GenerationEvent>> GenerateAll(EngineCore& core, std::vector<GenerationRequest> requests) {
  std::vector<GenerationEvent> merged(requests.size());
  std::unordered_map<uint64_t, size_t> index;
  // Handles above anything a server would have used; the core is ours for the call.
  uint64_t handle = 1ull << 62;
  size_t pending = 0;
  for (const GenerationRequest& r : requests) {
    if (r.max_tokens == 0 && !r.prompt.empty()) continue;
    FERRY_RETURN_IF_ERROR(core.Validate(r));  // all before any runs
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    GenerationRequest& r = requests[i];
    merged[i].prompt_tokens_count = static_cast<int32_t>(r.prompt.size());
    if (r.max_tokens == 0 && !r.prompt.empty()) {  // nothing to generate
      merged[i].finished = true;
      merged[i].finish_reason = FinishReason::kLength;
      continue;
    }
    while (core.Contains(handle)) ++handle;
    merged[i].handle = handle;
    index[handle] = i;
    core.Add(handle++, std::move(r));
    ++pending;
  }
  std::vector<GenerationEvent> events;
  while (pending > 0) {
    events.clear();
    const bool progressed = core.Step(events);
    for (GenerationEvent& ev : events) {
      auto it = index.find(ev.handle);
      if (it == index.end()) continue;
      GenerationEvent& m = merged[it->second];
      for (TokenOutput& t : ev.tokens) m.tokens.push_back(std::move(t));
      for (TokenOutput& t : ev.prompt_tokens) m.prompt_tokens.push_back(std::move(t));
      m.logits.insert(m.logits.end(), ev.logits.begin(), ev.logits.end());
      m.generated_tokens_count = ev.generated_tokens_count;
      if (ev.queue_seconds > 0) m.queue_seconds = ev.queue_seconds;
      if (ev.finished) {
        m.finished = true;
        m.finish_reason = ev.finish_reason;
        m.error = ev.error;
        m.failure_reason = ev.failure_reason;
        --pending;
      }
    }
    if (!progressed && !events.empty()) continue;
    if (!progressed && pending > 0) {
      // Nothing fits and nothing can leave: the KV cache is too small for these requests.
      for (auto& [h, i] : index) core.Finish(h, FinishReason::kAbort, events);
      return ResourceExhausted("the KV cache of model '" + core.name() + "' cannot hold these requests");
    }
  }
  return merged;
}

std::map<int64_t, int> EngineCore::WaitingByPriority() const {
  std::map<int64_t, int> counts;
  for (uint64_t handle : waiting_) {
    auto it = seqs_.find(handle);
    if (it != seqs_.end()) counts[it->second->req.priority] += 1;
  }
  return counts;
}

}  // namespace ferry::sched
