#include "serve/generation_job.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <mutex>
#include <random>

namespace ferry::serve {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

MaybeError ReadStops(const json& body, GenerationParams& p) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) {
    p.stops.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    for (const json& s : *it) {
      if (!s.is_string()) return BadRequest("stop must be a string or an array of strings", "stop");
      p.stops.push_back(s.get<std::string>());
    }
  } else {
    return BadRequest("stop must be a string or an array of strings", "stop");
  }
  if (static_cast<int>(p.stops.size()) > kMaxStops) {
    return BadRequest("at most " + std::to_string(kMaxStops) + " stop sequences are allowed", "stop");
  }
  for (const std::string& s : p.stops) {
    if (s.empty()) return BadRequest("stop sequences must not be empty", "stop");
  }
  return std::nullopt;
}

MaybeError ReadTokenIds(const json& body, const char* name, int32_t vocab, std::vector<int32_t>& out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_array()) return BadRequest(std::string(name) + " must be an array of token ids", name);
  for (const json& v : *it) {
    if (!v.is_number_integer()) return BadRequest(std::string(name) + " must be an array of token ids", name);
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id >= vocab) {
      return BadRequest(std::string(name) + ": token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                            std::to_string(vocab) + ")", name);
    }
    out.push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

// OpenAI's logit_bias: {"token id": bias}, ids as strings, biases in [-100, 100].
MaybeError ReadLogitBias(const json& body, int32_t vocab, engine::SamplingParams& s) {
  auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) return BadRequest("logit_bias must be an object of token id -> bias", "logit_bias");
  if (it->size() > 1024) return BadRequest("logit_bias may name at most 1024 tokens", "logit_bias");
  for (auto kv = it->begin(); kv != it->end(); ++kv) {
    const std::string& key = kv.key();
    char* end = nullptr;
    const long long id = std::strtoll(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || id < 0 || id >= vocab) {
      return BadRequest("logit_bias: '" + key + "' is not a token id in [0, " + std::to_string(vocab) + ")",
                        "logit_bias");
    }
    if (!kv.value().is_number()) return BadRequest("logit_bias values must be numbers", "logit_bias");
    const double bias = kv.value().get<double>();
    if (!(bias >= -100.0 && bias <= 100.0)) return BadRequest("logit_bias values must be in [-100, 100]", "logit_bias");
    s.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
  }
  return std::nullopt;
}

}  // namespace

const char* const kGenerationFields[] = {
    "model",          "temperature",        "top_p",          "top_k",          "min_p",
    "seed",           "n",                  "stop",           "stop_token_ids", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "logit_bias",  "min_tokens",     "ignore_eos",
    "skip_special_tokens", "stream",        "stream_options", "user",           "priority",
    "return_token_ids", "response_format", "structured_outputs", "guided_json", "guided_regex", "guided_choice",
    "guided_grammar", "guided_whitespace_pattern", "guided_decoding_backend", nullptr};

std::string RandomId(const char* prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   static_cast<uint64_t>(Clock::now().time_since_epoch().count()));
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%s%016llx%08llx", prefix, static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xffffffffu));
  return buf;
}

int64_t SchedulerPriority(const Principal& who, int64_t request_priority) {
  constexpr int64_t kTierStride = int64_t{1} << 32;
  const int64_t within = std::clamp<int64_t>(request_priority, std::numeric_limits<int32_t>::min(),
                                             std::numeric_limits<int32_t>::max());
  return static_cast<int64_t>(std::max(who.priority, 1) - 1) * kTierStride + within;
}

MaybeError CheckUnknownFields(const json& obj, std::initializer_list<const char*> known, RequestContext& ctx,
                              UnknownFields policy) {
  std::string ignored;
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    for (const char* const* k = kGenerationFields; *k != nullptr && !ok; ++k) ok = it.key() == *k;
    if (ok) continue;
    if (policy == UnknownFields::kReject) {
      return BadRequest("unrecognized request argument supplied: " + it.key(), it.key());
    }
    ignored += (ignored.empty() ? "" : ", ") + it.key();
  }
  if (!ignored.empty()) {
    // vLLM ignores unknown fields and says so; an HTTP Warning (code 299, "miscellaneous
    // persistent warning") carries it to the client, the log line to the operator.
    std::string quoted;
    for (char c : ignored) {
      if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') quoted += c;
    }
    ctx.AddResponseHeader("Warning", "299 ferry \"unrecognized request arguments ignored: " + quoted.substr(0, 512) + "\"");
    ctx.SetLog("ignored_fields", ignored);
  }
  return std::nullopt;
}

