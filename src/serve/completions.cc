#include "serve/completions.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <random>

#include "core/thread_pool.h"
#include "serve/output_processor.h"
#include "serve/request_fields.h"
#include "tokenizer/tokenizer.h"

namespace ferry::serve {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kMaxChoices = 64;
constexpr int kMaxStops = 4;
constexpr int kMaxLogprobs = 20;

struct CompletionParams {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> prompt_texts;  // for echo
  int n = 1;
  int max_tokens = 16;
  engine::SamplingParams sampling;
  std::vector<std::string> stops;
  bool stream = false;
  bool include_usage = false;
  int logprobs = -1;
  bool echo = false;
  bool ignore_eos = false;
  bool return_token_ids = false;  // extension: the generated ids with the text (always for tokenizer-less models)
  int priority = 1;
  std::string user;
};

std::string RandomId(const char* prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}() ^ static_cast<uint64_t>(Clock::now().time_since_epoch().count()));
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%s%016llx%08llx", prefix, static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xffffffffu));
  return buf;
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

MaybeError ReadPrompts(const json& body, const ServedModel& model, CompletionParams& p) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return BadRequest("missing required field: prompt", "prompt");
  const engine::Engine& e = model.engine();
  // A prompt that truncate_prompt_tokens will cut may be longer than the context.
  auto cut = body.find("truncate_prompt_tokens");
  const bool truncating = cut != body.end() && !cut->is_null();
  auto add_text = [&](const std::string& text) -> MaybeError {
    if (e.tokenizer() == nullptr) return BadRequest("this model has no tokenizer; send the prompt as token ids", "prompt");
    if (!truncating && e.TextSurelyLongerThan(text, model.max_seq_len())) {
      return BadRequest("the prompt has " + std::to_string(text.size()) + " bytes, more than " +
                            std::to_string(model.max_seq_len()) + " tokens (this model's maximum context length) "
                            "can hold", "prompt", "context_length_exceeded");
    }
    auto ids = e.EncodePrompt(text);
    if (!ids.ok()) return BadRequest("cannot tokenize the prompt: " + ids.status().message(), "prompt");
    if (ids.value().empty()) return BadRequest("the prompt is empty", "prompt");
    p.prompts.push_back(std::move(ids).value());
    p.prompt_texts.push_back(text);
    return std::nullopt;
  };
  auto add_ids = [&](const json& arr) -> MaybeError {
    if (arr.empty()) return BadRequest("a token-id prompt must not be empty", "prompt");
    std::vector<int32_t> ids;
    for (const json& v : arr) {
      if (!v.is_number_integer()) return BadRequest("prompt token ids must be integers", "prompt");
      const int64_t id = v.get<int64_t>();
      if (id < 0 || id >= e.config().vocab_size) {
        return BadRequest("prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(e.config().vocab_size) + ")", "prompt");
      }
      ids.push_back(static_cast<int32_t>(id));
    }
    std::string text;
    if (e.tokenizer() != nullptr) {
      auto t = e.tokenizer()->Decode(ids, false);
      if (t.ok()) text = t.value();
    }
    p.prompts.push_back(std::move(ids));
    p.prompt_texts.push_back(std::move(text));
    return std::nullopt;
  };
  return ForEachTextOrIds(*it, "prompt", kMaxChoices, add_text, add_ids);
}

// vLLM's truncate_prompt_tokens: keep the last N tokens of each prompt (-1: as many as the
// context leaves beside max_tokens).
MaybeError TruncatePrompts(const json& body, const ServedModel& model, CompletionParams& p) {
  auto it = body.find("truncate_prompt_tokens");
  if (it == body.end() || it->is_null()) return std::nullopt;
  int64_t keep = 0;
  if (auto e = ReadInt(body, "truncate_prompt_tokens", -1, model.max_seq_len(), keep)) return e;
  if (keep == 0) {
    return BadRequest("truncate_prompt_tokens must be >= 1, or -1 for the model's context", "truncate_prompt_tokens");
  }
  if (keep < 0) keep = std::max<int64_t>(1, model.max_seq_len() - p.max_tokens);
  const tokenizer::Tokenizer* tok = model.engine().tokenizer();
  for (size_t i = 0; i < p.prompts.size(); ++i) {
    std::vector<int32_t>& prompt = p.prompts[i];
    if (static_cast<int64_t>(prompt.size()) <= keep) continue;
    prompt.erase(prompt.begin(), prompt.end() - keep);
    p.prompt_texts[i].clear();  // echo shows what the model read
    if (tok != nullptr) {
      auto text = tok->Decode(prompt, false);
      if (text.ok()) p.prompt_texts[i] = std::move(text).value();
    }
  }
  return std::nullopt;
}