MaybeError ReadGenerationFields(const json& body, const ServedModel& model, const Principal& who,
                                const RouteEnv& env, GenerationParams& p) {
  const int32_t vocab = model.engine().config().vocab_size;
  int64_t v = 1;
  if (auto e = ReadInt(body, "n", 1, env.max_choices, v)) return e;
  p.n = static_cast<int>(v);
  double d = 1.0;
  if (auto e = ReadNumber(body, "temperature", 0.0, 2.0, d)) return e;
  p.sampling.temperature = static_cast<float>(d);
  d = 1.0;
  if (auto e = ReadNumber(body, "top_p", 0.0, 1.0, d)) return e;
  if (d <= 0.0) return BadRequest("top_p must be in (0, 1]", "top_p");
  p.sampling.top_p = static_cast<float>(d);
  v = 0;
  if (auto e = ReadInt(body, "top_k", -1, 1 << 20, v)) return e;
  p.sampling.top_k = v < 0 ? 0 : static_cast<int>(v);
  d = 0.0;
  if (auto e = ReadNumber(body, "min_p", 0.0, 1.0, d)) return e;
  p.sampling.min_p = static_cast<float>(d);
  d = 1.0;
  if (auto e = ReadNumber(body, "repetition_penalty", 1e-3, 100.0, d)) return e;
  p.sampling.repetition_penalty = static_cast<float>(d);
  d = 0.0;
  if (auto e = ReadNumber(body, "presence_penalty", -2.0, 2.0, d)) return e;
  p.sampling.presence_penalty = static_cast<float>(d);
  d = 0.0;
  if (auto e = ReadNumber(body, "frequency_penalty", -2.0, 2.0, d)) return e;
  p.sampling.frequency_penalty = static_cast<float>(d);
  if (auto e = ReadLogitBias(body, vocab, p.sampling)) return e;
  if (body.contains("seed") && !body["seed"].is_null()) {
    int64_t seed = 0;
    if (auto e = ReadInt(body, "seed", INT64_MIN, INT64_MAX, seed)) return e;
    p.sampling.seed = static_cast<uint64_t>(seed);
  }
  if (auto e = ReadStops(body, p)) return e;
  if (auto e = ReadTokenIds(body, "stop_token_ids", vocab, p.stop_token_ids)) return e;
  v = 0;
  if (auto e = ReadInt(body, "min_tokens", 0, 1 << 20, v)) return e;
  p.min_tokens = static_cast<int>(v);
  if (auto e = ReadBool(body, "ignore_eos", p.ignore_eos)) return e;
  if (auto e = ReadBool(body, "skip_special_tokens", p.skip_special_tokens)) return e;
  if (auto e = ReadBool(body, "stream", p.stream)) return e;
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return BadRequest("stream_options must be an object", "stream_options");
    if (!p.stream) return BadRequest("stream_options is only allowed when stream is true", "stream_options");
    for (auto f = it->begin(); f != it->end(); ++f) {
      if (f.key() != "include_usage" && f.key() != "continuous_usage_stats") {
        return BadRequest("unrecognized stream_options field: " + f.key(), "stream_options");
      }
    }
    if (auto e = ReadBool(*it, "include_usage", p.include_usage)) return e;
    if (auto e = ReadBool(*it, "continuous_usage_stats", p.continuous_usage)) return e;
  }
  if (auto e = ReadString(body, "user", p.user)) return e;
  if (auto e = ReadBool(body, "return_token_ids", p.return_token_ids)) return e;
  if (model.engine().tokenizer() == nullptr) p.return_token_ids = true;
  int64_t priority = 0;
  if (auto e = ReadInt(body, "priority", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(),
                       priority)) {
    return e;
  }
  p.priority = SchedulerPriority(who, priority);
  return std::nullopt;
}

MaybeError CheckContextLength(const ServedModel& model, const GenerationParams& p) {
  if (p.min_tokens > p.max_tokens) {
    return BadRequest("min_tokens (" + std::to_string(p.min_tokens) + ") must not exceed max_tokens (" +
                          std::to_string(p.max_tokens) + ")", "min_tokens");
  }
  for (const auto& prompt : p.prompts) {
    const int64_t total = static_cast<int64_t>(prompt.size()) + p.max_tokens;
    if (total > model.max_seq_len()) {
      return BadRequest("this model's maximum context length is " + std::to_string(model.max_seq_len()) +
                            " tokens; the prompt has " + std::to_string(prompt.size()) +
                            " tokens and max_tokens is " + std::to_string(p.max_tokens),
                        "max_tokens", "context_length_exceeded");
    }
  }
  return std::nullopt;
}

namespace {

// One request's choices in flight. The batcher thread only queues each event; the output
// processing (detokenizing, stop strings, log-probabilities) and the formatting run on the
// request's serial queue on the server's output workers. Thread-safe: the disconnect notice
// arrives on an I/O thread.
class GenerationJob : public std::enable_shared_from_this<GenerationJob> {
 public:
  GenerationJob(std::shared_ptr<RequestContext> ctx, ServedModel& model, GenerationParams params,
                std::unique_ptr<GenerationFormat> format, ThreadPool& workers)
      : ctx_(std::move(ctx)), model_(model), p_(std::move(params)), format_(std::move(format)),
        tok_(model.engine().tokenizer()), id_(RandomId(format_->IdPrefix().c_str())), created_(UnixNow()),
        tier_(ctx_->metrics().ForTier(model.name(), ctx_->principal().tier)), queue_(workers) {}

  void Start() {
    const int total = static_cast<int>(p_.prompts.size()) * p_.n;
    choices_.resize(total);
    std::vector<int32_t> stop_ids = p_.ignore_eos ? std::vector<int32_t>() : model_.engine().StopIds();
    stop_ids.insert(stop_ids.end(), p_.stop_token_ids.begin(), p_.stop_token_ids.end());
    for (int i = 0; i < total; ++i) {
      Choice& c = choices_[i];
      c.index = i;
      c.prompt = i / p_.n;
      OutputSpec spec;
      spec.stops = p_.stops;
      spec.logprobs = p_.logprobs;
      spec.skip_special_tokens = p_.skip_special_tokens;
      spec.stop_ids = stop_ids;
      spec.min_tokens = p_.min_tokens;
      if (p_.echo) spec.echo = p_.prompt_texts[c.prompt];
      c.out = std::make_unique<OutputProcessor>(tok_, std::move(spec));
    }
    for (const auto& prompt : p_.prompts) prompt_tokens_ += static_cast<int64_t>(prompt.size());
    remaining_ = total;
    ctx_->SetLog("model", model_.name());
    ctx_->SetLog("completion_id", id_);
    ctx_->SetUserLog(p_.user);
    auto self = shared_from_this();
    ctx_->writer().OnDisconnect([self] { self->CancelAll("client disconnected"); });
    for (int i = 0; i < total; ++i) {
      sched::GenerationRequest r;
      r.id = id_ + "-" + std::to_string(i);
      r.prompt = p_.prompts[choices_[i].prompt];
      r.sampling = p_.sampling;
      if (r.sampling.seed && p_.n > 1) *r.sampling.seed += static_cast<uint64_t>(i % p_.n);
      r.max_tokens = p_.max_tokens;
      r.stop_ids = model_.engine().StopIds();
      r.ignore_eos = p_.ignore_eos;
      r.stop_token_ids = p_.stop_token_ids;
      r.min_tokens = p_.min_tokens;
      r.grammar = p_.grammar;
      r.logprobs = p_.logprobs;
      r.prompt_logprobs = p_.echo && p_.logprobs >= 0;
      r.priority = p_.priority;
      r.sibling = i;
      r.tier = ctx_->principal().tier;
      r.arrival = ctx_->arrival();
      r.on_event = [self, i](sched::GenerationEvent& ev) {
        self->queue_.Post([self, i, ev = std::move(ev), at = Clock::now()] { self->Process(i, ev, at); });
        return sched::EventAction::kContinue;
      };
      // A single-choice request that has not started may move to another variant of its
      // group (a QoS switch); one with several choices stays where all of them are.
      r.movable = total == 1;
      r.on_moved = [self, i](sched::ContinuousBatcher& to, uint64_t handle, const std::string& label) {
        self->Moved(i, to, handle, label);
      };
      choices_[i].batcher = model_.decoder();
      Result<uint64_t> h = model_.decoder()->Submit(std::move(r));
      std::lock_guard<std::mutex> lock(mu_);
      if (!h.ok()) {
        // Nothing of this request runs: cancel what was queued and answer with the error.
        ApiError err = FromStatus(h.status(), "prompt");
        if (err.http_status == 429) {
          err.retry_after_s = static_cast<int>(std::min<int64_t>(60, model_.decoder()->EstimatedWaitMs() / 1000 + 1));
        }
        ctx_->metrics().RecordFailure(model_.name(), ctx_->principal().tier,
                                      err.http_status == 429 ? kFailureRejectedQueueFull : kFailureInvalidRequest);
        answered_ = true;
        for (int j = 0; j < i; ++j) choices_[j].batcher->Cancel(choices_[j].handle);
        ctx_->ReplyError(err);
        return;
      }
      Choice& c = choices_[i];
      if (!c.moved) c.handle = h.value();  // it may have moved already (Moved set the new one)
      if (cancelled_) c.batcher->Cancel(c.handle);
    }
  }