MaybeError ParseCompletion(const json& body, const ServedModel& model, const Principal& who, CompletionParams& p) {
  if (auto e = RejectUnknownFields(body, {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p",
                                          "seed", "stop", "stream", "stream_options", "logprobs", "echo", "user", "n",
                                          "best_of", "presence_penalty", "frequency_penalty", "repetition_penalty",
                                          "logit_bias", "suffix", "ignore_eos", "priority", "return_token_ids",
                                          "truncate_prompt_tokens"})) {
    return e;
  }
  if (auto e = ReadPrompts(body, model, p)) return e;
  int64_t v = 0;
  double d = 0;
  v = p.max_tokens;
  if (auto e = ReadInt(body, "max_tokens", 1, 1 << 20, v)) return e;
  p.max_tokens = static_cast<int>(v);
  if (auto e = TruncatePrompts(body, model, p)) return e;
  v = 1;
  if (auto e = ReadInt(body, "n", 1, kMaxChoices, v)) return e;
  p.n = static_cast<int>(v);
  if (body.contains("best_of") && !body["best_of"].is_null()) {
    int64_t best_of = p.n;
    if (auto e = ReadInt(body, "best_of", 1, kMaxChoices, best_of)) return e;
    if (best_of != p.n) return BadRequest("best_of other than n is not supported", "best_of");
  }
  if (static_cast<int64_t>(p.prompts.size()) * p.n > kMaxChoices) {
    return BadRequest("prompts x n must not exceed " + std::to_string(kMaxChoices), "n");
  }
  d = 1.0;
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
  for (const char* pen : {"presence_penalty", "frequency_penalty"}) {
    d = 0.0;
    if (auto e = ReadNumber(body, pen, -2.0, 2.0, d)) return e;
    if (d != 0.0) return BadRequest(std::string(pen) + " is not supported; use repetition_penalty", pen);
  }
  if (body.contains("seed") && !body["seed"].is_null()) {
    int64_t seed = 0;
    if (auto e = ReadInt(body, "seed", INT64_MIN, INT64_MAX, seed)) return e;
    p.sampling.seed = static_cast<uint64_t>(seed);
  }
  if (auto it = body.find("stop"); it != body.end() && !it->is_null()) {
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
  }
  if (auto e = ReadBool(body, "stream", p.stream)) return e;
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return BadRequest("stream_options must be an object", "stream_options");
    if (!p.stream) return BadRequest("stream_options is only allowed when stream is true", "stream_options");
    if (auto e = RejectUnknownFields(*it, {"include_usage", "continuous_usage_stats"})) return e;
    if (auto e = ReadBool(*it, "include_usage", p.include_usage)) return e;
  }
  if (body.contains("logprobs") && !body["logprobs"].is_null()) {
    int64_t lp = 0;
    if (auto e = ReadInt(body, "logprobs", 0, kMaxLogprobs, lp)) return e;
    p.logprobs = static_cast<int>(lp);
  }
  if (auto e = ReadBool(body, "echo", p.echo)) return e;
  if (auto e = ReadBool(body, "ignore_eos", p.ignore_eos)) return e;
  if (auto e = ReadBool(body, "return_token_ids", p.return_token_ids)) return e;
  if (model.engine().tokenizer() == nullptr) p.return_token_ids = true;
  if (auto e = ReadString(body, "user", p.user)) return e;
  if (auto it = body.find("logit_bias"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return BadRequest("logit_bias must be an object", "logit_bias");
    if (!it->empty()) return BadRequest("logit_bias is not supported", "logit_bias");
  }
  if (auto it = body.find("suffix"); it != body.end() && !it->is_null()) {
    return BadRequest("suffix is not supported", "suffix");
  }
  int64_t priority = who.priority;
  if (auto e = ReadInt(body, "priority", 1, 1000, priority)) return e;
  p.priority = std::max<int>(who.priority, static_cast<int>(priority));  // a request may only lower its priority
  // The context check (prompt + max_tokens) with a clear message, before queueing.
  for (const auto& prompt : p.prompts) {
    const int64_t total = static_cast<int64_t>(prompt.size()) + p.max_tokens;
    if (total > model.max_seq_len()) {
      return BadRequest("this model's maximum context length is " + std::to_string(model.max_seq_len()) +
                            " tokens; the prompt has " + std::to_string(prompt.size()) + " tokens and max_tokens is " +
                            std::to_string(p.max_tokens), "max_tokens", "context_length_exceeded");
    }
  }
  return std::nullopt;
}

json LogprobsJson(const std::vector<LogprobEntry>& entries) {
  json lp = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
             {"text_offset", json::array()}};
  for (const LogprobEntry& e : entries) {
    lp["tokens"].push_back(e.token);
    lp["token_logprobs"].push_back(e.logprob ? json(*e.logprob) : json(nullptr));
    if (e.has_top) {
      json top = json::object();
      for (const auto& [token, value] : e.top) top[token] = value;
      lp["top_logprobs"].push_back(std::move(top));
    } else {
      lp["top_logprobs"].push_back(nullptr);
    }
    lp["text_offset"].push_back(e.text_offset);
  }
  return lp;
}

// One request's choices in flight. The batcher thread only queues each event; the output
// processing (detokenizing, stop strings, log-probabilities) and the formatting run on the
// request's serial queue on the server's output workers. Thread-safe: the disconnect notice
// arrives on an I/O thread.
class CompletionJob : public std::enable_shared_from_this<CompletionJob> {
 public:
  CompletionJob(std::shared_ptr<RequestContext> ctx, ServedModel& model, CompletionParams params, ThreadPool& workers)
      : ctx_(std::move(ctx)), model_(model), p_(std::move(params)), tok_(model.engine().tokenizer()),
        id_(RandomId("cmpl-")), created_(UnixNow()),
        tier_(ctx_->metrics().ForTier(model.name(), ctx_->principal().tier)), queue_(workers) {}