 private:
  struct Choice {
    int index = 0;
    int prompt = 0;
    uint64_t handle = 0;
    sched::ContinuousBatcher* batcher = nullptr;  // where it waits or runs (moves before it starts)
    bool moved = false;
    std::unique_ptr<OutputProcessor> out;
    bool done = false;
    Clock::time_point last_token;
  };

  void CancelAll(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    for (Choice& c : choices_) {
      if (!c.done && c.handle != 0) c.batcher->Cancel(c.handle);
    }
    ctx_->SetLog("cancelled", why);
  }

  // Choice `i` moved, before it started, to another variant's batcher. A cancel or an early
  // stop that went to the old batcher in the meantime found nothing there: repeat it.
  void Moved(int i, sched::ContinuousBatcher& to, uint64_t handle, const std::string& label) {
    std::lock_guard<std::mutex> lock(mu_);
    Choice& c = choices_[i];
    c.batcher = &to;
    c.handle = handle;
    c.moved = true;
    if (cancelled_ || c.done || failed_) to.Cancel(handle);
    ctx_->SetResponseHeader("X-Ferry-Variant", label);
    ctx_->SetLog("variant", label);
  }

  // One event of choice `i`, on the output worker; `at` is when the batcher produced it.
  void Process(int i, const sched::GenerationEvent& ev, Clock::time_point at) {
    std::lock_guard<std::mutex> lock(mu_);
    Choice& c = choices_[i];
    if (c.done) return;  // a stop string ended it; the engine's last events are not needed
    if (!queue_recorded_ && (ev.queue_seconds > 0 || !ev.tokens.empty())) {
      tier_.request_queue_time_seconds->Observe(ev.queue_seconds);  // the first scheduled choice's wait
      queue_recorded_ = true;
    }
    const int64_t before = c.out->generated_tokens();
    const bool ended = c.out->Add(ev);
    const int64_t added = c.out->generated_tokens() - before;
    for (int64_t k = 0; k < added; ++k) {
      if (!first_token_seen_) {
        first_token_seen_ = true;
        tier_.time_to_first_token_seconds->Observe(std::chrono::duration<double>(at - ctx_->arrival()).count());
      } else if (before + k > 0) {
        tier_.inter_token_latency_seconds->Observe(std::chrono::duration<double>(at - c.last_token).count());
      }
      c.last_token = at;
    }
    completion_tokens_ += added;
    if (ended) {
      c.done = true;
      if (c.out->stopped() && !ev.finished) c.batcher->Cancel(c.handle);  // end the sequence early
      if (!c.out->error().ok() && !failed_) {
        failed_ = true;
        failure_ = FromStatus(c.out->error());
        failure_reason_ = c.out->failure_reason().empty() ? kFailureEngineError : c.out->failure_reason();
        if (failure_reason_ == kFailureQueueTimeout) failure_.code = std::string(kFailureQueueTimeout);
        for (Choice& o : choices_) {
          if (!o.done && o.handle != 0) o.batcher->Cancel(o.handle);
        }
      } else if (c.out->finish_reason() == "abort") {
        aborted_ = true;
      }
    }
    if (p_.stream && !answered_) StreamChoice(c);
    if (ended && --remaining_ == 0) Complete();
  }

  void EnsureStreamStarted() {
    if (stream_started_) return;
    stream_started_ = true;
    ResponseWriter::Headers headers = ctx_->ResponseHeaders();
    headers.emplace_back("Cache-Control", "no-cache");
    ctx_->writer().StartStream(200, "text/event-stream", std::move(headers));
  }

  void SendEvent(const json& chunk) { ctx_->writer().Write("data: " + Dump(chunk) + "\n\n"); }

  json ChunkBase(bool chunk) const {
    return json{{"id", id_}, {"object", format_->Object(chunk)}, {"created", created_}, {"model", model_.name()}};
  }

  // Streams what of the choice's output is final.
  void StreamChoice(Choice& c) {
    if (failed_) return;
    if (c.done && c.out->finish_reason().empty()) return;  // failed: handled in Complete
    OutputDelta d = c.out->TakeDelta();
    std::vector<json> choices;
    format_->StreamChoice(c.index, *c.out, d, choices);
    for (json& choice : choices) {
      EnsureStreamStarted();
      json chunk = ChunkBase(true);
      chunk["choices"] = json::array({std::move(choice)});
      if (p_.include_usage) chunk["usage"] = p_.continuous_usage ? Usage() : json(nullptr);
      SendEvent(chunk);
    }
  }

  json Usage() const {
    return json{{"prompt_tokens", prompt_tokens_}, {"completion_tokens", completion_tokens_},
                {"total_tokens", prompt_tokens_ + completion_tokens_}};
  }

  void RecordOutcome(const std::string& finish) {
    const double e2e = std::chrono::duration<double>(Clock::now() - ctx_->arrival()).count();
    tier_.e2e_request_latency_seconds->Observe(e2e);
    tier_.prompt_tokens->Inc(static_cast<double>(prompt_tokens_));
    tier_.generation_tokens->Inc(static_cast<double>(completion_tokens_));
    tier_.request_prompt_tokens->Observe(static_cast<double>(prompt_tokens_));
    tier_.request_generation_tokens->Observe(static_cast<double>(completion_tokens_));
    ctx_->SetLog("prompt_tokens", prompt_tokens_);
    ctx_->SetLog("completion_tokens", completion_tokens_);
    ctx_->CountTokens(prompt_tokens_ + completion_tokens_);
    ctx_->SetLog("finish_reason", finish);
  }

  // Every choice has finished: answer (or end the stream).
  void Complete() {
    if (answered_) return;
    answered_ = true;
    const std::string& model = model_.name();
    const std::string& tier = ctx_->principal().tier;
    if (failed_) {
      RecordOutcome("error");
      ctx_->metrics().RecordFailure(model, tier, failure_reason_);
      if (stream_started_) {
        SendEvent(json::parse(failure_.Body()));
        ctx_->writer().Write("data: [DONE]\n\n");
        ctx_->FinishStream(failure_.http_status);
      } else {
        ctx_->ReplyError(failure_);
      }
      return;
    }
    if (aborted_) {
      RecordOutcome("abort");
      ctx_->metrics().RecordSuccess(model, tier, kFinishedAbort);
      if (stream_started_) {
        ctx_->FinishStream(499);
      } else {
        ApiError e;
        e.http_status = ctx_->writer().disconnected() ? 499 : 503;
        e.message = "the request was cancelled";
        e.type = "server_error";
        ctx_->ReplyError(e);
      }
      return;
    }
    std::string finish = choices_.empty() ? "length" : choices_[0].out->finish_reason();
    RecordOutcome(finish);
    for (const Choice& c : choices_) ctx_->metrics().RecordSuccess(model, tier, c.out->finish_reason());
    if (p_.stream) {
      EnsureStreamStarted();
      if (p_.include_usage) {
        json chunk = ChunkBase(true);
        chunk["choices"] = json::array();
        chunk["usage"] = Usage();
        SendEvent(chunk);
      }
      ctx_->writer().Write("data: [DONE]\n\n");
      ctx_->FinishStream(200);
      return;
    }
    json out = ChunkBase(false);
    out["choices"] = json::array();
    for (Choice& c : choices_) out["choices"].push_back(format_->FinalChoice(c.index, *c.out));
    out["usage"] = Usage();
    ctx_->ReplyJson(200, out);
  }

  std::shared_ptr<RequestContext> ctx_;
  ServedModel& model_;
  const GenerationParams p_;
  std::unique_ptr<GenerationFormat> format_;  // used under mu_
  const tokenizer::Tokenizer* tok_;
  const std::string id_;
  const int64_t created_;
  ServerMetrics::TierMetrics tier_;
  SerialQueue queue_;  // this request's output work, in event order

  std::mutex mu_;
  std::vector<Choice> choices_;    // GUARDED_BY(mu_)
  int remaining_ = 0;              // GUARDED_BY(mu_)
  int64_t prompt_tokens_ = 0;
  int64_t completion_tokens_ = 0;  // GUARDED_BY(mu_)
  bool first_token_seen_ = false;
  bool queue_recorded_ = false;
  bool stream_started_ = false;
  bool answered_ = false;
  bool cancelled_ = false;
  bool failed_ = false;
  bool aborted_ = false;
  ApiError failure_;
  std::string failure_reason_;
};

}  // namespace

void RunGeneration(std::shared_ptr<RequestContext> ctx, ServedModel& model, GenerationParams params,
                   std::unique_ptr<GenerationFormat> format, ThreadPool& output_workers) {
  auto job = std::make_shared<GenerationJob>(std::move(ctx), model, std::move(params), std::move(format),
                                             output_workers);
  job->Start();
}

}  // namespace ferry::serve