  void Start() {
    const int total = static_cast<int>(p_.prompts.size()) * p_.n;
    choices_.resize(total);
    for (int i = 0; i < total; ++i) {
      Choice& c = choices_[i];
      c.index = i;
      c.prompt = i / p_.n;
      OutputSpec spec;
      spec.stops = p_.stops;
      spec.logprobs = p_.logprobs;
      if (p_.echo) spec.echo = p_.prompt_texts[c.prompt];
      c.out = std::make_unique<OutputProcessor>(tok_, std::move(spec));
      prompt_tokens_ += static_cast<int64_t>(p_.prompts[c.prompt].size());
    }
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
        for (int j = 0; j < i; ++j) model_.decoder()->Cancel(choices_[j].handle);
        ctx_->ReplyError(err);
        return;
      }
      choices_[i].handle = h.value();
      if (cancelled_) model_.decoder()->Cancel(h.value());
    }
  }

 private:
  struct Choice {
    int index = 0;
    int prompt = 0;
    uint64_t handle = 0;
    std::unique_ptr<OutputProcessor> out;
    bool done = false;
    Clock::time_point last_token;
  };

  void CancelAll(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    for (Choice& c : choices_) {
      if (!c.done && c.handle != 0) model_.decoder()->Cancel(c.handle);
    }
    ctx_->SetLog("cancelled", why);
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
      if (c.out->stopped() && !ev.finished) model_.decoder()->Cancel(c.handle);  // end the sequence early
      if (!c.out->error().ok() && !failed_) {
        failed_ = true;
        failure_ = FromStatus(c.out->error());
        failure_reason_ = c.out->failure_reason().empty() ? kFailureEngineError : c.out->failure_reason();
        if (failure_reason_ == kFailureQueueTimeout) failure_.code = std::string(kFailureQueueTimeout);
        for (Choice& o : choices_) {
          if (!o.done && o.handle != 0) model_.decoder()->Cancel(o.handle);
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

  json ChunkBase() const {
    return json{{"id", id_}, {"object", "text_completion"}, {"created", created_}, {"model", model_.name()}};
  }

  // Streams what of the choice's output is final.
  void StreamChoice(Choice& c) {
    if (failed_) return;
    if (c.done && c.out->finish_reason().empty()) return;  // failed: handled in Complete
    OutputDelta d = c.out->TakeDelta();
    const bool has_lp = p_.logprobs >= 0 && !d.logprobs.empty();
    const bool has_ids = p_.return_token_ids && !d.token_ids.empty();
    if (d.text.empty() && !has_lp && !has_ids && !c.done) return;
    EnsureStreamStarted();
    json choice = {{"index", c.index}, {"text", std::move(d.text)}};
    choice["logprobs"] = p_.logprobs >= 0 ? LogprobsJson(d.logprobs) : json(nullptr);
    choice["finish_reason"] = c.done ? json(c.out->finish_reason()) : json(nullptr);
    if (p_.return_token_ids) choice["token_ids"] = std::move(d.token_ids);
    json chunk = ChunkBase();
    chunk["choices"] = json::array({choice});
    if (p_.include_usage) chunk["usage"] = nullptr;
    SendEvent(chunk);
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
        json chunk = ChunkBase();
        chunk["choices"] = json::array();
        chunk["usage"] = Usage();
        SendEvent(chunk);
      }
      ctx_->writer().Write("data: [DONE]\n\n");
      ctx_->FinishStream(200);
      return;
    }
    json out = ChunkBase();
    out["choices"] = json::array();
    for (Choice& c : choices_) {
      json choice = {{"index", c.index},
                     {"text", c.out->text()},
                     {"logprobs", p_.logprobs >= 0 ? LogprobsJson(c.out->logprobs()) : json(nullptr)},
                     {"finish_reason", c.out->finish_reason()}};
      if (p_.return_token_ids) choice["token_ids"] = c.out->token_ids();
      out["choices"].push_back(std::move(choice));
    }
    out["usage"] = Usage();
    ctx_->ReplyJson(200, out);
  }

  std::shared_ptr<RequestContext> ctx_;
  ServedModel& model_;
  const CompletionParams p_;
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

void HandleCompletion(std::shared_ptr<RequestContext> ctx, ServedModel& model, const nlohmann::json& body,
                      ThreadPool& output_workers) {
  CompletionParams params;
  if (MaybeError e = ParseCompletion(body, model, ctx->principal(), params)) {
    ctx->metrics().RecordFailure(model.name(), ctx->principal().tier, kFailureInvalidRequest);
    ctx->ReplyError(*e);
    return;
  }
  auto job = std::make_shared<CompletionJob>(ctx, model, std::move(params), output_workers);
  job->Start();
}

}  // namespace ferry::serve
